package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Rollup is one process's memory from /proc/<pid>/smaps_rollup, in KiB.
type Rollup struct {
	Pss, Rss int64
	// Dirty is Private_Dirty: pages no other process shares (heap,
	// stacks, written data).
	Dirty int64
	// Anon is Anonymous: heap, stacks and other memory backed by no file,
	// what a process's own allocations cost.
	Anon int64
}

// ReadRollup reads Pss, Rss, Private_Dirty and Anonymous of process pid.
// PSS charges each shared page to the processes mapping it in equal
// parts, so the sum over any set of processes never counts a page twice.
func ReadRollup(pid int) (Rollup, error) {
	var m Rollup
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return m, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Pss:":
			m.Pss = v
		case "Rss:":
			m.Rss = v
		case "Private_Dirty:":
			m.Dirty = v
		case "Anonymous:":
			m.Anon = v
		}
	}
	return m, sc.Err()
}

// ProcTable is a snapshot of every process's children, to walk trees
// without reading all of /proc once per tree.
type ProcTable map[int][]int

// NewProcTable reads the parent links of every process in /proc.
func NewProcTable() ProcTable {
	children := ProcTable{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := ParentPid(pid); ok {
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children
}

// Tree returns roots followed by all their descendants.
func (t ProcTable) Tree(roots ...int) []int {
	var out []int
	seen := map[int]bool{}
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
		queue = append(queue, t[p]...)
	}
	return out
}

// ParentPid reads field 4 of /proc/pid/stat.
func ParentPid(pid int) (int, bool) {
	f := statFields(pid)
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux everywhere).
const clockTick = 100

// ProcCPU is the CPU time (user + system, all threads, and the children
// it has reaped) that process pid has used so far; false when it is gone.
func ProcCPU(pid int) (time.Duration, bool) {
	f := statFields(pid)
	// After the command: state(0) ppid(1) … utime(11) stime(12)
	// cutime(13) cstime(14).
	if len(f) < 15 {
		return 0, false
	}
	var ticks int64
	for _, k := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseInt(f[k], 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTick, true
}

// TreeCPU is ProcCPU summed over roots and all their descendants.
func TreeCPU(roots ...int) time.Duration {
	var sum time.Duration
	for _, pid := range NewProcTable().Tree(roots...) {
		d, _ := ProcCPU(pid)
		sum += d
	}
	return sum
}

// SelfCPU is this process's CPU time (user + system) so far.
func SelfCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// statFields are the fields of /proc/pid/stat after the command name
// (which may contain spaces and parentheses, so they are split after the
// last ')'): the state first; nil when the process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}
