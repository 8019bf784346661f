package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/runtime/runtimetest"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// The test binary is also each sandbox's shim and PID 1.
func TestMain(m *testing.M) {
	if IsShim() {
		Main()
	}
	if IsGuestInit() {
		GuestInit()
	}
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	requireRunsc(t)
	runtimetest.Run(t, func(t *testing.T) runtime.Runtime { return testRuntime(t) }, "base")
}

// requireRunsc gates a test on root and the base template, and fails one
// on a host without runsc (scripts/setup.sh builds it).
func requireRunsc(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "runsc, cgroups and mounts")
	if _, err := template.Open(testenv.TemplatesDir()).Get("base"); err != nil {
		t.Fatalf("base template: %v (run ./scripts/setup.sh)", err)
	}
	if _, err := findRunsc(""); err != nil {
		t.Fatal(err)
	}
}

// testRuntime returns a runtime of its own for the test, with the host's
// templates.
func testRuntime(t *testing.T) *Runtime {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir is 0700; sandboxes' uids must traverse to their layers.
	os.Chmod(dir, 0o711)
	os.Chmod(filepath.Dir(dir), 0o711)
	tpls := template.Open(testenv.TemplatesDir())
	nrt, err := native.New(native.Options{DataDir: dir, Templates: tpls})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(Options{DataDir: dir, Templates: tpls, Native: nrt})
	if err != nil {
		t.Fatal(err)
	}
	// runsc mounts a namespace file of its own in its state dir.
	t.Cleanup(func() { unmountAll(rt.runscRoot()) })
	return rt
}
