package faults

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// reboot does to the server's sandboxes what a host reboot does, the
// server already killed: every process of theirs is killed (inits, envd,
// gvisor's shims and runsc), their cgroups and every mount under the data
// dir are gone; files on disk stay. (The host-wide uid registry in /run
// is left: other servers of this host use it.)
func reboot(t *testing.T, s *hutchtest.Server, ids []string) {
	t.Helper()
	var pids []int
	for _, st := range s.RuntimeSandboxes() {
		if st.Pid > 0 {
			pids = append(pids, st.Pid)
			pids = append(pids, descendants(st.Pid)...)
		}
	}
	// runsc's own processes name the data dir (--root) rather than
	// descend from the shim.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s.DataDir) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
	}
	var cgroups []string
	for _, id := range ids {
		for _, pattern := range []string{"/sys/fs/cgroup/*/hutch/" + id, "/sys/fs/cgroup/*/hutch-gvisor/*/" + id, "/sys/fs/cgroup/hutch-gvisor/*/" + id} {
			m, _ := filepath.Glob(pattern)
			cgroups = append(cgroups, m...)
		}
	}
	for _, cg := range cgroups {
		filepath.Walk(cg, func(path string, info os.FileInfo, err error) error {
			if err == nil && info.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(path)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						pids = append(pids, pid)
					}
				}
			}
			return nil
		})
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err != nil || strings.Contains(string(b), ") Z ") {
				break // a zombie: dead, its parent gone too or not reaping
			}
		}
	}
	// Cgroups, deepest first.
	var dirs []string
	for _, cg := range cgroups {
		filepath.Walk(cg, func(path string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	for _, d := range dirs {
		if err := os.Remove(d); err != nil {
			t.Logf("reboot: rmdir %s: %v", d, err)
		}
	}
	// Mounts, deepest first.
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var mounts []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], s.DataDir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	for _, m := range mounts {
		syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

// TestReboot: after a simulated host reboot (every Hutch process killed,
// cgroups and mounts gone, files kept), the restarted server reports each
// sandbox gone or paused, never running: sandboxes that ran, and those
// frozen in place (native's pause with memory), are gone; those paused as
// their files (both backends) and gvisor's paused to a checkpoint on disk
// are paused, and resume with their files. Nothing is left of the gone.
func TestReboot(t *testing.T) {
	ctx := context.Background()
	hutchtest.RequireRunsc(t)
	e := newEnv(t, "native")
	e.start("")
	backends := []string{"native", "gvisor"}
	type made struct {
		id, backend, pause string
	}
	var all []made
	for _, backend := range backends {
		for _, pause := range []string{"", opPause, opPauseFiles} {
			sb, err := e.client.Create(ctx, sdk.CreateOptions{Timeout: 10 * time.Minute, Runtime: backend})
			if err != nil {
				t.Fatalf("create on %s: %v", backend, err)
			}
			if _, err := sb.Files.Write(ctx, "/home/user/kept", []byte("kept"), nil); err != nil {
				t.Fatal(err)
			}
			if pause != "" {
				if _, err := sb.Pause(ctx, sdk.PauseOptions{Filesystem: pause == opPauseFiles}); err != nil {
					t.Fatalf("%s on %s: %v", pause, backend, err)
				}
			}
			all = append(all, made{sb.ID, backend, pause})
		}
	}
	e.srv.Stop(syscall.SIGKILL)
	var ids []string
	for _, m := range all {
		ids = append(ids, m.id)
	}
	known := append(onDisk(e.srv.DataDir), ids...)
	reboot(t, e.srv, ids)

	e.start("")
	listed := e.list(t)
	var kept []string
	for _, m := range all {
		// What survives a reboot: a pause to files on disk.
		survives := m.pause == opPauseFiles || (m.pause == opPause && m.backend == "gvisor")
		sb, ok := listed[m.id]
		switch {
		case survives && (!ok || sb.State != "paused"):
			t.Errorf("sandbox on %s paused (%s) before the reboot: listed %v, %q; want paused", m.backend, m.pause, ok, sb.State)
		case !survives && ok:
			t.Errorf("sandbox on %s (%q) before the reboot: listed %q; want gone", m.backend, m.pause, sb.State)
		case survives:
			kept = append(kept, m.id)
		}
	}
	e.consistent(t, kept, slices.Compact(known))
}
