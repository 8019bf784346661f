package hutchtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// CgroupV2 reports whether the host runs cgroup v2 only (no v1
// controllers).
func CgroupV2() bool {
	_, err := os.Stat("/sys/fs/cgroup/cgroup.controllers")
	return err == nil
}

// CgroupFile returns the host path of one interface file of the cgroup
// that host process pid is in: /sys/fs/cgroup/<controller>/<path>/<v1> on
// v1 and hybrid hosts, /sys/fs/cgroup/<path>/<v2> on pure cgroup v2 hosts.
// The path comes from /proc/<pid>/cgroup, so the test also checks that it
// is the documented /hutch/<id> of sandbox id.
func CgroupFile(t testing.TB, pid int, id, controller, v1, v2 string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := "/hutch/" + id
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		if CgroupV2() {
			if parts[0] != "0" || ctrls != "" {
				continue
			}
			if path != want {
				t.Errorf("sandbox cgroup (v2) = %q, want %q", path, want)
			}
			return filepath.Join("/sys/fs/cgroup", path, v2)
		}
		for _, c := range strings.Split(ctrls, ",") {
			if c == controller {
				if path != want {
					t.Errorf("sandbox %s cgroup = %q, want %q", controller, path, want)
				}
				return filepath.Join("/sys/fs/cgroup", controller, path, v1)
			}
		}
	}
	t.Fatalf("process %d is in no %s cgroup:\n%s", pid, controller, b)
	return ""
}
