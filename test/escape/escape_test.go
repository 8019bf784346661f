package escape

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// attempt is one way out, tried on every backend: run makes its
// sandboxes, tries, and checks the evidence.
type attempt struct {
	name  string
	class string // the row of docs/security.md's table it belongs to
	run   func(t *testing.T, s *suite, backend string)
}

// attempts are the escape attempts, by class.
var attempts = slices.Concat(fileAttempts, processAttempts, kernelAttempts, syscallAttempts, networkAttempts, leftoverAttempts, resourceAttempts)

// minAttempts is the least the suite keeps (issue 23): removing attempts
// is a change to the threat model's evidence, not a cleanup.
const minAttempts = 60

// TestEscape runs every attempt on every backend. Attempts of a backend
// run four at a time: each makes sandboxes of its own.
func TestEscape(t *testing.T) {
	if len(attempts) < minAttempts {
		t.Errorf("the suite has %d attempts, fewer than %d", len(attempts), minAttempts)
	}
	seen := map[string]bool{}
	for _, a := range attempts {
		if seen[a.name] {
			t.Errorf("two attempts are named %s", a.name)
		}
		seen[a.name] = true
	}
	s := startSuite(t)
	before := s.hostState(t)
	for _, b := range backends {
		t.Run(b, func(t *testing.T) {
			if b == "gvisor" {
				hutchtest.RequireRunsc(t)
			}
			sem := make(chan struct{}, 4)
			for _, a := range attempts {
				t.Run(a.name, func(t *testing.T) {
					t.Parallel()
					sem <- struct{}{}
					defer func() { <-sem }()
					a.run(t, s, b)
				})
			}
		})
	}
	// Whatever each attempt checked, the host as a whole is as it was.
	after := s.hostState(t)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("the host's %s changed during the attempts: %q, was %q", k, after[k], v)
		}
	}
	s.hostAlive(t)
}

// hostState is what no attempt may change on the host: kernel settings a
// sandbox would write to get code run as root, the binaries, the host's
// identity.
func (s *suite) hostState(t *testing.T) map[string]string {
	t.Helper()
	st := map[string]string{}
	for _, p := range []string{
		"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hostname",
		"/proc/sys/kernel/domainname", "/proc/sys/kernel/sysrq", "/proc/sys/vm/overcommit_memory",
		"/sys/kernel/uevent_helper", "/proc/sys/kernel/random/boot_id", "/proc/sys/net/ipv4/ip_forward",
	} {
		if b, err := os.ReadFile(p); err == nil {
			st[p] = strings.TrimSpace(string(b))
		}
	}
	agents, _ := filepath.Glob("/sys/fs/cgroup/*/release_agent")
	for _, p := range agents {
		if b, err := os.ReadFile(p); err == nil {
			st[p] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range []string{s.srv.Bin, filepath.Join(filepath.Dir(s.srv.Bin), "hutch-sandbox"), "/etc/passwd", "/etc/shadow", s.secretPath} {
		if _, err := os.Stat(p); err == nil {
			st[p] = sha(t, p)
		}
	}
	if b, err := os.ReadFile("/proc/modules"); err == nil {
		var mods []string
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				mods = append(mods, f[0])
			}
		}
		slices.Sort(mods)
		st["/proc/modules"] = strings.Join(mods, " ")
	}
	return st
}
