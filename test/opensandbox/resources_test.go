package opensandbox

import (
	"os"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// testResources creates a sandbox through OpenSandbox's API with
// resourceLimits of its own and checks, on the host, that they are the
// limits of the sandbox's cgroup: half a CPU (a quota of half the
// period) and 256 MiB.
func (s *suite) testResources(t *testing.T) {
	sb := s.osbCreate(t, map[string]any{"image": map[string]any{"uri": template},
		"resourceLimits": map[string]string{"cpu": "500m", "memory": "256Mi"}})
	pid := 0
	for _, r := range s.srv.RuntimeSandboxes() {
		if r.ID == sb.id {
			pid = r.Pid
		}
	}
	if pid <= 0 {
		t.Fatalf("sandbox %s is not among the runtime's (hutch ps --json)", sb.id)
	}
	want := map[string]string{}
	if hutchtest.CgroupV2() {
		want[hutchtest.CgroupFile(t, pid, sb.id, "memory", "", "memory.max")] = "268435456"
		want[hutchtest.CgroupFile(t, pid, sb.id, "cpu", "", "cpu.max")] = "50000 100000"
	} else {
		want[hutchtest.CgroupFile(t, pid, sb.id, "memory", "memory.limit_in_bytes", "")] = "268435456"
		want[hutchtest.CgroupFile(t, pid, sb.id, "cpu", "cpu.cfs_quota_us", "")] = "50000"
		want[hutchtest.CgroupFile(t, pid, sb.id, "cpu", "cpu.cfs_period_us", "")] = "100000"
	}
	for f, w := range want {
		b, err := os.ReadFile(f)
		if got := strings.TrimSpace(string(b)); err != nil || got != w {
			t.Errorf("%s = %q (%v), want %q", f, got, err, w)
		}
	}
	if st := s.osbDelete(t, sb.id, hutchtest.TestKey); st != 204 {
		t.Errorf("DELETE %s: %d, want 204", sb.id, st)
	}
}
