package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// worker is what each of the -c goroutines of fill or removeAll gets from
// newWorker: its step (start one, or remove one) and what to do when it
// ends (nil: nothing).
type worker[F any] func() (step F, done func(), err error)

// fill starts -n idle sandboxes or containers, -c at once, each with its
// worker's start of the i-th: its id, or on failure an error and the id of what the
// failed start left, if anything ("" for nothing). The first failure
// stops the starts. It records in r how the fill went, prints its
// progress and returns the ids started and those failed starts left.
func (b *bench) fill(r *result, newWorker worker[func(i int) (string, error)]) (running, failed []string) {
	var mu sync.Mutex
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < b.cfg.c; w++ {
		start, done, err := newWorker()
		if err != nil {
			r.fillErr = err.Error()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if done != nil {
				defer done()
			}
			for !stop.Load() && b.ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= b.cfg.n {
					return
				}
				id, err := start(i)
				mu.Lock()
				if err != nil {
					r.fillFail++
					if r.fillErr == "" {
						r.fillErr = fmt.Sprintf("#%d (with %d running): %s", i+1, len(running), harness.OneLine(err.Error()))
					}
					stop.Store(true)
					if id != "" {
						failed = append(failed, id)
					}
				} else {
					running = append(running, id)
					progress(len(running), b.cfg.n, t0)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.fillWall = time.Since(t0)
	return running, failed
}

// fillDone records and prints the end of a fill, once what failed starts
// left is gone.
func fillDone(r *result, running []string) {
	r.created = len(running)
	fmt.Printf(" (%.1f s)\n", r.fillWall.Seconds())
	if r.fillErr != "" {
		fmt.Printf("%s: the first failure: %s\n", r.name, r.fillErr)
	}
}

// removeAll removes ids, -c at once, each with its worker's remove,
// prints its progress and records in r how many went and how long it
// took; a failure is noted in r.
func (b *bench) removeAll(r *result, ids []string, newWorker worker[func(id string) error]) {
	t1 := time.Now()
	var done atomic.Int64
	var wg sync.WaitGroup
	jobs := make(chan string)
	for w := 0; w < b.cfg.c; w++ {
		remove, end, err := newWorker()
		if err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if end != nil {
				defer end()
			}
			for id := range jobs {
				if err := remove(id); err != nil {
					r.noteRemoveErr(err)
				} else {
					progress(int(done.Add(1)), len(ids), t1)
				}
			}
		}()
	}
	for _, id := range ids {
		jobs <- id
	}
	close(jobs)
	wg.Wait()
	r.removeWall = time.Since(t1)
	r.removed = int(done.Load())
	fmt.Printf(" (%.1f s)\n", r.removeWall.Seconds())
}
