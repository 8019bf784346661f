package main

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// ops records every operation's latency and failures, by name, in the
// order names are first used.
type ops struct {
	mu     sync.Mutex
	order  []string
	byName map[string]*op
}

type op struct {
	times  []time.Duration
	errors int
	// first keeps the first few failures' messages, for the report.
	first []string
}

// maxKept is how many failure messages are kept per operation.
const maxKept = 5

func newOps() *ops { return &ops{byName: map[string]*op{}} }

func (o *ops) get(name string) *op {
	r := o.byName[name]
	if r == nil {
		r = &op{}
		o.byName[name] = r
		o.order = append(o.order, name)
	}
	return r
}

// done records one operation that took d, failed when err is not nil.
func (o *ops) done(name string, d time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r := o.get(name)
	if err != nil {
		r.errors++
		if len(r.first) < maxKept {
			r.first = append(r.first, harness.OneLine(err.Error()))
		}
		return
	}
	r.times = append(r.times, d)
}

// timed runs f, recording it under name.
func (o *ops) timed(name string, f func() error) error {
	t0 := time.Now()
	err := f()
	o.done(name, time.Since(t0), err)
	return err
}

// OpResult is one operation's figures in the report.
type OpResult struct {
	Name   string   `json:"name"`
	OK     int      `json:"ok"`
	Errors int      `json:"errors"`
	P50ms  float64  `json:"p50_ms"`
	P95ms  float64  `json:"p95_ms"`
	P99ms  float64  `json:"p99_ms"`
	MaxMs  float64  `json:"max_ms"`
	First  []string `json:"first_errors,omitempty"`
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// results are the figures of every operation, and the totals.
func (o *ops) results() (rs []OpResult, total, errs int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, name := range o.order {
		r := o.byName[name]
		t := append([]time.Duration(nil), r.times...)
		sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
		res := OpResult{Name: name, OK: len(t), Errors: r.errors, First: r.first}
		if len(t) > 0 {
			res.P50ms, res.P95ms, res.P99ms = msf(harness.Pct(t, 0.5)), msf(harness.Pct(t, 0.95)), msf(harness.Pct(t, 0.99))
			res.MaxMs = msf(t[len(t)-1])
		}
		rs = append(rs, res)
		total += len(t) + r.errors
		errs += r.errors
	}
	return rs, total, errs
}

func printOps(rs []OpResult) {
	rows := [][]string{{"operation", "ok", "errors", "p50 ms", "p95 ms", "p99 ms", "max ms"}}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	for _, r := range rs {
		rows = append(rows, []string{r.Name, strconv.Itoa(r.OK), strconv.Itoa(r.Errors), f(r.P50ms), f(r.P95ms), f(r.P99ms), f(r.MaxMs)})
	}
	harness.PrintTable(rows, 0)
	for _, r := range rs {
		for _, e := range r.First {
			fmt.Printf("%s: failure: %s\n", r.Name, e)
		}
	}
}
