package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

// createGoal is the goal for a gvisor create → first command.
const createGoal = 150.0

// createRows times Client.Create then Commands.Run("true") on each
// runtime's --warm 0 server and on its warm server, one create at a time,
// the runtimes alternating; each sandbox is killed (untimed) before the
// next create. On gvisor's --warm 0 server it also says where the time
// goes (breakdown), and times runsc alone (the floor).
func (b *bench) createRows() {
	fmt.Println("==> create → first command")
	b.tab.section("create → first command (Client.Create, then Commands.Run(\"true\"))")
	cold201 := b.tab.row("--warm 0: create → 201", "ms")
	coldCmd := b.tab.row("--warm 0: create → first command", "ms")
	coldCmd.goal, coldCmd.goalMax = fmt.Sprintf("≤ %.0f ms", createGoal), createGoal
	var warm201, warmCmd *row
	if b.cfg.warmN > 0 && b.cons[native].warm != nil {
		warm201 = b.tab.row(fmt.Sprintf("warm pool of %d: create → 201", b.cfg.warmN), "ms")
		warmCmd = b.tab.row(fmt.Sprintf("warm pool of %d: create → first command", b.cfg.warmN), "ms")
		warmCmd.goal, warmCmd.goalMax = fmt.Sprintf("≤ %.0f ms", createGoal), createGoal
	}
	floor := b.tab.row("floor: runsc do /bin/true (no Hutch; gvisor column)", "ms")
	phases := []*row{
		b.tab.row("  gvisor --warm 0, where it goes: request → shim.json (Hutch's set-up)", "ms"),
		b.tab.row("  shim.json → runsc.log born (shim start, runsc exec)", "ms"),
		b.tab.row("  runsc.log born → init.pid (runsc create: sandbox and gofer processes, the sentry boots)", "ms"),
		b.tab.row("  init.pid → runsc's container state saved (runsc start: the first process starts)", "ms"),
		b.tab.row("  → 201 (envd starts under gVisor, link handshake, /init, record)", "ms"),
		b.tab.row("  201 → first command", "ms"),
	}

	// one creates a sandbox through c and runs `true`; on gvisor's --warm
	// 0 server the phases of its create too.
	one := func(con *contender, c *sdk.Client, r201, rCmd *row, breakdown bool) {
		t0 := time.Now()
		s, err := c.Create(bg(), sdk.CreateOptions{Timeout: sandboxTimeout})
		if err != nil {
			r201.fail(con.rt, err)
			return
		}
		defer kill(s)
		t1 := time.Now()
		if _, err := run(s, "true"); err != nil {
			rCmd.fail(con.rt, err)
			return
		}
		t2 := time.Now()
		if r201 != nil {
			r201.addTime(con.rt, t1.Sub(t0))
			rCmd.addTime(con.rt, t2.Sub(t0))
		}
		if breakdown && con.rt == gvisor {
			b.breakdown(phases, con, s.ID, t0, t1, t2)
		}
	}
	// One unmeasured of each first (page cache, the clients' connections).
	b.forBoth(func(con *contender) { one(con, con.c, nil, nil, false) })
	for i := 0; i < b.cfg.n && b.ctx.Err() == nil; i++ {
		b.forBoth(func(con *contender) { one(con, con.c, cold201, coldCmd, true) })
	}
	if warm201 != nil {
		b.forBoth(func(con *contender) {
			if con.warm != nil {
				one(con, con.warm, nil, nil, false)
			}
		})
		for i := 0; i < b.cfg.n && b.ctx.Err() == nil; i++ {
			b.forBoth(func(con *contender) {
				if con.warm == nil {
					return
				}
				// Each create finds its pool full, as a create now and then
				// would.
				if !b.poolFull(con) {
					warmCmd.note("%s: the pool was not full again within 30 s", con.name)
				}
				one(con, con.warm, warm201, warmCmd, false)
			})
		}
		warmCmd.note("each create waited for its server's pool to be full again (%d sandbox directories), plus %s", b.cfg.warmN, poolSettle)
	}
	if b.cfg.runsc != "" && b.ctx.Err() == nil {
		b.floorRows(floor)
	}
	phases[0].note("phases from the mtimes (birth time for runsc.log) of files in the sandbox's directory and runsc's root, against this process's clock; the kernel stamps files with a coarse clock (a few ms)")
}

