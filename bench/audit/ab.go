package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

// side is one of the two servers of the A/B sections, with its client and
// the running sandbox the sections use.
type side struct {
	srv *server
	c   *sdk.Client
	sbx *sdk.Sandbox
}

// abResult is one section: each side's times and its serve's CPU.
type abResult struct {
	key, name string
	n         int
	times     [2][]time.Duration // sorted; 0: audit on, 1: audit off
	fails     [2]int
	firstErr  [2]string
	cpu       [2]time.Duration // hutch serve's CPU over the section
	// extra names sub-timings (create, kill) kept beside the total.
	extra map[string]*[2][]time.Duration
}

// abOp is one operation of a section on one side; it returns the time
// measured (and sub-timings by name).
type abOp func(ctx context.Context, s *side) (time.Duration, map[string]time.Duration, error)

// abSection is a section of the A/B comparison.
type abSection struct {
	key, name string
	n         func(c config) int
	op        abOp
	// warmup is the warm-up iterations of the section.
	warmup func(c config) int
	// between runs after each iteration (both sides), untimed.
	between func(ctx context.Context) error
}

// sdkTimeout bounds one operation.
const sdkTimeout = time.Minute

// payload is the Files.Write section's file.
var payload = func() []byte {
	p := make([]byte, 4<<10)
	for i := range p {
		p[i] = byte('a' + i%26)
	}
	return p
}()

func warmupAll(c config) int { return c.warmup }

func (b *bench) abSections() []abSection {
	return []abSection{
		{"cmd", `Commands.Run(ctx, "true", nil) in a running sandbox`, func(c config) int { return c.n },
			func(ctx context.Context, s *side) (time.Duration, map[string]time.Duration, error) {
				t0 := time.Now()
				_, err := s.sbx.Commands.Run(ctx, "true", nil)
				return time.Since(t0), nil, err
			}, warmupAll, nil},
		{"write", "Files.Write of 4 KiB", func(c config) int { return c.n },
			func(ctx context.Context, s *side) (time.Duration, map[string]time.Duration, error) {
				t0 := time.Now()
				_, err := s.sbx.Files.Write(ctx, "/tmp/hutch-bench-audit-4KiB", payload, nil)
				return time.Since(t0), nil, err
			}, warmupAll, nil},
		{"timeout", "SetTimeout (POST /sandboxes/{id}/timeout)", func(c config) int { return c.n },
			func(ctx context.Context, s *side) (time.Duration, map[string]time.Duration, error) {
				t0 := time.Now()
				err := s.sbx.SetTimeout(ctx, time.Hour)
				return time.Since(t0), nil, err
			}, warmupAll, nil},
		{"create", "Create → Kill, default warm pool", func(c config) int { return c.nCreate },
			func(ctx context.Context, s *side) (time.Duration, map[string]time.Duration, error) {
				t0 := time.Now()
				sbx, err := s.c.Create(ctx, sdk.CreateOptions{})
				if err != nil {
					return 0, nil, err
				}
				t1 := time.Now()
				err = sbx.Kill(ctx)
				t2 := time.Now()
				return t2.Sub(t0), map[string]time.Duration{"Create": t1.Sub(t0), "Kill": t2.Sub(t1)}, err
			}, func(c config) int { return min(c.warmup, 2) },
			func(ctx context.Context) error { return b.waitPools(ctx, 1) }},
	}
}

// runAB measures a section: its warm-up, then n iterations, each running
// the operation on both sides one after the other, the side that goes
// first alternating (A B, B A, A B, …) so that neither always follows the
// other; drift and the other server's background work hit both.
func (b *bench) runAB(sec abSection, sides [2]*side) *abResult {
	n := sec.n(b.cfg)
	r := &abResult{key: sec.key, name: sec.name, n: n, extra: map[string]*[2][]time.Duration{}}
	fmt.Printf("%-58s ", sec.name)
	one := func(i int) error {
		ctx, cancel := context.WithTimeout(b.ctx, sdkTimeout)
		defer cancel()
		d, parts, err := sec.op(ctx, sides[i])
		if err != nil {
			r.fails[i]++
			if r.firstErr[i] == "" {
				r.firstErr[i] = harness.OneLine(err.Error())
			}
			return err
		}
		r.times[i] = append(r.times[i], d)
		for name, p := range parts {
			if r.extra[name] == nil {
				r.extra[name] = &[2][]time.Duration{}
			}
			r.extra[name][i] = append(r.extra[name][i], p)
		}
		return nil
	}
	for w := 0; w < sec.warmup(b.cfg) && b.ctx.Err() == nil; w++ {
		for i := range 2 {
			ctx, cancel := context.WithTimeout(b.ctx, sdkTimeout)
			_, _, err := sec.op(ctx, sides[i])
			cancel()
			if err != nil {
				fmt.Printf("warm-up failed on %s: %s\n", sides[i].srv.name, harness.OneLine(err.Error()))
				r.fails = [2]int{-1, -1}
				return r
			}
		}
		if sec.between != nil {
			if err := sec.between(b.ctx); err != nil {
				fmt.Println("warm-up:", err)
				r.fails = [2]int{-1, -1}
				return r
			}
		}
	}
	var cpu0 [2]time.Duration
	for i := range 2 {
		cpu0[i], _ = harness.ProcCPU(sides[i].srv.Pid())
	}
	for k := 0; k < n && b.ctx.Err() == nil; k++ {
		first := k % 2
		one(first)
		one(1 - first)
		if sec.between != nil {
			if err := sec.between(b.ctx); err != nil {
				fmt.Println(err)
				break
			}
		}
		if (k+1)%max(1, n/10) == 0 {
			fmt.Print(".")
		}
	}
	for i := range 2 {
		c1, _ := harness.ProcCPU(sides[i].srv.Pid())
		r.cpu[i] = c1 - cpu0[i]
		slices.Sort(r.times[i])
	}
	for _, e := range r.extra {
		slices.Sort(e[0])
		slices.Sort(e[1])
	}
	fmt.Printf(" p50 on %s ms, off %s ms\n", ms(harness.Pct(r.times[0], 0.5)), ms(harness.Pct(r.times[1], 0.5)))
	return r
}

