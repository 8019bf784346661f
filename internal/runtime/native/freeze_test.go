package native

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// countingWriter counts the bytes written to it, safe for a sandbox to
// write while the test reads.
type countingWriter struct {
	mu sync.Mutex
	n  int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += len(p)
	return len(p), nil
}

func (w *countingWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// TestFreezers drives each kind of freezer a sandbox's cgroups have on this
// host directly, as the only one there: the conformance suite sees only the
// preferred one, and a hybrid host has both. A host of one kind skips the
// other.
func TestFreezers(t *testing.T) {
	requireBase(t)
	rt := testRuntime(t)
	tests := []struct {
		name string
		v2   bool
		keep func(hierarchy string) bool // which of the sandbox's cgroups the freezer sees
	}{
		{"cgroup v2", true, func(h string) bool { return h == "" }},
		{"cgroup v1", false, func(h string) bool { return h != "" }}, // as on a host without cgroup2: no cgroup.kill
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out countingWriter
			sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Process: runtime.Process{
				Args: []string{"/bin/sh", "-c", "while :; do echo tick; sleep 0.02; done"}, Stdout: &out,
			}})
			if err != nil {
				t.Fatal(err)
			}
			defer sbx.Delete(context.Background())
			rec, err := rt.readRecord(sbx.ID())
			if err != nil {
				t.Fatal(err)
			}
			paths := map[string]string{}
			for h, p := range rec.CgroupPaths {
				if tc.keep(h) {
					paths[h] = p
				}
			}
			fz := freezersOf(paths)
			if len(fz) != 1 || fz[0].v2 != tc.v2 {
				t.Skipf("no %s freezer here (%d freezers)", tc.name, len(fz))
			}
			// Output already in the pipe still reaches out after a
			// freeze: the host copies it. Let that settle first.
			stopped := func() bool {
				time.Sleep(50 * time.Millisecond)
				before := out.count()
				time.Sleep(200 * time.Millisecond)
				return out.count() == before
			}

			if err := fz[0].m.Freeze(cgroups.Frozen); err != nil {
				t.Fatalf("freeze: %v", err)
			}
			if st, err := sbx.Status(ctx); err != nil || st.State != runtime.StateFrozen {
				t.Errorf("Status = %+v, %v; want frozen", st, err)
			}
			if !stopped() {
				t.Error("the sandbox's output went on while frozen")
			}
			if err := sbx.Signal(ctx, syscall.SIGTERM); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("Signal while frozen = %v, want ErrFailedPrecondition", err)
			}
			if err := sbx.Thaw(ctx); err != nil {
				t.Fatalf("Thaw: %v", err)
			}
			if st, err := sbx.Status(ctx); err != nil || st.State != runtime.StateRunning {
				t.Errorf("after Thaw: Status = %+v, %v; want running", st, err)
			}
			if stopped() {
				t.Error("the sandbox's output did not go on after Thaw")
			}

			// What Delete does to a frozen sandbox, with this freezer only.
			if err := fz[0].m.Freeze(cgroups.Frozen); err != nil {
				t.Fatalf("freeze: %v", err)
			}
			if err := killFrozen(paths); err != nil {
				t.Fatalf("killFrozen: %v", err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			defer wcancel()
			if _, err := sbx.Wait(wctx); err != nil {
				t.Fatalf("Wait after killFrozen: %v", err)
			}
			if frozen, err := isFrozen(rec.CgroupPaths); err != nil || frozen {
				t.Errorf("after killFrozen: frozen %v, %v; want thawed", frozen, err)
			}
		})
	}
}
