package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// The goals at goalMiB touched (gvisor p50s).
const (
	goalMiB    = 200
	pauseGoal  = 150.0
	resumeGoal = 250.0
	forkGoal   = 1000.0
)

// touchCmd starts, in the background, a python process that allocates
// and touches mib MiB (a byte per page) and stays, and returns once it has
// touched them all.
func touchCmd(mib int) string {
	py := fmt.Sprintf(`import time
b = bytearray(%d << 20)
for i in range(0, len(b), 4096): b[i] = 1
open("/tmp/touched", "w").close()
time.sleep(1e9)`, mib)
	return fmt.Sprintf(`rm -f /tmp/touched; setsid python3 -c '%s' </dev/null >/dev/null 2>&1 &
for i in $(seq 1 1200); do [ -f /tmp/touched ] && exit 0; sleep 0.05; done; echo "not touched after 60 s" >&2; exit 1`, py)
}

// checkpointRows measures, for each size, pause (keeping memory),
// resume and snapshot of a sandbox of each runtime whose python process
// holds that many MiB touched, the runtimes alternating; and on gvisor
// the checkpoints' size on disk.
func (b *bench) checkpointRows(sizes []int) {
	for _, mib := range sizes {
		if b.ctx.Err() != nil {
			return
		}
		b.checkpointSize(mib)
	}
}