// waitPools waits until both warm pools are full (a refill is a started
// sandbox in `hutch ps` from its start; handedOut are the sandboxes each
// server has besides its pool) and lets the last one's envd come up: after
// a create → kill on both sides, so that no refill runs during the next
// iteration.
func (b *bench) waitPools(ctx context.Context, handedOut int) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, data := range []string{b.cfg.dataOn, b.cfg.dataOff} {
		for ctx.Err() == nil {
			n, err := b.sandboxesIn(data)
			if err != nil {
				return err
			}
			if n >= b.cfg.warm+handedOut {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the warm pool of %s did not refill within 30 s (%d sandboxes)", data, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(b.cfg.settle)
	return nil
}

// countEvents reads the whole trail of the audit-on server (JSON lines)
// and counts its events by action.
func (b *bench) countEvents(s *server) (map[string]int, int, error) {
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, s.url+"/events?limit=100000&format=jsonl", nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("X-API-Key", b.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET /events: %s", resp.Status)
	}
	by := map[string]int{}
	total := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e struct{ Action string }
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			by[e.Action]++
			total++
		}
	}
	return by, total, sc.Err()
}

// printAB prints the A/B table: p50/p95/p99 with the audit trail on and
// off, and on − off.
func printAB(results []*abResult) {
	rows := [][]string{{"operation", "n", "on p50", "p95", "p99", "off p50", "p95", "p99", "on−off p50", "p95", "p99", "on/off p50", "serve CPU ms/op on", "off", "fail on/off"}}
	add := func(name string, n int, on, off []time.Duration, r *abResult, withCPU bool) {
		row := []string{name, fmt.Sprint(n)}
		for _, t := range [][]time.Duration{on, off} {
			for _, q := range []float64{0.5, 0.95, 0.99} {
				row = append(row, ms(harness.Pct(t, q)))
			}
		}
		for _, q := range []float64{0.5, 0.95, 0.99} {
			row = append(row, fmt.Sprintf("%+.3f", float64(harness.Pct(on, q)-harness.Pct(off, q))/float64(time.Millisecond)))
		}
		ratio := "-"
		if p := harness.Pct(off, 0.5); p > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(harness.Pct(on, 0.5))/float64(p))
		}
		row = append(row, ratio)
		if withCPU && r.n > 0 {
			row = append(row, fmt.Sprintf("%.2f", float64(r.cpu[0])/float64(time.Millisecond)/float64(r.n)),
				fmt.Sprintf("%.2f", float64(r.cpu[1])/float64(time.Millisecond)/float64(r.n)),
				fmt.Sprintf("%d/%d", r.fails[0], r.fails[1]))
		} else {
			row = append(row, "", "", "")
		}
		rows = append(rows, row)
	}
	for _, r := range results {
		if r.fails[0] < 0 || len(r.times[0]) == 0 || len(r.times[1]) == 0 {
			why := r.firstErr[0] + " " + r.firstErr[1]
			if r.fails[0] < 0 {
				why = "the warm-up failed"
			}
			rows = append(rows, harness.UnavailableRow(r.name, len(rows[0]), strings.TrimSpace(why)))
			continue
		}
		add(r.name, r.n, r.times[0], r.times[1], r, true)
		names := make([]string, 0, len(r.extra))
		for name := range r.extra {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			add("  of which "+name, r.n, r.extra[name][0], r.extra[name][1], r, false)
		}
	}
	harness.PrintTable(rows)
	for _, r := range results {
		for i, side := range []string{"on", "off"} {
			if r.firstErr[i] != "" {
				fmt.Printf("%s, audit %s: %d failed, first: %s\n", r.name, side, r.fails[i], r.firstErr[i])
			}
		}
	}
}

// ms formats d in milliseconds, three decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }
