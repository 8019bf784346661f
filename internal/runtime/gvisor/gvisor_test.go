package gvisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestRunscDied: a sandbox whose runsc is killed (its Sentry, say, by
// the OOM killer) is reported exited at once, and Wait returns; Delete
// cleans up after it.
func TestRunscDied(t *testing.T) {
	requireRunsc(t)
	rt := testRuntime(t)
	ctx := t.Context()
	sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Process: runtime.Process{Args: []string{"sleep", "1000"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Delete(context.Background())
	b, err := os.ReadFile(filepath.Join(rt.sandboxDir(sbx.ID()), "init.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("init.pid holds %q once Create returned", b)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill runsc's sandbox process %d: %v", pid, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := sbx.Wait(wctx)
	if err != nil {
		t.Fatalf("Wait after runsc died: %v", err)
	}
	if s, _ := sbx.Status(ctx); s.State != runtime.StateExited {
		t.Errorf("state %q after runsc died, want exited (exit %+v)", s.State, st)
	}
	if err := sbx.Delete(ctx); err != nil {
		t.Errorf("Delete: %v", err)
	}
}

// TestSweep: what a killed shim and runsc leave (runsc's state, cgroup
// directories) is removed by the next runtime opened on the data dir.
func TestSweep(t *testing.T) {
	requireRunsc(t)
	rt := testRuntime(t)
	ctx := t.Context()
	sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Resources: runtime.Resources{MemoryBytes: 64 << 20}, Process: runtime.Process{Args: []string{"sleep", "1000"}}})
	if err != nil {
		t.Fatal(err)
	}
	id, dir := sbx.ID(), rt.sandboxDir(sbx.ID())
	rec, err := rt.readRecord(id)
	if err != nil {
		t.Fatal(err)
	}
	cg := filepath.Join("/sys/fs/cgroup/memory", rt.cgroupsPath(id))
	if _, err := os.Stat("/sys/fs/cgroup/unified"); err != nil {
		cg = filepath.Join("/sys/fs/cgroup", rt.cgroupsPath(id)) // pure v2
	}
	if _, err := os.Stat(cg); err != nil {
		t.Fatalf("runsc made no cgroup at %s: %v", cg, err)
	}
	// A host that lost the sandbox midway: every process killed at once,
	// runsc's own first (it would clean up after its sandbox), and the
	// sandbox's own directory gone (what a crashed Create leaves).
	exec.Command("pkill", "-STOP", "-f", "runsc.* "+id+"$").Run()
	exec.Command("pkill", "-KILL", "-f", "runsc.*"+id).Run()
	syscall.Kill(rec.ShimPid, syscall.SIGKILL)
	time.Sleep(300 * time.Millisecond)
	unmountAll(dir)
	os.RemoveAll(dir)
	if _, err := os.Stat(cg); err != nil {
		t.Logf("runsc removed the cgroup itself: %v", err)
	}
	if _, err := New(Options{DataDir: rt.dataDir, Templates: rt.templates, Native: rt.native}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cgroup %s of a sandbox gone is left: %v", cg, err)
	}
	ents, _ := os.ReadDir(rt.runscRoot())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), id) {
			t.Errorf("runsc's state of a sandbox gone is left: %s", e.Name())
		}
	}
}