func (b *bench) checkpointSize(mib int) {
	fmt.Printf("==> pause/resume and snapshot with %d MiB touched\n", mib)
	b.tab.section(fmt.Sprintf("%d MiB touched by a python process: pause keeping memory (gvisor: runsc checkpoint to disk, sandbox deleted; native: cgroup freeze, RAM kept), resume, snapshot", mib))
	name := func(s string) string { return fmt.Sprintf("%d MiB: %s", mib, s) }
	pause := b.tab.row(name("pause (Sandbox.Pause, keep memory)"), "ms")
	held := b.tab.row(name("host memory held while paused (PSS)"), "MiB")
	disk := b.tab.row(name("pause's checkpoint on disk"), "MiB")
	resume := b.tab.row(name("resume (Client.Connect → 201)"), "ms")
	resumeCmd := b.tab.row(name("resume → first command"), "ms")
	snap := b.tab.row(name("snapshot (CreateSnapshot; native: files only)"), "ms")
	snapDisk := b.tab.row(name("snapshot's checkpoint on disk"), "MiB")
	pausePhases := []*row{
		b.tab.row(name("  gvisor pause, where it goes: request → checkpoint dir made (runsc pause: the freeze)"), "ms"),
		b.tab.row(name("  → runsc's image files born (runsc resume, runsc checkpoint starts)"), "ms"),
		b.tab.row(name("  → image written (runsc checkpoint saves the sentry and memory)"), "ms"),
		b.tab.row(name("  → Hutch's files written (checkpoint exits: --leave-running restarts; runsc pause)"), "ms"),
		b.tab.row(name("  → 204 (recorded; the sandbox deleted)"), "ms"),
	}
	resumePhases := []*row{
		b.tab.row(name("  gvisor resume, where it goes: request → shim.json (Hutch's set-up)"), "ms"),
		b.tab.row(name("  → runsc.log born (shim start, runsc exec)"), "ms"),
		b.tab.row(name("  → init.pid (runsc create: sandbox and gofer processes)"), "ms"),
		b.tab.row(name("  → runsc's container state saved (runsc restore: kernel and memory loaded)"), "ms"),
		b.tab.row(name("  → 201 (link handshake, recorded)"), "ms"),
	}
	if mib == goalMiB {
		pause.goal, pause.goalMax = fmt.Sprintf("≤ %.0f ms", pauseGoal), pauseGoal
		resume.goal, resume.goalMax = fmt.Sprintf("≤ %.0f ms", resumeGoal), resumeGoal
	}
	n := b.cfg.nCkpt
	if mib >= b.cfg.bigFrom {
		n = b.cfg.nCkptBig
	}
	var sbx [2]*sdk.Sandbox
	var pids [2]string
	for _, con := range b.cons {
		s, err := con.newSandbox()
		if err != nil {
			pause.fail(con.rt, err)
			continue
		}
		defer kill(s)
		if _, err := run(s, touchCmd(mib)); err != nil {
			pause.fail(con.rt, fmt.Errorf("touching %d MiB: %w", mib, err))
			continue
		}
		out, _ := run(s, "pgrep -f '[b]ytearray' | head -n 1")
		pids[con.rt] = strings.TrimSpace(out)
		sbx[con.rt] = s
	}
	leftSnaps := 0
	// The restored gvisor sandboxes' memory cgroup peaks (MiB), and its
	// limit.
	var peaks []float64
	var peakLimit float64
	for i := -1; i < n && b.ctx.Err() == nil; i++ {
		measured := i >= 0 // the first round is a warm-up
		for _, con := range b.cons {
			s := sbx[con.rt]
			if s == nil {
				continue
			}
			rt := con.rt
			t0 := time.Now()
			if _, err := s.Pause(bg()); err != nil {
				pause.fail(rt, err)
				sbx[rt] = nil
				continue
			}
			t1 := time.Now()
			m := b.sandboxMemory(con, []string{s.ID})[s.ID]
			pausedDir := filepath.Join(con.data, "checkpoints", "paused-"+s.ID)
			size, sizeErr := dirSize(pausedDir)
			var pauseMarks []time.Time
			var pauseErr error
			if rt == gvisor {
				pauseMarks, pauseErr = checkpointMarks(pausedDir)
			}
			tR := time.Now()
			if _, err := con.c.Connect(bg(), s.ID, sdk.ConnectOptions{Timeout: sandboxTimeout}); err != nil {
				resume.fail(rt, err)
				sbx[rt] = nil
				continue
			}
			t2 := time.Now()
			var resumeMarks []time.Time
			var resumeErr error
			if rt == gvisor {
				resumeMarks, resumeErr = bootMarks(con.data, s.ID)
				if peak, limit := memoryPeak("hutch-gvisor", s.ID); measured && peak > 0 {
					peaks = append(peaks, float64(peak)/(1<<20))
					peakLimit = float64(limit) / (1 << 20)
				}
			}
			if _, err := run(s, "true"); err != nil {
				resumeCmd.fail(rt, err)
				sbx[rt] = nil
				continue
			}
			t3 := time.Now()
			before := checkpointDirs(con.data)
			t4 := time.Now()
			info, err := s.CreateSnapshot(bg(), sdk.SnapshotOptions{Name: fmt.Sprintf("%s-%s-%d", b.cfg.prefix, con.name, mib)})
			t5 := time.Now()
			if err != nil {
				snap.fail(rt, err)
				continue
			}
			b.snaps[info.ID] = con
			var snapSize int64
			var newDirs []string
			for d := range checkpointDirs(con.data) {
				if !before[d] {
					newDirs = append(newDirs, d)
					sz, _ := dirSize(d)
					snapSize += sz
				}
			}
			if _, err := con.c.DeleteSnapshot(bg(), info.ID); err != nil {
				fmt.Printf("warning: %v\n", err)
			} else {
				delete(b.snaps, info.ID)
			}
			for _, d := range newDirs {
				if _, err := os.Stat(d); err == nil {
					leftSnaps++
				}
			}
			if !measured {
				continue
			}
			pause.addTime(rt, t1.Sub(t0))
			held.add(rt, mib64(m.pss))
			resume.addTime(rt, t2.Sub(tR))
			resumeCmd.addTime(rt, t3.Sub(tR))
			snap.addTime(rt, t5.Sub(t4))
			if rt == gvisor {
				addPhases(pausePhases, append(append([]time.Time{t0}, pauseMarks...), t1), pauseErr)
				addPhases(resumePhases, append(append([]time.Time{tR}, resumeMarks...), t2), resumeErr)
				if sizeErr != nil {
					disk.fail(rt, sizeErr)
				} else {
					disk.add(rt, float64(size)/(1<<20))
				}
				if len(newDirs) == 0 {
					snapDisk.fail(rt, errors.New("no new checkpoint directory after the snapshot"))
				} else {
					snapDisk.add(rt, float64(snapSize)/(1<<20))
				}
			}
		}
	}
	for rt, s := range sbx {
		if s == nil || pids[rt] == "" {
			continue
		}
		if out, err := run(s, "kill -0 "+pids[rt]+" && echo alive"); err != nil || !strings.Contains(out, "alive") {
			pause.note("%s: the touching process (pid %s) did not survive the pauses: %v", runtimeNames[rt], pids[rt], err)
		}
	}
	if len(peaks) > 0 {
		sort.Float64s(peaks)
		resume.note("gvisor: the restored sandbox's memory cgroup (made anew by each restore) peaked by the 201 at %.0f MiB p50, %.0f MiB at most, of its %.0f MiB limit (memory.max_usage_in_bytes: guest memory, the sentry's, the page cache of what the restore read)",
			peaks[len(peaks)/2], peaks[len(peaks)-1], peakLimit)
	}
	if leftSnaps > 0 {
		snapDisk.note("%d snapshot checkpoint directories were still on disk right after their snapshot was deleted (hutch serve's sweep removes unused checkpoints a minute old or more, once a minute)", leftSnaps)
	}
}

