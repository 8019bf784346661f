package native

import (
	"errors"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native/seccomp"
	"github.com/hutch-sandbox/hutch/internal/runtime/runtimetest"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// The test binary is also the sandboxes' init: it is what /proc/self/exe is.
func TestMain(m *testing.M) {
	if IsInit() {
		Init()
	}
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	requireBase(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime { return testRuntime(t) }, "base")
}

// requireBase gates a test on root (testenv.RequireRoot), and fails one
// on a host without the base template.
func requireBase(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "namespaces, cgroups and mounts")
	if _, err := template.Open(testenv.TemplatesDir()).Get("base"); err != nil {
		t.Fatalf("base template: %v (run ./scripts/setup.sh)", err)
	}
}

// testRuntime returns a runtime of its own for the test, with the host's
// templates.
func testRuntime(t *testing.T) *Runtime {
	t.Helper()
	rt, err := New(Options{DataDir: t.TempDir(), Templates: template.Open(testenv.TemplatesDir())})
	if err != nil {
		t.Fatal(err)
	}
	// t.TempDir is 0700; sandboxes' uids must traverse to their layers.
	os.Chmod(filepath.Dir(rt.DataDir()), 0o711)
	return rt
}

func TestValidateSpec(t *testing.T) {
	ok := runtime.Process{Args: []string{"true"}}
	tests := []struct {
		name string
		spec runtime.Spec
		ok   bool
	}{
		{"minimal", runtime.Spec{Process: ok}, true},
		{"limits", runtime.Spec{Process: ok, Resources: runtime.Resources{MemoryBytes: 64 << 20, CPUs: 0.5, Pids: 64}}, true},
		{"id", runtime.Spec{ID: "my-sandbox-1", Process: ok}, true},
		{"uppercase id", runtime.Spec{ID: "ABC", Process: ok}, false},
		{"path id", runtime.Spec{ID: "a/../b", Process: ok}, false},
		{"empty args", runtime.Spec{}, false},
		{"empty command", runtime.Spec{Process: runtime.Process{Args: []string{""}}}, false},
		{"memory 1MiB", runtime.Spec{Process: ok, Resources: runtime.Resources{MemoryBytes: 1 << 20}}, false},
		{"cpus 0.001", runtime.Spec{Process: ok, Resources: runtime.Resources{CPUs: 0.001}}, false},
		{"pids 3", runtime.Spec{Process: ok, Resources: runtime.Resources{Pids: 3}}, false},
		{"env without =", runtime.Spec{Process: runtime.Process{Args: []string{"x"}, Env: []string{"FOO"}}}, false},
		{"relative cwd", runtime.Spec{Process: runtime.Process{Args: []string{"x"}, Cwd: "home"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateSpec(&tc.spec)
			if tc.ok && err != nil {
				t.Errorf("validateSpec: %v, want ok", err)
			}
			if !tc.ok && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("validateSpec = %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestLookupUser(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\nbig:x:70000:70000::/:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nsudo:x:27:user\nuser:x:1000:\n"), 0o644)
	tests := []struct {
		spec string
		want *execUser
	}{
		{"root", &execUser{Name: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash"}},
		{"user", &execUser{Name: "user", UID: 1000, GID: 1000, Groups: []uint32{27}, Home: "/home/user", Shell: "/bin/bash"}},
		{"1000", &execUser{Name: "user", UID: 1000, GID: 1000, Groups: []uint32{27}, Home: "/home/user", Shell: "/bin/bash"}},
		{"1000:27", &execUser{Name: "user", UID: 1000, GID: 27, Home: "/home/user", Shell: "/bin/bash"}},
		{"4242", &execUser{Name: "4242", UID: 4242, GID: 4242, Home: "/", Shell: "/bin/sh"}},
		{"nobody-here", nil},
		{"big", nil},   // outside the sandbox's id range
		{"0:abc", nil}, // non-numeric group
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := lookupUser(root, tc.spec)
			if tc.want == nil {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("lookupUser(%q) = %+v, %v; want ErrInvalidArgument", tc.spec, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("lookupUser(%q) (-want +got):\n%s", tc.spec, diff)
			}
		})
	}
}

func TestMergeEnv(t *testing.T) {
	got := mergeEnv([]string{"PATH=/bin", "HOME=/root"}, []string{"HOME=/home/x", "NEW=1", "EMPTY="})
	want := []string{"PATH=/bin", "HOME=/home/x", "NEW=1", "EMPTY="}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mergeEnv (-want +got):\n%s", diff)
	}
	if v := envValue(got, "HOME"); v != "/home/x" {
		t.Errorf("envValue(HOME) = %q", v)
	}
}

// TestGeneratedSeccompFilter keeps seccomp_amd64.go equal to what the
// policy assembles to (regenerate with go generate ./internal/runtime/native).
func TestGeneratedSeccompFilter(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("the pre-assembled filter is for amd64")
	}
	want, err := seccomp.Program()
	if err != nil {
		t.Fatal(err)
	}
	got, err := sandboxProgram()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("seccomp_amd64.go is stale; run go generate ./internal/runtime/native (-want +got):\n%s", diff)
	}
	if len(got) < len(seccomp.DeniedSyscalls) {
		t.Errorf("program has %d instructions for %d denied calls", len(got), len(seccomp.DeniedSyscalls))
	}
}

func TestProcessStartTime(t *testing.T) {
	a, err := processStartTime(os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("processStartTime(self) = %d, %v", a, err)
	}
	if _, err := processStartTime(1 << 30); err == nil {
		t.Error("processStartTime of a missing pid succeeded")
	}
}
