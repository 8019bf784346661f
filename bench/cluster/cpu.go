package main

import (
	"errors"
	"fmt"
	"os"
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
	nodes   []time.Duration
	client  time.Duration
	kernel  time.Duration
	other   time.Duration
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

// unattributed is the machine's busy time no process accounts for:
// interrupts and softirqs (network packets between namespaces among
// them) where the kernel keeps them apart, and processes that ended
// without a parent that was measured reaping them.
func (u cpuUse) unattributed() time.Duration {
	return max(0, u.machine-u.nodesTotal()-u.client-u.kernel-u.other)
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
)

// kthreadd is the kernel threads' parent.
const kthreadd = 2

// cpuMark is a reading of the counters a cpuUse is the difference of:
// every process's CPU so far (its own and its reaped children's) and its
// group, and the machine's busy time.
type cpuMark struct {
	procs  map[int]procCPU
	groups int // number of nodes
	busy   uint64
}

type procCPU struct {
	cpu   time.Duration
	group int
}

// markCPU reads the counters now; roots are the nodes' hutch serve pids.
func markCPU(roots []int) cpuMark {
	table := harness.NewProcTable()
	group := map[int]int{}
	for k, r := range roots {
		for _, pid := range table.Tree(r) {
			group[pid] = k
		}
	}
	for _, pid := range table.Tree(kthreadd) {
		group[pid] = groupKernel
	}
	self := os.Getpid()
	m := cpuMark{procs: map[int]procCPU{}, groups: len(roots)}
	for _, pids := range table {
		for _, pid := range pids {
			d, ok := harness.ProcCPU(pid)
			if !ok {
				continue
			}
			g, known := group[pid]
			switch {
			case pid == self:
				g = groupClient
			case !known:
				g = groupOther
			}
			m.procs[pid] = procCPU{d, g}
		}
	}
	m.busy, _ = busyTicks()
	return m
}

// since is the CPU used from m0 to m, each process in its group at m: a
// process found both times counts the difference, one that started in
// between all of its CPU; one that ended in between counts where its
// parent reaped it (a measured parent's children's time grows by it).
func (m cpuMark) since(m0 cpuMark) cpuUse {
	u := cpuUse{nodes: make([]time.Duration, m.groups)}
	for pid, p := range m.procs {
		d := p.cpu
		if p0, ok := m0.procs[pid]; ok {
			d = max(0, d-p0.cpu)
		}
		switch {
		case p.group >= 0:
			u.nodes[p.group] += d
		case p.group == groupClient:
			u.client += d
		case p.group == groupKernel:
			u.kernel += d
		default:
			u.other += d
		}
	}
	u.machine = time.Duration(m.busy-m0.busy) * time.Second / 100
	return u
}

// busyTicks is the busy time of all CPUs so far, in USER_HZ (100) ticks,
// from /proc/stat's "cpu" line: user, nice, system, irq and softirq, but
// not steal (time the hypervisor gave another machine) nor guest (already
// in user).
func busyTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("unexpected /proc/stat")
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system irq softirq
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += v
	}
	return busy, nil
}
