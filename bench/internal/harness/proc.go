package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
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

// ParentPid reads field 4 of /proc/pid/stat; the command name before it
// may contain spaces and parentheses, so parse after the last ')'.
func ParentPid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
