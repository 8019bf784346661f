package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// idPrefix starts the name of every container this harness makes, so that
// leftovers (also of a killed earlier run) can be found and removed.
const idPrefix = "hutch-bench-density-"

type bench struct {
	ctx context.Context
	cfg *config

	devnull   *os.File
	bins      map[string]string // tool name -> path, when installed
	legacy    *harness.LegacyCgroupNS
	legacyErr string
	ociErr    string // why the OCI bundle cannot be used, if so
	reported  bool   // cleanup(true) ran
}

func (b *bench) prepare() error {
	var err error
	if b.devnull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
		return err
	}
	for _, t := range []string{"runc", "crun"} {
		if p, err := exec.LookPath(t); err == nil {
			b.bins[t] = p
		}
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
	// The idmapped rootfs first: the namespace without cgroup2 is a copy
	// of this one, and crun must see the rootfs there too.
	if _, err := harness.MountBundleRootfs(b.cfg.bundleIdle, b.cfg.rootfs, b.cfg.ociRootfs); err != nil {
		b.ociErr = err.Error()
	}
	if ns, err := harness.NewLegacyCgroupNS(); err == nil {
		b.legacy = ns
	} else {
		b.legacyErr = err.Error()
	}
	b.cleanup(false)
	return nil
}

func (b *bench) close() {
	if !b.reported {
		b.cleanup(true)
	}
	if b.legacy != nil {
		b.legacy.Close()
		b.legacy = nil
	}
}

// slot is what one command in flight needs of its own: a file for its
// stderr. A file, not a pipe: a detached container inherits the stderr of
// `run -d`, and a pipe would keep Wait waiting for it.
type slot struct{ errFile *os.File }

func newSlot() (*slot, error) {
	f, err := os.CreateTemp("", "hutch-bench-density-stderr-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name()) // the open file stays usable
	return &slot{errFile: f}, nil
}

func (s *slot) close() { s.errFile.Close() }

// run runs argv to completion, from the namespace without the cgroup2
// mount when legacy, stdio on /dev/null and the slot's file.
func (b *bench) run(legacy bool, s *slot, argv []string) error {
	if err := s.errFile.Truncate(0); err != nil {
		return err
	}
	if _, err := s.errFile.Seek(0, 0); err != nil {
		return err
	}
	// Not the harness's context: on Ctrl-C a command in flight finishes
	// before the harness stops and removes what it made.
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = b.devnull, b.devnull, s.errFile
	var err error
	if legacy {
		// Forked from the namespace's thread, so that the child is in
		// its mount namespace; waited for from here.
		b.legacy.Do(func() { err = cmd.Start() })
	} else {
		err = cmd.Start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		s.errFile.Seek(0, 0)
		msg, _ := io.ReadAll(io.LimitReader(s.errFile, 1<<16))
		sub := ""
		if len(argv) > 1 {
			sub = " " + argv[1]
		}
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("%s%s: timed out after %v: %s", filepath.Base(argv[0]), sub, b.cfg.timeout, toolMessage(msg))
		}
		return fmt.Errorf("%s%s: %v: %s", filepath.Base(argv[0]), sub, err, toolMessage(msg))
	}
	return nil
}

