package native

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCriuCheck runs criuCheck against stand-ins for criu that behave as
// the real one does: missing, broken, failing its check (Debian 12's 3.17
// on a 6.x kernel), passing it.
func TestCriuCheck(t *testing.T) {
	tests := []struct {
		name   string
		script string // the stand-in's body; empty for none
		want   []string
	}{
		{"missing", "", []string{"is not installed"}},
		{"broken", "echo 'no such option' >&2; exit 3", []string{"--version failed", "exit status 3: no such option"}},
		{"fails check", `case $1 in
--version) echo Version: 3.17 ;;
check) echo 'Warn  (criu/kerndat.c:1103): CRIU was built without libnftables support'
       echo 'Error (criu/cr-check.c:1223): Kernel doesn'"'"'t support PTRACE_O_SUSPEND_SECCOMP' >&2
       echo 'Looks bad.'; exit 1 ;;
esac`, []string{"criu 3.17 fails its own check", ": Kernel doesn't support PTRACE_O_SUSPEND_SECCOMP"}},
		{"passes check", `case $1 in
--version) printf 'Version: 4.1\nGitID: v4.1\n' ;;
check) echo Looks good. ;;
esac`, []string{"criu 4.1 passes criu check"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "criu")
			if tc.script != "" {
				if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			got := criuCheck(context.Background(), bin)
			t.Logf("criuCheck: %s", got)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("criuCheck = %q, want it to say %q", got, w)
				}
			}
		})
	}
}

// TestCapabilities checks what the native backend claims beyond the
// conformance suite: its processes outlive hutch serve, and it never
// claims checkpoints, whatever criu says.
func TestCapabilities(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "criu")
	os.WriteFile(bin, []byte("#!/bin/sh\ncase $1 in --version) echo Version: 4.1;; esac\n"), 0o755)
	rt := &Runtime{criu: bin}
	caps := rt.Capabilities(context.Background())
	if !caps.KeepsMemoryAcrossRestart {
		t.Error("KeepsMemoryAcrossRestart = false")
	}
	if caps.Checkpoint.Available || !strings.Contains(caps.Checkpoint.Reason, "passes criu check") {
		t.Errorf("Checkpoint = %+v, want unavailable, saying criu passes its check", caps.Checkpoint)
	}
}

func TestKernelVersion(t *testing.T) {
	tests := []struct {
		release      string
		major, minor int
		ok           bool
	}{
		{"6.18.44-fc-v669", 6, 18, true},
		{"5.2.0", 5, 2, true},
		{"5.2rc1", 5, 2, true},
		{"4.18.0-553.el8_10.x86_64", 4, 18, true},
		{"6", 0, 0, false},
		{"", 0, 0, false},
		{"x.y", 0, 0, false},
	}
	for _, tc := range tests {
		major, minor, ok := kernelVersion(tc.release)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("kernelVersion(%q) = %d, %d, %v; want %d, %d, %v", tc.release, major, minor, ok, tc.major, tc.minor, tc.ok)
		}
	}
}