// checkpointMarks are the moments a gvisor checkpoint's directory shows
// (see gvisor.Checkpoint): its birth (Hutch made it, after the freeze),
// the first birth of runsc's image files, their last write, and the last
// write of Hutch's files beside them.
func checkpointMarks(dir string) ([]time.Time, error) {
	born, err := btime(dir)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var imgBorn, imgDone, hutchDone time.Time
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		bt, err1 := btime(p)
		mt, err2 := mtime(p)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if strings.HasPrefix(e.Name(), "hutch-") || e.Name() == "state.json" {
			hutchDone = later(hutchDone, mt)
			continue
		}
		if imgBorn.IsZero() || bt.Before(imgBorn) {
			imgBorn = bt
		}
		imgDone = later(imgDone, mt)
	}
	if imgBorn.IsZero() || hutchDone.IsZero() {
		return nil, fmt.Errorf("%s: no runsc image or no Hutch file", dir)
	}
	return []time.Time{born, imgBorn, imgDone, hutchDone}, nil
}

// bootMarks are the moments gvisor sandbox id of the server with data
// directory data shows while it is made (see gvisor.boot and its shim):
// shim.json written (just before the shim starts), runsc.log born (runsc
// started), init.pid written (runsc writes it last in creating the
// container: sandbox and gofer processes up, before start or restore)
// and runsc's last write of its container's state file (start or restore
// done: the container is running).
func bootMarks(data, id string) ([]time.Time, error) {
	dir := filepath.Join(data, "gvisor", "sandboxes", id)
	shim, err1 := mtime(filepath.Join(dir, "shim.json"))
	runsc, err2 := btime(filepath.Join(dir, "runsc.log"))
	pid, err3 := mtime(filepath.Join(dir, "init.pid"))
	state, err4 := mtime(filepath.Join(data, "gvisor", "runsc", id+"_sandbox:"+id+".state"))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, err
	}
	return []time.Time{shim, runsc, pid, state}, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// addPhases adds to each phase row the time between two marks in a row.
func addPhases(phases []*row, marks []time.Time, err error) {
	if err != nil {
		phases[0].fail(gvisor, err)
		return
	}
	for i, r := range phases {
		r.addTime(gvisor, marks[i+1].Sub(marks[i]))
	}
}

// memoryPeak is the most sandbox id's memory cgroup has held since it
// was made, and its limit, in bytes (cgroup v1: memory.max_usage_in_bytes;
// v2: memory.peak); 0 when unknown.
func memoryPeak(parent, id string) (peak, limit int64) {
	dir := cgroupDir("memory", parent, id)
	if dir == "" {
		return 0, 0
	}
	read := func(names ...string) int64 {
		for _, n := range names {
			if b, err := os.ReadFile(filepath.Join(dir, n)); err == nil {
				if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
					return v
				}
			}
		}
		return 0
	}
	return read("memory.max_usage_in_bytes", "memory.peak"), read("memory.limit_in_bytes", "memory.max")
}

func mib64(kib int64) float64 { return float64(kib) / 1024 }

// checkpointDirs lists data's checkpoints directory.
func checkpointDirs(data string) map[string]bool {
	out := map[string]bool{}
	ents, _ := os.ReadDir(filepath.Join(data, "checkpoints"))
	for _, e := range ents {
		out[filepath.Join(data, "checkpoints", e.Name())] = true
	}
	return out
}

// dirSize is the disk space the files under dir take (their blocks).
func dirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}

