package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// idPrefix starts the name of every container this harness makes, so that
// leftovers (also of a killed earlier run) can be found and removed.
const idPrefix = "hutch-bench-density-"

type bench struct {
	ctx context.Context
	cfg *config
	*harness.OCI
	reported bool // cleanup(true) ran
}

func (b *bench) prepare() error {
	var err error
	if b.OCI, err = harness.NewOCI("runc", "crun"); err != nil {
		return err
	}
	// A hutch binary the script has just built has dirty pages in the page
	// cache until writeback; its text, which serve and every sandbox's
	// init and envd map, would count as their private dirty memory. Write
	// it back first.
	if f, err := os.Open(b.cfg.hutch); err == nil {
		f.Sync()
		f.Close()
	}
	if _, err := os.Stat(filepath.Join(b.cfg.rootfs, "bin", "sleep")); err != nil {
		return fmt.Errorf("base template rootfs %s: %w (run bench/density.sh, or hutch template build base)", b.cfg.rootfs, err)
	}
	b.Mount(b.cfg.bundleIdle, b.cfg.rootfs, b.cfg.ociRootfs)
	b.cleanup(false)
	return nil
}

func (b *bench) close() {
	if b.OCI == nil {
		return
	}
	if !b.reported {
		b.cleanup(true)
	}
	b.OCI.Close()
}

func newSlot() (*harness.Slot, error) { return harness.NewSlot("hutch-bench-density-stderr-") }

// run runs argv to completion (harness.OCI.Run), within -timeout.
func (b *bench) run(legacy bool, s *harness.Slot, argv []string) error {
	return b.Run(legacy, s, b.cfg.timeout, argv)
}

func (b *bench) id(tool, kind string, i int) string {
	return fmt.Sprintf("%s%d-%s-%s%d", idPrefix, os.Getpid(), tool, kind, i)
}

// ociRow is crun's or runc's row: run -d timed with none running, N
// started c at once, their memory, run -d timed with N running, then all
// deleted.
func (b *bench) ociRow(tool string, legacy bool) *result {
	name := tool + " run -d"
	if legacy {
		name += " (no cgroup2 mount)"
	}
	r := newResult(tool, name, tool+" run -d")
	bin := b.Bins[tool]
	if r.unavailable = b.Unavailable(tool, legacy); r.unavailable != "" {
		fmt.Printf("%s: unavailable: %s\n", name, r.unavailable)
		return r
	}
	start := func(id string) []string { return []string{bin, "run", "-d", "--bundle", b.cfg.bundleIdle, id} }
	del := func(id string) []string { return []string{bin, "delete", "-f", id} }
	s, err := newSlot()
	if err != nil {
		r.unavailable = err.Error()
		return r
	}
	defer s.Close()

	// one times run -d of a new container and deletes it (not timed).
	one := func(kind string, i int, into *series) {
		id := b.id(tool, kind, i)
		t0 := time.Now()
		err := b.run(legacy, s, start(id))
		d := time.Since(t0)
		if err != nil {
			if into != nil {
				into.fail(err)
			}
		} else if into != nil {
			into.add(d)
		}
		if err := b.run(legacy, s, del(id)); err != nil {
			r.noteRemoveErr(err)
		}
	}

	fmt.Printf("%s: run -d with none running ", name)
	var warm series
	for i := 0; i < b.cfg.warmup && b.ctx.Err() == nil; i++ {
		one("w", i, &warm)
	}
	for i := 0; i < b.cfg.samples && b.ctx.Err() == nil; i++ {
		one("z", i, &r.create0)
		dot(i, b.cfg.samples)
	}
	if len(r.create0.d) == 0 {
		r.unavailable = "every run -d failed: " + orNone(r.create0.firstErr)
		if r.create0.firstErr == "" {
			r.unavailable = "every run -d failed: " + orNone(warm.firstErr)
		}
		fmt.Println(" unavailable:", r.unavailable)
		return r
	}
	fmt.Printf(" p50 %s ms\n", ms(r.create0.pct(.5)))

	// N idle containers, c at once; the first failure stops the starts.
	r.mi0, r.tasks0, r.loops0 = meminfo(), tasks(), loopDevices()
	fmt.Printf("%s: starting %d idle containers, %d at once:", name, b.cfg.n, b.cfg.c)
	running, failed := b.fill(r, func() (func(int) (string, error), func(), error) {
		ws, err := newSlot()
		if err != nil {
			return nil, nil, err
		}
		return func(i int) (string, error) {
			id := b.id(tool, "f", i)
			// Whatever a failed run -d left is deleted afterwards.
			return id, b.run(legacy, ws, start(id))
		}, ws.Close, nil
	})
	for _, id := range failed {
		b.run(legacy, s, del(id))
	}
	fillDone(r, running)

	if r.created > 0 && b.ctx.Err() == nil {
		b.pause(b.cfg.settle)
		r.mem = b.ociMemory(tool, legacy, running)
		r.mi1, r.tasks1, r.loops1 = meminfo(), tasks(), loopDevices()
		r.mem.sampleCPU(3 * time.Second)
		fmt.Printf("%s: with %d running: %.2f MiB PSS, %.2f MiB private dirty per container\n", name, r.created,
			r.mem.per(r.mem.pss), r.mem.per(r.mem.dirty))
		fmt.Printf("%s: run -d with %d running ", name, r.created)
		for i := 0; i < b.cfg.samples && b.ctx.Err() == nil; i++ {
			one("n", i, &r.createN)
			dot(i, b.cfg.samples)
		}
		if len(r.createN.d) > 0 {
			fmt.Printf(" p50 %s ms", ms(r.createN.pct(.5)))
		}
		fmt.Println()
	}

	// Delete them all, c at once.
	fmt.Printf("%s: deleting %d containers, %d at once:", name, len(running), b.cfg.c)
	b.removeAll(r, running, func() (func(string) error, func(), error) {
		ws, err := newSlot()
		if err != nil {
			return nil, nil, err
		}
		return func(id string) error { return b.run(legacy, ws, del(id)) }, ws.Close, nil
	})
	return r
}

