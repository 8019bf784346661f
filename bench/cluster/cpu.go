package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// cpuUse is the CPU used over a phase, by whom: each node (its hutch
// serve and every process below it: the embedded etcd member, the
// sandboxes' inits and envds, the helpers it runs), this harness (the
// client), the kernel's threads (kthreadd's: the workers that tear down
// namespaces, cgroups and loop devices, RCU), every other process on the
// machine, and the machine as a whole (all CPUs' busy time).
type cpuUse struct {
	nodes  []time.Duration
	client time.Duration
	kernel time.Duration
	other  time.Duration
	// irq is the machine's time in interrupts and softirqs (packets
	// between the namespaces among them), which the kernel charges to no
	// process; it is part of machine.
	irq     time.Duration
	machine time.Duration
}

// nodesTotal is the nodes' CPU together.
func (u cpuUse) nodesTotal() time.Duration {
	var s time.Duration
	for _, d := range u.nodes {
		s += d
	}
	return s
}

// unattributed is the machine's busy time neither a process, a
// sandbox's cgroup nor the interrupts account for: processes that ended
// without a measured parent reaping them (exited kernel workers), what
// processes outside the sandboxes' cgroups lose to their times' whole
// ticks, and what a sandbox's init used before it moved into its cgroup.
func (u cpuUse) unattributed() time.Duration {
	return max(0, u.machine-u.nodesTotal()-u.client-u.kernel-u.other-u.irq)
}

// work is the CPU a phase's calls cost the cluster: the machine's busy
// time less this harness's own (the client would be elsewhere; here it
// competes for the same CPUs) and other processes' (the machine's other
// work). It keeps what no node's process tree shows: the kernel's
// threads and interrupts working for the nodes.
func (u cpuUse) work() time.Duration { return max(0, u.machine-u.client-u.other) }

// Groups of processes a cpuMark tells apart; nodes are 0, 1, ….
const (
	groupClient = -1 - iota
	groupKernel
	groupOther
	// groupCgroup: a node's process in a cgroup of its own (a
	// sandbox's), counted through that cgroup.
	groupCgroup
)

// kthreadd is the kernel threads' parent.
const kthreadd = 2

// cpuMark is a reading of the counters a cpuUse is the difference of:
// every process's CPU so far (its own and its reaped children's) and its
// group, the CPU of the cgroups the nodes' sandboxes run in, and the
// machine's busy time.
//
// A process's times are whole ticks (10 ms) in /proc/<pid>/stat, each
// rounded down: a sandbox's init and envd that used 4 and 6 ms show 0.
// A node's descendants that run in a cgroup other than the node's own
// (a sandbox's) are therefore counted through that cgroup's CPU
// accounting, to the nanosecond and with the processes that already
// ended there; what such a process used before it moved into its cgroup
// is not counted.
type cpuMark struct {
	procs   map[int]procCPU
	cgroups map[string]procCPU // cgroup usage file → CPU, node
	groups  int                // number of nodes
	busy    uint64
	irq     uint64
}

type procCPU struct {
	cpu   time.Duration
	group int
	node  int // for groupCgroup: the node
}

// markCPU reads the counters now; roots are the nodes' hutch serve pids.
func markCPU(roots []int) cpuMark {
	table := harness.NewProcTable()
	m := cpuMark{procs: map[int]procCPU{}, cgroups: map[string]procCPU{}, groups: len(roots)}
	group := map[int]int{}
	nodeOf := map[int]int{}
	for k, r := range roots {
		own := cpuCgroup(r)
		for _, pid := range table.Tree(r) {
			group[pid] = k
			if pid == r || own == "" {
				continue
			}
			if cg := cpuCgroup(pid); cg != "" && cg != own {
				group[pid], nodeOf[pid] = groupCgroup, k
				if _, ok := m.cgroups[cg]; !ok {
					if d, ok := cgroupUsage(cg); ok {
						m.cgroups[cg] = procCPU{cpu: d, node: k}
					}
				}
			}
		}
	}
	for _, pid := range table.Tree(kthreadd) {
		group[pid] = groupKernel
	}
	self := os.Getpid()
	for _, pids := range table {
		for _, pid := range pids {
			g, known := group[pid]
			switch {
			case pid == self:
				g = groupClient
			case !known:
				g = groupOther
			}
			if d, ok := harness.ProcCPU(pid); ok {
				m.procs[pid] = procCPU{d, g, nodeOf[pid]}
			}
		}
	}
	m.busy, m.irq, _ = busyTicks()
	return m
}

