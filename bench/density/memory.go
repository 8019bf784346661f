package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// procMem is one process's memory from /proc/<pid>/smaps_rollup, in KiB.
type procMem struct {
	pss, rss, dirty int64
	// anon is Anonymous: heap, stacks and other memory backed by no file,
	// what a process's own allocations cost.
	anon int64
}

// readRollup reads process pid's memory (harness.ReadRollup).
func readRollup(pid int) (procMem, error) {
	r, err := harness.ReadRollup(pid)
	return procMem{pss: r.Pss, rss: r.Rss, dirty: r.Dirty, anon: r.Anon}, err
}

// statusField returns a number field ("Threads:") of /proc/<pid>/status.
func statusField(pid int, key string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// procName is the process's command name; for a program started as
// /proc/self/exe (comm "exe": how hutch runs envd from its own binary),
// the subcommand after it instead.
func procName(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	name := strings.TrimSpace(string(b))
	if name == "exe" {
		if cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
			if argv := strings.Split(string(cl), "\x00"); len(argv) > 1 && argv[1] != "" {
				name = argv[1]
			}
		}
	}
	return name
}

// nameMem is what the processes of one name (hutch-init, envd, sleep)
// add up to.
type nameMem struct {
	procs           int
	pss, rss, dirty int64
	pids            []int
	cpu             float64 // share of one CPU used over sampleCPU's interval
}

// memSum is the memory of a set of sandboxes or containers: every process
// of each, summed.
type memSum struct {
	units   int // sandboxes or containers measured
	missing int // of them, those with no process found
	procs   int
	threads int64
	procMem
	names map[string]*nameMem
	// From sampleCPU: the host's CPUs busy, and what the processes
	// measured used, as a share of one CPU (-1: not sampled).
	hostBusy, cpu float64
}

func newMemSum() *memSum { return &memSum{names: map[string]*nameMem{}, hostBusy: -1, cpu: -1} }

// add counts the processes pids as one sandbox or container.
func (s *memSum) add(pids []int) {
	s.units++
	found := 0
	for _, pid := range pids {
		m, err := readRollup(pid)
		if err != nil {
			continue // exited meanwhile
		}
		found++
		s.procs++
		s.pss += m.pss
		s.rss += m.rss
		s.dirty += m.dirty
		s.anon += m.anon
		s.threads += statusField(pid, "Threads:")
		n := procName(pid)
		nm := s.names[n]
		if nm == nil {
			nm = &nameMem{}
			s.names[n] = nm
		}
		nm.procs++
		nm.pids = append(nm.pids, pid)
		nm.pss += m.pss
		nm.rss += m.rss
		nm.dirty += m.dirty
	}
	if found == 0 {
		s.missing++
	}
}

// byName describes the processes per name, most PSS first: how many per
// sandbox and their PSS and private dirty per process.
func (s *memSum) byName() string {
	var out []string
	for _, n := range s.sortedNames() {
		m := s.names[n]
		out = append(out, fmt.Sprintf("%s ×%.2g (PSS %.2f, private dirty %.2f, RSS %.2f MiB each)", n,
			float64(m.procs)/float64(max(1, s.units)), mib(m.pss)/float64(m.procs),
			mib(m.dirty)/float64(m.procs), mib(m.rss)/float64(m.procs)))
	}
	return strings.Join(out, ", ")
}

// sortedNames are the process names, most PSS first.
func (s *memSum) sortedNames() []string {
	var names []string
	for n := range s.names {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return s.names[names[i]].pss > s.names[names[j]].pss })
	return names
}

// per is v KiB per measured unit, in MiB.
func (s *memSum) per(v int64) float64 {
	if s.units == 0 {
		return 0
	}
	return mib(v) / float64(s.units)
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// cgroupProcs lists the processes in cgroup dir and every cgroup below it.
func cgroupProcs(dir string) []int {
	var out []int
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}

// union merges pid lists without duplicates.
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

// meminfo reads /proc/meminfo, in KiB.
func meminfo() map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err == nil {
			out[k] = n
		}
	}
	return out
}

// meminfoKeys are the /proc/meminfo lines shown as the change per sandbox:
// where memory that no process's PSS shows went (page tables, kernel
// stacks, slab: cgroups, mounts, namespaces, inodes; shmem: tmpfs; cached:
// the disks' page cache).
var meminfoKeys = []struct{ key, name string }{
	{"AnonPages", "AnonPages"},
	{"Shmem", "Shmem"},
	{"Cached", "Cached"},
	{"PageTables", "PageTables"},
	{"KernelStack", "KernelStack"},
	{"SUnreclaim", "Slab unreclaimable"},
	{"SReclaimable", "Slab reclaimable"},
	{"Percpu", "Percpu"},
}

// serveMem is hutch serve's own footprint.
type serveMem struct {
	procMem
	threads int64
	fds     int
	ok      bool
}

func readServe(pid int) serveMem {
	if pid <= 0 {
		return serveMem{}
	}
	m, err := readRollup(pid)
	if err != nil {
		return serveMem{}
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return serveMem{procMem: m, threads: statusField(pid, "Threads:"), fds: len(fds), ok: true}
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuTicks is the CPU time (user + system, all threads) process pid has
// used, in clock ticks.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	// After the command name: state is field 3, utime 14, stime 15.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// sampleCPU measures, over d, how busy the host's CPUs are and how much
// CPU the measured processes use, in all and by name: idle sandboxes
// should use next to none, and whatever they do use is taken from
// everything else on the host.
func (s *memSum) sampleCPU(d time.Duration) {
	read := func() map[string]int64 {
		out := map[string]int64{}
		for n, nm := range s.names {
			for _, pid := range nm.pids {
				out[n] += cpuTicks(pid)
			}
		}
		return out
	}
	i0, t0, err := harness.CPUSample()
	c0 := read()
	start := time.Now()
	time.Sleep(d)
	c1 := read()
	el := time.Since(start).Seconds()
	i1, t1, err2 := harness.CPUSample()
	if err == nil && err2 == nil && t1 > t0 {
		s.hostBusy = 1 - float64(i1-i0)/float64(t1-t0)
	}
	s.cpu = 0
	for n, nm := range s.names {
		nm.cpu = float64(c1[n]-c0[n]) / clockTicks / el
		s.cpu += nm.cpu
	}
}
