package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

// How a sandbox's host processes are found (memory rows):
//
//   - native: every process in the sandbox's cgroup, /hutch/<id> of the
//     pids hierarchy (cgroup v1 or hybrid; /sys/fs/cgroup/hutch/<id> on
//     v2), and below it: its init, envd and what they run;
//   - gvisor: the sandbox's shim, the process whose command line is
//     `hutch-gvisor-shim <data>/gvisor/sandboxes/<id>/shim.json`, and all
//     its descendants (runsc run, runsc-gofer, runsc-sandbox — the sentry —
//     and the systrap stub processes, which have no command line), plus
//     any process in its cgroup /hutch-gvisor/<id> that escaped the tree.
//
// Each process's memory is its Pss from /proc/<pid>/smaps_rollup: shared
// pages are split among the processes mapping them, so the sum over
// sandboxes counts no page twice. The sentry's guest memory is a memfd
// the sentry and the stubs map: it is in their Pss as far as it is
// touched.

// memSettle is how long the sandboxes idle before they are measured.
const memSettle = 10 * time.Second

// memoryRows measures idle sandboxes of each runtime in turn: one, then
// -mem-count (fewer when MemAvailable would drop under -mem-floor).
func (b *bench) memoryRows() {
	fmt.Println("==> idle memory per sandbox")
	b.tab.section("idle memory per sandbox (created, no command run, 10 s idle; see memory.go for the method)")
	one := b.tab.row("1 sandbox: PSS of its host processes", "MiB")
	many := b.tab.row(fmt.Sprintf("%d sandboxes: PSS per sandbox (n = sandboxes)", b.cfg.memCount), "MiB")
	cg := b.tab.row(fmt.Sprintf("%d sandboxes: memory cgroup usage per sandbox", b.cfg.memCount), "MiB")
	avail := b.tab.row(fmt.Sprintf("%d sandboxes: host MemAvailable drop ÷ sandboxes", b.cfg.memCount), "MiB")
	cpu := b.tab.row(fmt.Sprintf("%d sandboxes: host CPU per idle sandbox (over %v)", b.cfg.memCount, cpuSample), "% CPU")
	b.forBoth(func(con *contender) {
		if b.ctx.Err() != nil {
			return
		}
		var sbx []*sdk.Sandbox
		defer func() { killAll(sbx) }()
		avail0 := memAvailable()
		s, err := con.newSandbox()
		if err != nil {
			one.fail(con.rt, err)
			return
		}
		sbx = append(sbx, s)
		time.Sleep(memSettle)
		m := b.sandboxMemory(con, []string{s.ID})
		if m[s.ID].pids == 0 {
			one.fail(con.rt, fmt.Errorf("no host process found for sandbox %s", s.ID))
			return
		}
		one.add(con.rt, mib(m[s.ID].pss))
		one.note("%s: %s", con.name, m[s.ID].describe())

		for len(sbx) < b.cfg.memCount && b.ctx.Err() == nil {
			if a := memAvailable(); a < int64(b.cfg.memFloor)<<10 {
				many.note("%s: stopped at %d sandboxes: MemAvailable %.0f MiB, under -mem-floor %d MiB", con.name, len(sbx), mib(a), b.cfg.memFloor)
				break
			}
			s, err := con.newSandbox()
			if err != nil {
				many.fail(con.rt, err)
				break
			}
			sbx = append(sbx, s)
		}
		time.Sleep(memSettle)
		ids := make([]string, len(sbx))
		for i, s := range sbx {
			ids[i] = s.ID
		}
		ms := b.sandboxMemory(con, ids)
		avail1 := memAvailable()
		// CPU: what their processes use, and the host, over cpuSample.
		i0, t0, _ := harness.CPUSample()
		c0 := map[string]int64{}
		for _, id := range ids {
			c0[id] = cpuTicks(ms[id].pidList)
		}
		start := time.Now()
		time.Sleep(cpuSample)
		el := time.Since(start).Seconds()
		for _, id := range ids {
			cpu.add(con.rt, 100*float64(cpuTicks(ms[id].pidList)-c0[id])/clockTicks/el)
		}
		i1, t1, _ := harness.CPUSample()
		busy := 0.0
		if t1 > t0 {
			busy = 1 - float64(i1-i0)/float64(t1-t0)
		}
		var sum procMem
		for _, id := range ids {
			mm := ms[id]
			if mm.pids == 0 {
				many.fail(con.rt, fmt.Errorf("no host process found for sandbox %s", id))
				continue
			}
			many.add(con.rt, mib(mm.pss))
			if mm.cgroup >= 0 {
				cg.add(con.rt, mib(mm.cgroup))
			}
			sum.merge(mm)
		}
		avail.add(con.rt, mib(avail0-avail1)/float64(len(sbx)))
		many.note("%s: %d sandboxes; summed over them: %s", con.name, len(sbx), sum.describe())
		cpu.note("%s: the host's CPUs were %.0f%% busy meanwhile (everything, not only these sandboxes)", con.name, 100*busy)
	})
	avail.note("host-wide: anything else the machine does in the meantime moves it; the page cache the sandboxes read is in it")
	cg.note("memory.usage_in_bytes (v1) or memory.current (v2) of the sandbox's memory cgroup: its pages and page cache, and its kernel memory; the gvisor shim and the runsc run process are not in it")
}

