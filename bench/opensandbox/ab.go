package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// The two sides of every row: OpenSandbox's path and E2B's, to the same
// server.
const (
	osbSide = 0
	e2bSide = 1
)

// sample is one operation on one side: its time, the times of its parts
// by name (create, first command), and the client's CPU over it (-1 when
// the client is this harness, whose CPU is not split per call).
type sample struct {
	total     time.Duration
	parts     map[string]time.Duration
	clientCPU time.Duration
}

// abOp is one operation on side (osbSide or e2bSide).
type abOp func(ctx context.Context, side int) (sample, error)

// row is one operation measured on both sides.
type row struct {
	name      string
	n         int
	times     [2][]time.Duration // sorted
	partNames []string           // in the order the op reported them
	parts     map[string]*[2][]time.Duration
	fails     [2]int
	firstErr  [2]string
	serveCPU  [2]time.Duration // hutch serve's CPU over the side's operations
	clientCPU [2]time.Duration // the client's, over the timed calls
	clientN   [2]int           // operations with a client CPU
	aborted   string           // why the row stopped early, if it did
}

// opTimeout bounds one operation of a raw row.
const opTimeout = 2 * time.Minute

// runAB measures op: warmup iterations on each side (not measured; a
// failure there ends the row), then n iterations, each running op on
// both sides one after the other, the side that goes first alternating
// (A B, B A, …) so that drift and the server's background work hit both.
// between runs after every operation, untimed: a create waits there for
// the warm pool to refill, so that the other side's create never runs
// beside the refill the first one started. hutch serve's CPU is read
// around each operation with cpu.
func (b *bench) runAB(name string, n, warmup int, cpu cpuMeter, op abOp, between func(ctx context.Context) error) *row {
	r := &row{name: name, n: n, parts: map[string]*[2][]time.Duration{}}
	fmt.Printf("    %-70s ", name)
	one := func(side int) {
		ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
		defer cancel()
		since := cpu()
		s, err := op(ctx, side)
		r.serveCPU[side] += since()
		if err != nil {
			r.fails[side]++
			if r.firstErr[side] == "" {
				r.firstErr[side] = harness.OneLine(err.Error())
			}
			return
		}
		r.times[side] = append(r.times[side], s.total)
		if s.clientCPU >= 0 {
			r.clientCPU[side] += s.clientCPU
			r.clientN[side]++
		}
		for _, p := range sortedKeys(s.parts) {
			if r.parts[p] == nil {
				r.parts[p] = &[2][]time.Duration{}
				r.partNames = append(r.partNames, p)
			}
			r.parts[p][side] = append(r.parts[p][side], s.parts[p])
		}
	}
	for w := 0; w < warmup && b.ctx.Err() == nil; w++ {
		for side := range 2 {
			ctx, cancel := context.WithTimeout(b.ctx, opTimeout)
			_, err := op(ctx, side)
			cancel()
			if err != nil {
				r.aborted = fmt.Sprintf("warm-up failed on %s's side: %s", sideName[side], harness.OneLine(err.Error()))
				fmt.Println(r.aborted)
				return r
			}
			if between != nil {
				if err := between(b.ctx); err != nil {
					r.aborted = "warm-up: " + err.Error()
					fmt.Println(r.aborted)
					return r
				}
			}
		}
	}
measured:
	for k := 0; k < n && b.ctx.Err() == nil; k++ {
		first := k % 2
		for _, side := range []int{first, 1 - first} {
			one(side)
			if between != nil {
				if err := between(b.ctx); err != nil {
					r.aborted = err.Error()
					break measured
				}
			}
		}
		if (k+1)%max(1, n/10) == 0 {
			fmt.Print(".")
		}
	}
	for side := range 2 {
		slices.Sort(r.times[side])
	}
	for _, p := range r.parts {
		slices.Sort(p[0])
		slices.Sort(p[1])
	}
	if r.aborted != "" {
		fmt.Println(" stopped:", r.aborted)
		return r
	}
	fmt.Printf(" p50 OpenSandbox %s ms, E2B %s ms\n", ms(harness.Pct(r.times[0], 0.5)), ms(harness.Pct(r.times[1], 0.5)))
	return r
}

// sideName names the sides in messages.
var sideName = [2]string{"OpenSandbox", "E2B"}

func sortedKeys(m map[string]time.Duration) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ms formats d in milliseconds, three decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// perOp formats total ÷ n in ms, "-" for none.
func perOp(total time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(total)/float64(n)/float64(time.Millisecond))
}

// section is a table of rows under a heading.
type section struct {
	title string
	rows  []*row
}

// printSection prints a section's table: p50/p95/p99 of each side,
// OpenSandbox − E2B, OpenSandbox / E2B at p50, hutch serve's and the
// client's CPU per operation, and the failures; an operation's parts
// under it.
func printSection(sec section) {
	fmt.Println(sec.title)
	table := [][]string{{"operation", "n", "OSB p50", "p95", "p99", "E2B p50", "p95", "p99", "OSB−E2B p50", "p95", "p99", "OSB/E2B p50",
		"serve CPU ms/op OSB", "E2B", "client CPU ms/op OSB", "E2B", "fail OSB/E2B"}}
	add := func(name string, n int, t [2][]time.Duration, r *row) {
		line := []string{name, fmt.Sprint(n)}
		for _, side := range t {
			for _, q := range []float64{0.5, 0.95, 0.99} {
				line = append(line, ms(harness.Pct(side, q)))
			}
		}
		for _, q := range []float64{0.5, 0.95, 0.99} {
			line = append(line, fmt.Sprintf("%+.3f", float64(harness.Pct(t[0], q)-harness.Pct(t[1], q))/float64(time.Millisecond)))
		}
		if p := harness.Pct(t[1], 0.5); p > 0 {
			line = append(line, fmt.Sprintf("%.2f×", float64(harness.Pct(t[0], 0.5))/float64(p)))
		} else {
			line = append(line, "-")
		}
		if r == nil {
			// A part: no CPU or failures of its own.
			table = append(table, append(line, "", "", "", "", ""))
			return
		}
		done := [2]int{len(r.times[0]) + r.fails[0], len(r.times[1]) + r.fails[1]}
		line = append(line, perOp(r.serveCPU[0], done[0]), perOp(r.serveCPU[1], done[1]),
			perOp(r.clientCPU[0], r.clientN[0]), perOp(r.clientCPU[1], r.clientN[1]),
			fmt.Sprintf("%d/%d", r.fails[0], r.fails[1]))
		table = append(table, line)
	}
	for _, r := range sec.rows {
		if len(r.times[0]) == 0 || len(r.times[1]) == 0 {
			why := r.aborted
			if why == "" {
				why = fmt.Sprintf("every run failed (OpenSandbox: %s; E2B: %s)", r.firstErr[0], r.firstErr[1])
			}
			table = append(table, harness.UnavailableRow(r.name, len(table[0]), why))
			continue
		}
		add(r.name, len(r.times[0]), r.times, r)
		for _, p := range r.partNames {
			add("  of which "+p, len(r.parts[p][0]), *r.parts[p], nil)
		}
	}
	harness.PrintTable(table)
	for _, r := range sec.rows {
		for side := range 2 {
			if r.fails[side] > 0 {
				fmt.Printf("  %s, %s: %d failed, the first: %s\n", r.name, sideName[side], r.fails[side], r.firstErr[side])
			}
		}
		if r.aborted != "" && len(r.times[0]) > 0 {
			fmt.Printf("  %s: stopped early: %s\n", r.name, r.aborted)
		}
	}
}
