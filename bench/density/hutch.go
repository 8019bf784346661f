package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

// hutchRow is Hutch's row, through the Go SDK against the script's
// `hutch serve --warm 0`:
//
//  1. with no other sandbox running, -warmup then -samples iterations of
//     create → first command (timed: c.Create, then
//     sbx.Commands.Run("true"), as bench/create measures it), each
//     followed by a timed list of every sandbox, get of this one and
//     kill of it (the reference for serve's responsiveness);
//  2. N sandboxes started -c at once, each c.Create then `sleep infinity`
//     started in the background (Commands.Start with no timeout) and the
//     stream left (Disconnect: the process keeps running), so each
//     sandbox idles with its init, envd and sleep;
//  3. with N running: the memory of every process of the sandboxes,
//     serve's own memory and /proc/meminfo; -samples create → first
//     command, each killed after; -samples list, get and kill;
//  4. every sandbox killed, -c at once.
func (b *bench) hutchRow() *result {
	r := newResult("hutch", "hutch serve (Go SDK)", "create → true")
	apiKey := os.Getenv("E2B_API_KEY")
	switch {
	case b.cfg.url == "":
		r.unavailable = "no server (-url; bench/density.sh starts hutch serve)"
	case apiKey == "":
		r.unavailable = "E2B_API_KEY is not set (bench/density.sh sets it)"
	}
	var c *sdk.Client
	if r.unavailable == "" {
		var err error
		// Both URLs at the one listener: serve routes sandbox traffic on
		// the API's.
		if c, err = sdk.NewClient(sdk.Config{APIKey: apiKey, APIURL: b.cfg.url, SandboxURL: b.cfg.url}); err != nil {
			r.unavailable = harness.OneLine(err.Error())
		}
	}
	if r.unavailable != "" {
		fmt.Printf("%s: unavailable: %s\n", r.name, r.unavailable)
		return r
	}
	for _, op := range respOps {
		r.resp[op.key] = &[2]series{}
	}

	// 1. With none running.
	fmt.Printf("%s: create → true with none running ", r.name)
	var warm series
	for i := 0; i < b.cfg.warmup+b.cfg.samples && b.ctx.Err() == nil; i++ {
		measured := i >= b.cfg.warmup
		cr, rn, sbx, err := b.createRun(c)
		switch {
		case err != nil && measured:
			r.create0.fail(err)
		case err != nil:
			warm.fail(err)
		case measured:
			r.create0.add(cr + rn)
			r.phase0[0].add(cr)
			r.phase0[1].add(rn)
		}
		if sbx == nil {
			continue
		}
		if measured {
			b.timeList(c, r, 0)
			b.timeGet(c, r, 0, sbx.ID)
			b.timeKill(c, r, 0, sbx.ID)
			dot(i-b.cfg.warmup, b.cfg.samples)
		} else if err := b.kill(c, sbx.ID); err != nil {
			r.noteRemoveErr(err)
		}
	}
	if len(r.create0.d) == 0 {
		first := r.create0.firstErr
		if first == "" {
			first = warm.firstErr
		}
		r.unavailable = "every create failed: " + orNone(first)
		fmt.Println(" unavailable:", r.unavailable)
		return r
	}
	fmt.Printf(" p50 %s ms\n", ms(r.create0.pct(.5)))
	if ids, err := b.hutchPs(); err == nil && len(ids) > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d sandboxes were left running before the start of N (kills that failed?)", len(ids)))
	}

	// 2. N idle sandboxes, c at once; the first failure stops the starts.
	r.serve0 = readServe(b.cfg.servePid)
	r.mounts0 = mounts(b.cfg.servePid)
	r.mi0, r.tasks0, r.loops0 = meminfo(), tasks(), loopDevices()
	fmt.Printf("%s: starting %d idle sandboxes (sleep infinity), %d at once:", r.name, b.cfg.n, b.cfg.c)
	ids, _ := b.fill(r, func() (func(int) (string, error), func(), error) {
		return func(int) (string, error) { return b.startIdle(c) }, nil, nil
	})
	fillDone(r, ids)

	// 3. With N running.
	if r.created > 0 && b.ctx.Err() == nil {
		b.pause(b.cfg.settle)
		r.mem, r.limits = b.hutchMemory(ids)
		r.serve1 = readServe(b.cfg.servePid)
		r.mounts1 = mounts(b.cfg.servePid)
		r.mi1, r.tasks1, r.loops1 = meminfo(), tasks(), loopDevices()
		r.mem.sampleCPU(3 * time.Second)
		if all, err := b.hutchPs(); err == nil && len(all) != len(ids) {
			r.notes = append(r.notes, fmt.Sprintf("hutch ps counted %d sandboxes while %d idle ones were started (and measured)", len(all), len(ids)))
		}
		fmt.Printf("%s: with %d running: %.2f MiB PSS, %.2f MiB private dirty per sandbox\n", r.name, r.created,
			r.mem.per(r.mem.pss), r.mem.per(r.mem.dirty))

		fmt.Printf("%s: create → true with %d running ", r.name, r.created)
		for i := 0; i < b.cfg.samples && b.ctx.Err() == nil; i++ {
			cr, rn, sbx, err := b.createRun(c)
			if err != nil {
				r.createN.fail(err)
			} else {
				r.createN.add(cr + rn)
				r.phaseN[0].add(cr)
				r.phaseN[1].add(rn)
			}
			if sbx != nil {
				if err := b.kill(c, sbx.ID); err != nil {
					r.noteRemoveErr(err)
				}
			}
			dot(i, b.cfg.samples)
		}
		if len(r.createN.d) > 0 {
			fmt.Printf(" p50 %s ms", ms(r.createN.pct(.5)))
		}
		fmt.Println()

		fmt.Printf("%s: list, get, kill with %d running ", r.name, r.created)
		for i := 0; i < b.cfg.samples && b.ctx.Err() == nil; i++ {
			b.timeList(c, r, 1)
		}
		fmt.Print(".")
		for i := 0; i < b.cfg.samples && b.ctx.Err() == nil; i++ {
			b.timeGet(c, r, 1, ids[rand.IntN(len(ids))])
		}
		fmt.Print(".")
		// Each kill takes a random one of the idle sandboxes away.
		for i := 0; i < b.cfg.samples && b.ctx.Err() == nil && len(ids) > 0; i++ {
			k := rand.IntN(len(ids))
			id := ids[k]
			ids[k] = ids[len(ids)-1]
			ids = ids[:len(ids)-1]
			b.timeKill(c, r, 1, id)
		}
		fmt.Println(".")
	}

	// 4. Kill the rest, c at once.
	fmt.Printf("%s: killing %d sandboxes, %d at once:", r.name, len(ids), b.cfg.c)
	b.removeAll(r, ids, func() (func(string) error, func(), error) {
		return func(id string) error { return b.kill(c, id) }, nil, nil
	})
	return r
}

