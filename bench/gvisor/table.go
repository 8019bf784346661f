package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// A row is one line of the results: each runtime's samples, in the row's
// unit, side by side.
type row struct {
	name, unit string
	// higher marks a row where more is better (throughput): its p95 and
	// p99 are then the slow end, the 5th and 1st percentiles.
	higher   bool
	vals     [2][]float64
	fails    [2]int
	firstErr [2]string
	// goal is the goal for gvisor's p50, met when it is at most
	// goalMax (0: no goal to check).
	goal    string
	goalMax float64
	notes   []string
	heading bool
}

func (r *row) add(rt int, v float64)           { r.vals[rt] = append(r.vals[rt], v) }
func (r *row) addTime(rt int, d time.Duration) { r.add(rt, float64(d)/1e6) }

func (r *row) fail(rt int, err error) {
	r.fails[rt]++
	if r.firstErr[rt] == "" {
		r.firstErr[rt] = harness.OneLine(err.Error())
	}
	fmt.Printf("  %s (%s): %v\n", r.name, runtimeNames[rt], err)
}

func (r *row) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// pct is percentile q of runtime rt's samples (nearest rank; with fewer
// than 100 samples p99 is the worst), the worst end for q > 0.5.
func (r *row) pct(rt int, q float64) (float64, bool) {
	v := append([]float64(nil), r.vals[rt]...)
	if len(v) == 0 {
		return 0, false
	}
	sort.Float64s(v)
	if r.higher {
		q = 1 - q
	}
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)], true
}

// table is the rows in order of first use.
type table struct {
	rows   []*row
	byName map[string]*row
}

// row makes (or returns) the row called name.
func (t *table) row(name, unit string) *row {
	if r := t.byName[name]; r != nil {
		return r
	}
	if t.byName == nil {
		t.byName = map[string]*row{}
	}
	r := &row{name: name, unit: unit}
	t.rows = append(t.rows, r)
	t.byName[name] = r
	return r
}

// section starts a group of rows under a heading.
func (t *table) section(title string) {
	t.rows = append(t.rows, &row{name: title, heading: true})
}

func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10 || a == 0:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func (t *table) print() {
	out := [][]string{{"case", "unit",
		"native n", "p50", "p95", "p99",
		"gvisor n", "p50", "p95", "p99",
		"gvisor/native p50", "goal (issue 19, gvisor p50)", "met"}}
	for _, r := range t.rows {
		if r.heading {
			out = append(out, []string{"-- " + r.name})
			continue
		}
		line := []string{r.name, r.unit}
		var p50s [2]float64
		for rt := range r.vals {
			n := strconv.Itoa(len(r.vals[rt]))
			if r.fails[rt] > 0 {
				n += fmt.Sprintf(" (+%d failed)", r.fails[rt])
			}
			if len(r.vals[rt]) == 0 && r.fails[rt] == 0 {
				n = "-"
			}
			line = append(line, n)
			for _, q := range []float64{0.5, 0.95, 0.99} {
				v, ok := r.pct(rt, q)
				if !ok {
					line = append(line, "-")
					continue
				}
				if q == 0.5 {
					p50s[rt] = v
				}
				line = append(line, num(v))
			}
		}
		ratio := ""
		if len(r.vals[native]) > 0 && len(r.vals[gvisor]) > 0 && p50s[native] > 0 {
			ratio = fmt.Sprintf("%.2f×", p50s[gvisor]/p50s[native])
		}
		met := ""
		if r.goalMax > 0 && len(r.vals[gvisor]) > 0 {
			if p50s[gvisor] <= r.goalMax {
				met = "yes"
			} else {
				met = fmt.Sprintf("no (%.2f× the goal)", p50s[gvisor]/r.goalMax)
			}
		}
		out = append(out, append(line, ratio, r.goal, met))
	}
	fmt.Println("p50/p95/p99: nearest rank; with fewer than 100 samples p99 is the worst. For MB/s rows p95 and p99 are the slow end.")
	harness.PrintTable(out, 1, 11, 12)
	fmt.Println()
	for _, r := range t.rows {
		if r.goalMax <= 0 {
			continue
		}
		v, ok := r.pct(gvisor, 0.5)
		switch {
		case !ok:
			fmt.Printf("goal (issue 19): %s, gvisor p50 %s: not measured\n", r.name, r.goal)
		case v <= r.goalMax:
			fmt.Printf("goal (issue 19): %s, gvisor p50 %s: %s %s, met\n", r.name, r.goal, num(v), r.unit)
		default:
			fmt.Printf("goal (issue 19): %s, gvisor p50 %s: %s %s, NOT met (%.2f×)\n", r.name, r.goal, num(v), r.unit, v/r.goalMax)
		}
	}
	fmt.Println()
	for _, r := range t.rows {
		for rt := range r.vals {
			if r.firstErr[rt] != "" {
				fmt.Printf("%s (%s): first failure: %s\n", r.name, runtimeNames[rt], r.firstErr[rt])
			}
		}
		for _, n := range r.notes {
			fmt.Printf("%s: %s\n", r.name, n)
		}
	}
}