// since is the CPU used from m0 to m, each process in its group at m: a
// process found both times counts the difference, one that started in
// between all of its CPU. One that ended in between is counted by the
// parent that reaped it, whose children's time grows by all the CPU the
// process ever used: what it had used at m0 is taken off its group again
// (its parent is of the same group but for orphans). The sandboxes'
// cgroups count as processes do; their processes only through them, but
// for those that ended (killed with their sandbox), which count as any.
func (m cpuMark) since(m0 cpuMark) cpuUse {
	u := cpuUse{nodes: make([]time.Duration, m.groups)}
	for cg, c := range m.cgroups {
		d := c.cpu
		if c0, ok := m0.cgroups[cg]; ok {
			d = max(0, d-c0.cpu)
		}
		u.nodes[c.node] += d
	}
	add := func(p procCPU, d time.Duration) {
		switch {
		case p.group >= 0:
			u.nodes[p.group] += d
		case p.group == groupCgroup:
			u.nodes[p.node] += d
		case p.group == groupClient:
			u.client += d
		case p.group == groupKernel:
			u.kernel += d
		default:
			u.other += d
		}
	}
	for pid, p := range m.procs {
		if p.group == groupCgroup {
			continue
		}
		d := p.cpu
		if p0, ok := m0.procs[pid]; ok {
			d = max(0, d-p0.cpu)
		}
		add(p, d)
	}
	for pid, p0 := range m0.procs {
		// Kernel threads are reaped without their time going anywhere.
		if _, ok := m.procs[pid]; !ok && p0.group != groupKernel {
			add(p0, -p0.cpu)
		}
	}
	for k := range u.nodes {
		u.nodes[k] = max(0, u.nodes[k])
	}
	u.client, u.kernel, u.other = max(0, u.client), max(0, u.kernel), max(0, u.other)
	u.machine = time.Duration(m.busy-m0.busy) * time.Second / 100
	u.irq = time.Duration(m.irq-m0.irq) * time.Second / 100
	return u
}

// cpuCgroup is the file that accounts the CPU of process pid's cgroup:
// cgroup v1's cpuacct.usage when the cpuacct controller is mounted on
// its own hierarchy (a hybrid host), else cgroup v2's cpu.stat; "" when
// unknown.
func cpuCgroup(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	v2 := ""
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" && parts[0] == "0" {
			v2 = filepath.Join("/sys/fs/cgroup", parts[2], "cpu.stat")
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "cpuacct" {
				return filepath.Join("/sys/fs/cgroup/cpuacct", parts[2], "cpuacct.usage")
			}
		}
	}
	return v2
}

// cgroupUsage reads a cgroup's CPU so far from the file cpuCgroup named.
func cgroupUsage(file string) (time.Duration, bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	if strings.HasSuffix(file, "cpuacct.usage") {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns), err == nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Duration(us) * time.Microsecond, err == nil
		}
	}
	return 0, false
}

// busyTicks is the busy time of all CPUs so far, and the part of it in
// interrupts and softirqs, in USER_HZ (100) ticks, from /proc/stat's
// "cpu" line: user, nice, system, irq and softirq, but not steal (time
// the hypervisor gave another machine) nor guest (already in user).
func busyTicks() (busy, irq uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, errors.New("unexpected /proc/stat")
	}
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += v
		if i >= 6 {
			irq += v
		}
	}
	return busy, irq, nil
}
