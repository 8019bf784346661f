package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is a cgroup v2 directory the harness starts a row's server-side
// processes in (clone3 with CLONE_INTO_CGROUP: no process escapes it, not
// even one forked before it could be moved). Its cpu.stat counts the CPU
// time of every process that ever ran in it, also of those that exited or
// were orphaned (supergateway's children outlive the shell it starts them
// with, and are reparented to PID 1, out of any process tree), and
// cgroup.procs lists what is left after a stop. cgroup v2's cpu.stat
// needs no controller: on this hybrid host the "unified" tree has only
// hugetlb and still counts CPU time.
type cgroup struct {
	dir     string
	fd      int
	removed bool
}

// cgroupRoot is the harness's own cgroup v2 directory, made on first use;
// "" when there is no cgroup v2 tree to use.
var cgroupRoot string

func cgroup2Mount() string {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p
		}
	}
	return ""
}

// newCgroup makes a cgroup for a row; an error means the row falls back on
// /proc process trees.
func newCgroup(name string) (*cgroup, error) {
	if cgroupRoot == "" {
		mnt := cgroup2Mount()
		if mnt == "" {
			return nil, fmt.Errorf("no cgroup v2 tree")
		}
		root := filepath.Join(mnt, fmt.Sprintf("hutch-bench-mcpgateway-%d", os.Getpid()))
		if err := os.Mkdir(root, 0o755); err != nil && !os.IsExist(err) {
			return nil, err
		}
		cgroupRoot = root
	}
	dir := filepath.Join(cgroupRoot, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &cgroup{dir: dir, fd: fd}, nil
}

// usage is the CPU time of everything that ran in the cgroup.
func (c *cgroup) usage() (time.Duration, bool) {
	f, err := os.Open(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
			us, err := strconv.ParseInt(v, 10, 64)
			return time.Duration(us) * time.Microsecond, err == nil
		}
	}
	return 0, false
}

// procs lists the processes still in the cgroup.
func (c *cgroup) procs() []int {
	data, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if p, err := strconv.Atoi(f); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// kill kills whatever is left in the cgroup, waits for it to be gone
// (up to 5 s) and removes the cgroup; it returns the pids it killed.
func (c *cgroup) kill() []int {
	if c.removed {
		return nil
	}
	c.removed = true
	left := c.procs()
	if len(left) > 0 {
		if err := os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0); err != nil {
			for _, p := range left {
				unix.Kill(p, unix.SIGKILL)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	unix.Close(c.fd)
	for os.Remove(c.dir) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	return left
}

// removeCgroupRoot removes the harness's cgroup directory once every row's
// is gone.
func removeCgroupRoot() {
	if cgroupRoot != "" {
		os.Remove(cgroupRoot)
	}
}