// toolMessage is the last line of a tool's stderr; of runc's logrus line
// (time="…" level=error msg="…"), only the message, so that the cause at
// its end survives harness.OneLine's cut.
func toolMessage(stderr []byte) string {
	line := harness.OneLine(string(stderr))
	if _, m, ok := strings.Cut(strings.TrimSpace(string(stderr)), ` msg="`); ok && strings.HasPrefix(line, "time=") {
		if i := strings.LastIndexByte(m, '"'); i >= 0 {
			m = m[:i]
		}
		line = harness.OneLine(strings.ReplaceAll(m, `\"`, `"`))
	}
	return line
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
	bin := b.bins[tool]
	switch {
	case bin == "":
		r.unavailable = tool + " is not installed"
	case b.ociErr != "":
		r.unavailable = b.ociErr
	case legacy && b.legacy == nil:
		r.unavailable = b.legacyErr
	}
	if r.unavailable != "" {
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
	defer s.close()

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
	var ids []string
	var mu sync.Mutex
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < b.cfg.c; w++ {
		ws, err := newSlot()
		if err != nil {
			r.fillErr = err.Error()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ws.close()
			for !stop.Load() && b.ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= b.cfg.n {
					return
				}
				id := b.id(tool, "f", i)
				err := b.run(legacy, ws, start(id))
				mu.Lock()
				if err != nil {
					r.fillFail++
					if r.fillErr == "" {
						r.fillErr = fmt.Sprintf("#%d (with %d running): %s", i+1, len(ids), harness.OneLine(err.Error()))
					}
					stop.Store(true)
					// Whatever a failed run -d left is deleted now.
					ids = append(ids, "!"+id)
				} else {
					ids = append(ids, id)
					progress(len(ids), b.cfg.n, t0)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.fillWall = time.Since(t0)
	var running []string
	for _, id := range ids {
		if strings.HasPrefix(id, "!") {
			b.run(legacy, s, del(id[1:]))
			continue
		}
		running = append(running, id)
	}
	r.created = len(running)
	fmt.Printf(" (%.1f s)\n", r.fillWall.Seconds())
	if r.fillErr != "" {
		fmt.Printf("%s: the first failure: %s\n", name, r.fillErr)
	}

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
	t1 := time.Now()
	var done atomic.Int64
	jobs := make(chan string)
	for w := 0; w < b.cfg.c; w++ {
		ws, err := newSlot()
		if err != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer ws.close()
			for id := range jobs {
				if err := b.run(legacy, ws, del(id)); err != nil {
					r.noteRemoveErr(err)
				} else {
					progress(int(done.Add(1)), len(running), t1)
				}
			}
		}()
	}
	for _, id := range running {
		jobs <- id
	}
	close(jobs)
	wg.Wait()
	r.removeWall = time.Since(t1)
	r.removed = int(done.Load())
	fmt.Printf(" (%.1f s)\n", r.removeWall.Seconds())
	return r
}

// ociMemory sums the memory of the containers ids: each one's init (from
// `list --format json`; crun and runc leave no monitor process) and its
// descendants.
func (b *bench) ociMemory(tool string, legacy bool, ids []string) *memSum {
	m := newMemSum()
	var out []byte
	var err error
	list := func() { out, err = output(b.bins[tool], "list", "--format", "json") }
	if legacy {
		b.legacy.Do(list)
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
	t := newProcTable()
	for _, id := range ids {
		var procs []int
		if pid := pids[id]; pid > 0 {
			procs = t.tree(pid)
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
	var notes []string
	harness.RemoveLeftoverOCI(b.legacy, idPrefix, func(args ...string) ([]byte, error) {
		bin := b.bins[args[0]]
		if bin == "" {
			return nil, errors.New(args[0] + " is not installed")
		}
		return output(append([]string{bin}, args[1:]...)...)
	}, func(tool string, ids []string) {
		notes = append(notes, fmt.Sprintf("%s: %d containers left; deleted", tool, len(ids)))
	})
	for _, h := range []string{"memory", "pids", "cpu", "unified"} {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h))
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), idPrefix) {
				notes = append(notes, "cgroup left behind: "+filepath.Join("/sys/fs/cgroup", h, e.Name()))
			}
		}
	}
	if !report {
		if len(notes) > 0 {
			fmt.Println("removed containers left by an earlier run:")
			for _, n := range notes {
				fmt.Println("  " + n)
			}
		}
		return
	}
	sandboxes := "bench/density.sh removes any sandboxes left"
	if b.cfg.data != "" {
		if ids, err := b.hutchPs(); err == nil {
			sandboxes = fmt.Sprintf("%d sandboxes left in %s (bench/density.sh removes them)", len(ids), b.cfg.data)
		}
	}
	if len(notes) == 0 {
		fmt.Printf("leftover containers: none (runc/crun list, cgroups all clean); %s\n", sandboxes)
		return
	}
	fmt.Println("leftovers found after the runs:")
	for _, n := range notes {
		fmt.Println("  " + n)
	}
	fmt.Println("  " + sandboxes)
}

// output runs a command (not timed) and returns its standard output.
func output(argv ...string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, harness.OneLine(stderr.String()))
		}
		return out, err
	}
	return out, nil
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