// opCtx bounds one request (or a create → first command).
func (b *bench) opCtx() (context.Context, context.CancelFunc) {
	// Not the harness's context: on Ctrl-C a request in flight finishes,
	// so that what it made is known and removed.
	return context.WithTimeout(context.Background(), b.cfg.timeout)
}

// createRun creates a sandbox and runs `true` in it, timing both; the
// sandbox is returned for killing, also when the command failed.
func (b *bench) createRun(c *sdk.Client) (create, run time.Duration, sbx *sdk.Sandbox, err error) {
	ctx, cancel := b.opCtx()
	defer cancel()
	t0 := time.Now()
	sbx, err = c.Create(ctx, sdk.CreateOptions{})
	if err != nil {
		return 0, 0, nil, err
	}
	t1 := time.Now()
	if _, err := sbx.Commands.Run(ctx, "true", nil); err != nil {
		return 0, 0, sbx, err
	}
	t2 := time.Now()
	return t1.Sub(t0), t2.Sub(t1), sbx, nil
}

// startIdle creates a sandbox that lives -sandbox-timeout and starts
// `sleep infinity` in it in the background, with no command timeout (the
// default, 60 s, would have envd kill it), then leaves the stream: envd
// keeps the process. A sandbox whose sleep did not start is killed.
func (b *bench) startIdle(c *sdk.Client) (string, error) {
	ctx, cancel := b.opCtx()
	defer cancel()
	sbx, err := c.Create(ctx, sdk.CreateOptions{Timeout: b.cfg.sandboxTimeout})
	if err != nil {
		return "", err
	}
	h, err := sbx.Commands.Start(ctx, "sleep infinity", &sdk.RunOptions{Timeout: sdk.NoTimeout})
	if err != nil {
		b.kill(c, sbx.ID)
		return "", fmt.Errorf("sandbox %s: start sleep infinity: %w", sbx.ID, err)
	}
	h.Disconnect()
	return sbx.ID, nil
}