// poolSettle is how long a warm create waits after its pool is full:
// the refill's last sandbox has just reported and its CPU is settling.
const poolSettle = 200 * time.Millisecond

// poolFull waits until con's warm server holds -warm sandbox directories
// (its pool is full and nothing else runs there), at most 30 s.
func (b *bench) poolFull(con *contender) bool {
	if con.warmData == "" {
		time.Sleep(time.Second)
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n := 0
		for _, d := range []string{filepath.Join(con.warmData, "sandboxes"), filepath.Join(con.warmData, "gvisor", "sandboxes")} {
			ents, _ := os.ReadDir(d)
			n += len(ents)
		}
		if n >= b.cfg.warmN {
			time.Sleep(poolSettle)
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// breakdown adds the phases of gvisor sandbox id's create, from the files
// it got on the way (bootMarks).
func (b *bench) breakdown(phases []*row, con *contender, id string, t0, t201, tCmd time.Time) {
	marks, err := bootMarks(con.data, id)
	addPhases(phases, append(append([]time.Time{t0}, marks...), t201, tCmd), err)
}

func mtime(p string) (time.Time, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// btime is a file's birth time (statx).
func btime(p string) (time.Time, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_BTIME, &st); err != nil {
		return time.Time{}, err
	}
	if st.Mask&unix.STATX_BTIME == 0 {
		return time.Time{}, fmt.Errorf("%s: no birth time", p)
	}
	return time.Unix(st.Btime.Sec, int64(st.Btime.Nsec)), nil
}

// floorRows times `runsc --platform=systrap --network=none do /bin/true`:
// a gVisor sandbox over the host's root, without Hutch, its mounts, link
// or envd.
func (b *bench) floorRows(r *row) {
	root := b.cfg.runscRoot
	if root == "" {
		d, err := os.MkdirTemp("/var/tmp", "hutch-bench-runsc-")
		if err != nil {
			r.fail(gvisor, err)
			return
		}
		defer os.RemoveAll(d)
		root = d
	}
	one := func() (time.Duration, error) {
		cmd := exec.Command(b.cfg.runsc, "--root="+root, "--platform=systrap", "--network=none", "do", "/bin/true")
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(t0)
		if err != nil {
			return 0, fmt.Errorf("runsc do: %v: %s", err, harness.OneLine(string(out)))
		}
		return d, nil
	}
	if _, err := one(); err != nil {
		r.fail(gvisor, err)
		return
	}
	for i := 0; i < b.cfg.n && b.ctx.Err() == nil; i++ {
		d, err := one()
		if err != nil {
			r.fail(gvisor, err)
			continue
		}
		r.addTime(gvisor, d)
	}
}

// execRows times Commands.Run("true") in a running sandbox of each
// runtime, alternating.
func (b *bench) execRows() {
	fmt.Println("==> exec round trip")
	b.tab.section("exec round trip in a running sandbox")
	r := b.tab.row(`Commands.Run("true")`, "ms")
	var sbx [2]*sdk.Sandbox
	for _, con := range b.cons {
		s, err := con.newSandbox()
		if err != nil {
			r.fail(con.rt, err)
			continue
		}
		defer kill(s)
		sbx[con.rt] = s
	}
	for i := -5; i < b.cfg.nExec && b.ctx.Err() == nil; i++ {
		for rt, s := range sbx {
			if s == nil {
				continue
			}
			t0 := time.Now()
			if _, err := run(s, "true"); err != nil {
				r.fail(rt, err)
				continue
			}
			if i >= 0 {
				r.addTime(rt, time.Since(t0))
			}
		}
	}
}