// ociMemory sums the memory of the containers ids: each one's init (from
// `list --format json`; crun and runc leave no monitor process) and its
// descendants.
func (b *bench) ociMemory(tool string, legacy bool, ids []string) *memSum {
	m := newMemSum()
	var out []byte
	var err error
	list := func() { out, err = harness.Output(b.Bins[tool], "list", "--format", "json") }
	if legacy {
		b.Legacy.Do(list)
	} else {
		list()
	}
	pids := map[string]int{}
	if err == nil {
		var l []struct {
			ID  string `json:"id"`
			Pid int    `json:"pid"`
		}
		if json.Unmarshal(out, &l) == nil {
			for _, e := range l {
				pids[e.ID] = e.Pid
			}
		}
	}
	t := harness.NewProcTable()
	for _, id := range ids {
		var procs []int
		if pid := pids[id]; pid > 0 {
			procs = t.Tree(pid)
		}
		m.add(procs)
	}
	return m
}

// cleanup removes containers this harness (or a killed earlier run) left
// behind; with report, it says what it found and checks the sandboxes of
// the server's data directory.
func (b *bench) cleanup(report bool) {
	b.reported = b.reported || report
	notes := b.RemoveLeftovers(idPrefix, func(tool string, ids []string) string {
		return fmt.Sprintf("%s: %d containers left; deleted", tool, len(ids))
	})
	notes = append(notes, harness.LeftoverCgroups(idPrefix)...)
	if !report {
		harness.PrintLeftovers(false, notes, "", "")
		return
	}
	sandboxes := "bench/density.sh removes any sandboxes left"
	if b.cfg.data != "" {
		if ids, err := b.hutchPs(); err == nil {
			sandboxes = fmt.Sprintf("%d sandboxes left in %s (bench/density.sh removes them)", len(ids), b.cfg.data)
		}
	}
	harness.PrintLeftovers(true, notes, "runc/crun list, cgroups all clean", sandboxes, sandboxes)
}

// pause waits d, or less when interrupted.
func (b *bench) pause(d time.Duration) {
	select {
	case <-b.ctx.Done():
	case <-time.After(d):
	}
}

// dot prints one of ten progress dots for a series of n.
func dot(i, n int) {
	if (i+1)%max(1, n/10) == 0 {
		fmt.Print(".")
	}
}

// progress prints the count at every tenth of n and the time since t0,
// which shows when starting (or removing) slows down as more run.
func progress(done, n int, t0 time.Time) {
	if done%max(1, n/10) == 0 || done == n {
		fmt.Printf(" %d (%.0f s)", done, time.Since(t0).Seconds())
	}
}