func (b *bench) kill(c *sdk.Client, id string) error {
	ctx, cancel := b.opCtx()
	defer cancel()
	return c.Kill(ctx, id)
}

// timeList times listing every sandbox, all pages (100 per page, the
// API's most); with is 0 (none but one running) or 1 (N running).
func (b *bench) timeList(c *sdk.Client, r *result, with int) {
	ctx, cancel := b.opCtx()
	defer cancel()
	t0 := time.Now()
	var err error
	for _, e := range c.List(sdk.ListOptions{}).All(ctx) {
		if e != nil {
			err = e
			break
		}
	}
	d := time.Since(t0)
	s := &r.resp["list"][with]
	if err != nil {
		s.fail(err)
		return
	}
	s.add(d)
}

func (b *bench) timeGet(c *sdk.Client, r *result, with int, id string) {
	ctx, cancel := b.opCtx()
	defer cancel()
	t0 := time.Now()
	_, err := c.GetInfo(ctx, id)
	d := time.Since(t0)
	s := &r.resp["get"][with]
	if err != nil {
		s.fail(err)
		return
	}
	s.add(d)
}

func (b *bench) timeKill(c *sdk.Client, r *result, with int, id string) {
	t0 := time.Now()
	err := b.kill(c, id)
	d := time.Since(t0)
	s := &r.resp["kill"][with]
	if err != nil {
		s.fail(err)
		r.noteRemoveErr(err)
		return
	}
	s.add(d)
}

// psEntry is what `hutch ps --json` says of a sandbox.
type psEntry struct {
	ID        string
	Pid       int
	Resources struct {
		MemoryBytes int64
		CPUs        float64
		Pids        int64
		DiskBytes   int64
	}
}

// hutchPsJSON lists the sandboxes of the server's data directory.
func (b *bench) hutchPsJSON() ([]psEntry, error) {
	cmd := exec.Command(b.cfg.hutch, "ps", "--json")
	cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+b.cfg.data)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hutch ps --json: %w", err)
	}
	var list []psEntry
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("hutch ps --json: %w", err)
	}
	return list, nil
}

func (b *bench) hutchPs() ([]string, error) {
	list, err := b.hutchPsJSON()
	var ids []string
	for _, e := range list {
		ids = append(ids, e.ID)
	}
	return ids, err
}

// hutchMemory sums the memory of the sandboxes ids: every process in each
// one's cgroup (the pids controller's on a hybrid or v1 host, the unified
// one's on v2) and, in case one escaped it, every descendant of its init
// (`hutch ps --json`). It also returns the limits the runtime reports.
func (b *bench) hutchMemory(ids []string) (*memSum, string) {
	m := newMemSum()
	pids := map[string]int{}
	limits := ""
	list, err := b.hutchPsJSON()
	if err != nil {
		limits = err.Error()
	}
	for _, e := range list {
		pids[e.ID] = e.Pid
		if limits == "" && e.Pid > 0 {
			res := e.Resources
			limits = fmt.Sprintf("memory %dM, cpus %g, pids %d, disk %dM", res.MemoryBytes>>20, res.CPUs, res.Pids, res.DiskBytes>>20)
		}
	}
	cgBase := ""
	for _, d := range []string{"/sys/fs/cgroup/pids/hutch", "/sys/fs/cgroup/hutch"} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			cgBase = d
			break
		}
	}
	t := harness.NewProcTable()
	for _, id := range ids {
		var procs []int
		if cgBase != "" {
			procs = cgroupProcs(filepath.Join(cgBase, id))
		}
		if pid := pids[id]; pid > 0 {
			procs = union(procs, t.Tree(pid))
		}
		m.add(procs)
	}
	return m, limits
}

// mounts counts the mounts in process pid's mount namespace.
func mounts(pid int) int {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}
