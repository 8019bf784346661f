package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// treeMemory is the memory of a process and all its descendants.
type treeMemory struct {
	Procs  int
	PssKiB int64
	RssKiB int64
	// DirtyKiB is Private_Dirty: pages written by this sandbox alone (heap,
	// stacks, data), which no other sandbox can ever share.
	DirtyKiB int64
	Names    []string
	Limits   string // see limitsOf
}

// measureTree sums Pss and Rss from /proc/<pid>/smaps_rollup over the
// process trees rooted at roots.
func measureTree(roots ...int) (treeMemory, error) {
	var m treeMemory
	for _, pid := range harness.NewProcTable().Tree(roots...) {
		r, err := harness.ReadRollup(pid)
		if err != nil {
			if pid == roots[0] {
				return m, fmt.Errorf("process %d: %w", pid, err)
			}
			continue // exited meanwhile
		}
		m.PssKiB += r.Pss
		m.RssKiB += r.Rss
		m.DirtyKiB += r.Dirty
		m.Procs++
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
			m.Names = append(m.Names, filepath.Base(strings.TrimSpace(string(comm))))
		}
	}
	return m, nil
}

// limitsOf describes the cgroup limits and user namespace of process pid,
// read back from the kernel: a check that every contender really runs with
// the limits it was asked for.
func limitsOf(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "?"
	}
	read := func(parts ...string) string {
		b, err := os.ReadFile(filepath.Join(parts...))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	var mem, cpu, pids string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		ctrls, path := strings.Split(f[1], ","), f[2]
		for _, c := range ctrls {
			switch c {
			case "memory":
				mem = read("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes")
			case "cpu":
				q, p := read("/sys/fs/cgroup/cpu", path, "cpu.cfs_quota_us"), read("/sys/fs/cgroup/cpu", path, "cpu.cfs_period_us")
				cpu = q + "/" + p
			case "pids":
				pids = read("/sys/fs/cgroup/pids", path, "pids.max")
			case "":
				if f[0] == "0" && mem == "" { // pure cgroup v2
					base := filepath.Join("/sys/fs/cgroup", path)
					mem, pids = read(base, "memory.max"), read(base, "pids.max")
					cpu = strings.ReplaceAll(read(base, "cpu.max"), " ", "/")
				}
			}
		}
	}
	if n, err := strconv.ParseInt(mem, 10, 64); err == nil {
		if n >= 1<<62 {
			mem = "none"
		} else {
			mem = fmt.Sprintf("%dM", n>>20)
		}
	}
	if strings.HasPrefix(cpu, "-1/") || strings.HasPrefix(cpu, "max/") {
		cpu = "none"
	} else if q, p, ok := strings.Cut(cpu, "/"); ok {
		qn, err1 := strconv.ParseFloat(q, 64)
		pn, err2 := strconv.ParseFloat(p, 64)
		if err1 == nil && err2 == nil && pn > 0 {
			cpu = strconv.FormatFloat(qn/pn, 'g', 3, 64)
		}
	}
	userns := "host userns"
	if m := strings.Fields(read(fmt.Sprintf("/proc/%d/uid_map", pid))); len(m) >= 3 && !(m[0] == "0" && m[1] == "0" && m[2] == "4294967295") {
		userns = "userns 0→" + m[1]
	}
	return fmt.Sprintf("mem %s, cpus %s, pids %s, %s", orNone(mem), orNone(cpu), orNone(pids), userns)
}

func orNone(s string) string {
	if s == "" || s == "max" {
		return "none"
	}
	return s
}