// cpuSample is how long the idle sandboxes' CPU use is sampled.
const cpuSample = 5 * time.Second

// procMem is the memory of a set of processes, in KiB, by kind.
type procMem struct {
	pss     int64
	pids    int
	pidList []int
	cgroup  int64 // KiB; -1: unknown
	byKind  map[string]*kindMem
}

type kindMem struct {
	n   int
	pss int64
}

func (m *procMem) merge(o procMem) {
	m.pss += o.pss
	m.pids += o.pids
	if m.byKind == nil {
		m.byKind = map[string]*kindMem{}
	}
	for k, v := range o.byKind {
		if m.byKind[k] == nil {
			m.byKind[k] = &kindMem{}
		}
		m.byKind[k].n += v.n
		m.byKind[k].pss += v.pss
	}
}

// describe says how many processes of which kinds and their PSS.
func (m procMem) describe() string {
	kinds := make([]string, 0, len(m.byKind))
	for k := range m.byKind {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return m.byKind[kinds[i]].pss > m.byKind[kinds[j]].pss })
	var parts []string
	for _, k := range kinds {
		v := m.byKind[k]
		parts = append(parts, fmt.Sprintf("%s ×%d %.1f MiB", k, v.n, mib(v.pss)))
	}
	return fmt.Sprintf("%d processes, PSS %.1f MiB (%s)", m.pids, mib(m.pss), strings.Join(parts, ", "))
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// sandboxMemory finds the host processes of sandboxes ids of con and
// reads their memory (see the method above).
func (b *bench) sandboxMemory(con *contender, ids []string) map[string]procMem {
	t := harness.NewProcTable()
	shims := map[string]int{}
	if con.rt == gvisor {
		prefix := filepath.Join(con.data, "gvisor", "sandboxes") + "/"
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			argv := cmdline(pid)
			if len(argv) == 2 && argv[0] == "hutch-gvisor-shim" && strings.HasPrefix(argv[1], prefix) {
				shims[filepath.Base(filepath.Dir(argv[1]))] = pid
			}
		}
	}
	parent := "hutch"
	if con.rt == gvisor {
		parent = "hutch-gvisor"
	}
	out := map[string]procMem{}
	for _, id := range ids {
		pids := cgroupProcs(parent, id)
		if pid, ok := shims[id]; ok {
			pids = union(pids, t.Tree(pid))
		}
		m := procMem{cgroup: cgroupMemory(parent, id), byKind: map[string]*kindMem{}}
		for _, pid := range pids {
			r, err := harness.ReadRollup(pid)
			if err != nil {
				continue // gone
			}
			m.pids++
			m.pidList = append(m.pidList, pid)
			m.pss += r.Pss
			k := kind(pid)
			if m.byKind[k] == nil {
				m.byKind[k] = &kindMem{}
			}
			m.byKind[k].n++
			m.byKind[k].pss += r.Pss
		}
		out[id] = m
	}
	return out
}

// kind names a process by its argv[0]'s base name (runsc names its own
// processes so), else its comm in brackets (systrap's stubs have no
// command line).
func kind(pid int) string {
	if argv := cmdline(pid); len(argv) > 0 && argv[0] != "" {
		return filepath.Base(argv[0])
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return "[" + strings.TrimSpace(string(b)) + "]"
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// cgroupDir is the directory of sandbox id's cgroup under parent in
// controller ctrl's hierarchy (v1, hybrid) or the unified one (v2).
func cgroupDir(ctrl, parent, id string) string {
	for _, d := range []string{filepath.Join("/sys/fs/cgroup", ctrl, parent, id), filepath.Join("/sys/fs/cgroup", parent, id)} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// cgroupProcs lists the processes in sandbox id's cgroup and below.
func cgroupProcs(parent, id string) []int {
	dir := cgroupDir("pids", parent, id)
	if dir == "" {
		return nil
	}
	var out []int
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}

// cgroupMemory is sandbox id's memory cgroup usage in KiB, -1 unknown.
func cgroupMemory(parent, id string) int64 {
	dir := cgroupDir("memory", parent, id)
	for _, f := range []string{"memory.usage_in_bytes", "memory.current"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && dir != "" {
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
				return v >> 10
			}
		}
	}
	return -1
}

func union(lists ...[]int) []int {
	seen := map[int]bool{}
	var out []int
	for _, l := range lists {
		for _, p := range l {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

// cpuTicks is the CPU time (user + system, all threads) processes pids
// have used, in clock ticks.
func cpuTicks(pids []int) int64 {
	var total int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		// After the command name: state is field 3, utime 14, stime 15.
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += u + st
	}
	return total
}

// memAvailable is the host's MemAvailable in KiB.
func memAvailable() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemAvailable:")); ok {
			n, _ := strconv.ParseInt(strings.Fields(string(v))[0], 10, 64)
			return n
		}
	}
	return 0
}

// killAll kills sandboxes, four at a time.
func killAll(sbx []*sdk.Sandbox) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, s := range sbx {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			kill(s)
		}()
	}
	wg.Wait()
}