// forkRows times Sandbox.Fork of 4 from a running base sandbox until
// every fork answered a command (each reached by Client.Connect, all at
// once), and 4 creates at once from a snapshot of the same sandbox: on
// gvisor a fork is one checkpoint then 4 restores, the creates are the
// restores alone.
func (b *bench) forkRows() {
	fmt.Println("==> fork of 4")
	b.tab.section("fork of 4 from a running base sandbox (gvisor: one runsc checkpoint, 4 restores; native: its files captured, 4 creates)")
	f201 := b.tab.row("Sandbox.Fork(4) → 201 (all 4 items)", "ms")
	fCmd := b.tab.row("Sandbox.Fork(4) → all 4 answered a command", "ms")
	fCmd.goal, fCmd.goalMax = fmt.Sprintf("≤ %.0f ms", forkGoal), forkGoal
	cCmd := b.tab.row("4 Client.Create at once from its snapshot → all answered", "ms")
	var src [2]*sdk.Sandbox
	var snapIDs [2]string
	for _, con := range b.cons {
		s, err := con.newSandbox()
		if err != nil {
			f201.fail(con.rt, err)
			continue
		}
		defer kill(s)
		info, err := s.CreateSnapshot(bg(), sdk.SnapshotOptions{Name: fmt.Sprintf("%s-%s-fork", b.cfg.prefix, con.name)})
		if err != nil {
			cCmd.fail(con.rt, err)
		} else {
			b.snaps[info.ID] = con
			snapIDs[con.rt] = info.ID
		}
		src[con.rt] = s
	}
	// answered reaches each fork by Client.Connect, as a Go SDK user
	// would, and runs `true` in it, all at once; it returns the handles.
	answered := func(con *contender, ids []string) ([]*sdk.Sandbox, error) {
		var wg sync.WaitGroup
		errs := make([]error, len(ids))
		handles := make([]*sdk.Sandbox, len(ids))
		for j, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := con.c.Connect(bg(), id, sdk.ConnectOptions{Timeout: sandboxTimeout})
				if err != nil {
					errs[j] = err
					return
				}
				handles[j] = h
				_, errs[j] = run(h, "true")
			}()
		}
		wg.Wait()
		return handles, errors.Join(errs...)
	}
	for i := -1; i < b.cfg.nFork && b.ctx.Err() == nil; i++ {
		for _, con := range b.cons {
			s := src[con.rt]
			if s == nil {
				continue
			}
			rt := con.rt
			t0 := time.Now()
			res, err := s.Fork(bg(), sdk.ForkOptions{Count: 4, Timeout: sandboxTimeout})
			t1 := time.Now()
			if err != nil {
				f201.fail(rt, err)
				continue
			}
			var ids []string
			var itemErr error
			for _, r := range res {
				if r.Err != nil {
					itemErr = errors.Join(itemErr, r.Err)
					continue
				}
				ids = append(ids, r.Sandbox.ID)
			}
			handles, cmdErr := answered(con, ids)
			t2 := time.Now()
			for j, h := range handles {
				if h == nil {
					// Not reached: killed by its id.
					if err := con.c.Kill(bg(), ids[j]); err != nil && !errors.Is(err, sdk.ErrNotFound) {
						fmt.Printf("warning: kill fork %s: %v\n", ids[j], err)
					}
				}
			}
			killAll(handles)
			switch {
			case itemErr != nil || len(ids) != 4:
				f201.fail(rt, fmt.Errorf("%d of 4 forks: %v", len(ids), itemErr))
			case cmdErr != nil:
				fCmd.fail(rt, cmdErr)
			case i >= 0:
				f201.addTime(rt, t1.Sub(t0))
				fCmd.addTime(rt, t2.Sub(t0))
			}

			if snapIDs[rt] == "" {
				continue
			}
			var wg sync.WaitGroup
			made := make([]*sdk.Sandbox, 4)
			errs := make([]error, 4)
			t3 := time.Now()
			for j := range made {
				wg.Add(1)
				go func() {
					defer wg.Done()
					made[j], errs[j] = con.c.Create(bg(), sdk.CreateOptions{Template: snapIDs[rt], Timeout: sandboxTimeout})
					if errs[j] == nil {
						_, errs[j] = run(made[j], "true")
					}
				}()
			}
			wg.Wait()
			t4 := time.Now()
			var live []*sdk.Sandbox
			for _, m := range made {
				if m != nil {
					live = append(live, m)
				}
			}
			killAll(live)
			if err := errors.Join(errs...); err != nil {
				cCmd.fail(rt, err)
			} else if i >= 0 {
				cCmd.addTime(rt, t4.Sub(t3))
			}
		}
	}
	for rt, id := range snapIDs {
		if id == "" {
			continue
		}
		if _, err := b.cons[rt].c.DeleteSnapshot(bg(), id); err != nil {
			fmt.Printf("warning: %v\n", err)
		} else {
			delete(b.snaps, id)
		}
	}
}
