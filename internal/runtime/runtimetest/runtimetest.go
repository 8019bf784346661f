// Package runtimetest is the conformance suite every runtime backend must
// pass: the behaviour of runtime.Runtime and runtime.Sandbox that callers
// rely on, checked against a real backend (containerd's SnapshotterSuite
// is the model).
package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/syncbuf"
)

// Run runs the suite. newRuntime returns a fresh runtime whose sandboxes can
// be made from template (which must have /bin/sh, a "user" account and the
// usual coreutils).
func Run(t *testing.T, newRuntime func(t *testing.T) runtime.Runtime, template string) {
	tests := []struct {
		name string
		fn   func(t *testing.T, rt runtime.Runtime, tpl string)
	}{
		{"ExitStatus", testExitStatus},
		{"Streams", testStreams},
		{"Signal", testSignal},
		{"LoadListDelete", testLoadListDelete},
		{"InvalidSpec", testInvalidSpec},
		{"UnknownTemplate", testUnknownTemplate},
		{"Concurrent", testConcurrent},
		{"DiskLimit", testDiskLimit},
		{"OnlyStdioDescriptors", testOnlyStdio},
		{"ReapsOrphans", testReapsOrphans},
		{"CanceledCreate", testCanceledCreate},
		{"Stats", testStats},
		{"Capabilities", testCapabilities},
		{"FreezeThaw", testFreezeThaw},
		{"FreezeExited", testFreezeExited},
		{"DeleteFrozen", testDeleteFrozen},
		{"CaptureLayer", testCaptureLayer},
		{"Checkpoint", testCheckpoint},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newRuntime(t), template) })
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a sandbox and deletes it when the test ends.
func create(t *testing.T, rt runtime.Runtime, spec runtime.Spec) runtime.Sandbox {
	t.Helper()
	sbx, err := rt.Create(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("Create(%v): %v", spec.Process.Args, err)
	}
	t.Cleanup(func() {
		if err := sbx.Delete(context.Background()); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Delete: %v", err)
		}
	})
	return sbx
}

func testExitStatus(t *testing.T, rt runtime.Runtime, tpl string) {
	tests := []struct {
		script string
		want   runtime.ExitStatus
	}{
		{"exit 0", runtime.ExitStatus{Code: 0}},
		{"exit 42", runtime.ExitStatus{Code: 42}},
		{"kill -TERM $$", runtime.ExitStatus{Code: 128 + 15, Signal: syscall.SIGTERM}},
		{"kill -KILL $$", runtime.ExitStatus{Code: 128 + 9, Signal: syscall.SIGKILL}},
	}
	for _, tc := range tests {
		t.Run(tc.script, func(t *testing.T) {
			sbx := create(t, rt, runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"/bin/sh", "-c", tc.script}, Stdout: &bytes.Buffer{}}})
			got, err := sbx.Wait(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Wait = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func testStreams(t *testing.T, rt runtime.Runtime, tpl string) {
	var out, errb bytes.Buffer
	sbx := create(t, rt, runtime.Spec{Template: tpl, Process: runtime.Process{
		Args:  []string{"/bin/sh", "-c", `read line; echo "out:$line:$FOO:$(id -un):$(pwd)"; echo err >&2`},
		Env:   []string{"FOO=bar"},
		Stdin: strings.NewReader("hello\n"), Stdout: &out, Stderr: &errb,
	}})
	if _, err := sbx.Wait(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "out:hello:bar:user:/home/user\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got, want := errb.String(), "err\n"; got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
}

func testSignal(t *testing.T, rt runtime.Runtime, tpl string) {
	var out syncbuf.Buffer
	sbx := create(t, rt, runtime.Spec{Template: tpl, Process: runtime.Process{
		Args:   []string{"/bin/sh", "-c", `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`},
		Stdout: &out,
	}})
	ctx := ctxFor(t)
	for !strings.Contains(out.String(), "ready") {
		if ctx.Err() != nil {
			t.Fatal("process never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := sbx.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got, err := sbx.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Code != 7 || !strings.Contains(out.String(), "got-term") {
		t.Errorf("after SIGTERM: exit %+v, output %q; want exit 7 and got-term", got, out.String())
	}
}

func testLoadListDelete(t *testing.T, rt runtime.Runtime, tpl string) {
	ctx := ctxFor(t)
	sbx := create(t, rt, runtime.Spec{Template: tpl, Labels: map[string]string{"k": "v"}, Process: runtime.Process{Args: []string{"sleep", "1000"}}})
	again, err := rt.Load(ctx, sbx.ID())
	if err != nil {
		t.Fatalf("Load(%s): %v", sbx.ID(), err)
	}
	st, err := again.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateRunning || st.Pid == 0 || st.Labels["k"] != "v" || st.Template != tpl {
		t.Errorf("Status = %+v, want running with a pid, label k=v, template %s", st, tpl)
	}
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		found = found || s.ID == sbx.ID()
	}
	if !found {
		t.Errorf("List does not include %s", sbx.ID())
	}
	// Delete through the second handle; Wait on the first sees the end.
	if err := again.Delete(ctx); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := sbx.Wait(ctx); err != nil {
		t.Errorf("Wait after Delete: %v", err)
	}
	if _, err := rt.Load(ctx, sbx.ID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Load after Delete = %v, want ErrNotFound", err)
	}
	if err := again.Delete(ctx); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
}

func testInvalidSpec(t *testing.T, rt runtime.Runtime, tpl string) {
	proc := runtime.Process{Args: []string{"true"}}
	tests := []struct {
		name string
		spec runtime.Spec
		want error
	}{
		{"no command", runtime.Spec{Template: tpl}, errdefs.ErrInvalidArgument},
		{"tiny memory", runtime.Spec{Template: tpl, Process: proc, Resources: runtime.Resources{MemoryBytes: 1024}}, errdefs.ErrInvalidArgument},
		{"negative cpus", runtime.Spec{Template: tpl, Process: proc, Resources: runtime.Resources{CPUs: -1}}, errdefs.ErrInvalidArgument},
		{"too many cpus", runtime.Spec{Template: tpl, Process: proc, Resources: runtime.Resources{CPUs: 100000}}, errdefs.ErrInvalidArgument},
		{"one pid", runtime.Spec{Template: tpl, Process: proc, Resources: runtime.Resources{Pids: 1}}, errdefs.ErrInvalidArgument},
		{"tiny disk", runtime.Spec{Template: tpl, Process: proc, Resources: runtime.Resources{DiskBytes: 1 << 20}}, errdefs.ErrInvalidArgument},
		{"bad id", runtime.Spec{ID: "../../etc", Template: tpl, Process: proc}, errdefs.ErrInvalidArgument},
		{"bad env", runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"true"}, Env: []string{"=x"}}}, errdefs.ErrInvalidArgument},
		{"relative cwd", runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"true"}, Cwd: "tmp"}}, errdefs.ErrInvalidArgument},
		{"missing cwd", runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"true"}, Cwd: "/nonexistent"}}, errdefs.ErrInvalidArgument},
		{"unknown user", runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"true"}, User: "nobody-here"}}, errdefs.ErrInvalidArgument},
		{"missing command", runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"no-such-command"}}}, errdefs.ErrNotFound},
	}
	before, _ := rt.List(ctxFor(t))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sbx, err := rt.Create(ctxFor(t), tc.spec)
			if err == nil {
				sbx.Delete(context.Background())
				t.Fatalf("Create succeeded, want %v", tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Create error = %v, want %v", err, tc.want)
			}
		})
	}
	// A refused create leaves nothing behind.
	after, _ := rt.List(ctxFor(t))
	if len(after) != len(before) {
		t.Errorf("sandboxes before %d, after failed creates %d", len(before), len(after))
	}
}

func testUnknownTemplate(t *testing.T, rt runtime.Runtime, tpl string) {
	_, err := rt.Create(ctxFor(t), runtime.Spec{Template: "no-such-template", Process: runtime.Process{Args: []string{"true"}}})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Create with unknown template = %v, want ErrNotFound", err)
	}
}

func testConcurrent(t *testing.T, rt runtime.Runtime, tpl string) {
	const n = 8
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			ctx := context.Background()
			var out bytes.Buffer
			sbx, err := rt.Create(ctx, runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"cat", "/proc/self/uid_map"}, Stdout: &out}})
			if err != nil {
				errs <- err
				return
			}
			st, err := sbx.Wait(ctx)
			if err == nil && st.Code != 0 {
				err = errors.New("exit " + st.Error)
			}
			if derr := sbx.Delete(ctx); err == nil && derr != nil {
				err = fmt.Errorf("Delete: %w", derr)
			}
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Errorf("concurrent sandbox: %v", err)
		}
	}
}

func testDiskLimit(t *testing.T, rt runtime.Runtime, tpl string) {
	var out, errb bytes.Buffer
	// Write 128 MiB into a 64 MiB layer, then show that the sandbox still
	// works (deleting frees the space).
	sbx := create(t, rt, runtime.Spec{Template: tpl, Resources: runtime.Resources{DiskBytes: 64 << 20}, Process: runtime.Process{
		Args:   []string{"/bin/sh", "-c", `dd if=/dev/zero of=/tmp/big bs=1M count=128 2>&1; echo "size=$(($(stat -c %s /tmp/big) >> 20))"; rm /tmp/big; echo fine > /tmp/small && cat /tmp/small`},
		Stdout: &out, Stderr: &errb,
	}})
	st, err := sbx.Wait(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.Contains(got, "No space left on device") {
		t.Errorf("writing past the disk limit did not fail with ENOSPC:\n%s", got)
	}
	if strings.Contains(got, "size=128") || !strings.Contains(got, "fine") || st.Code != 0 {
		t.Errorf("exit %+v, output:\n%s\nwant a truncated file and a working sandbox afterwards", st, got)
	}
}

// testOnlyStdio checks that the first process inherits nothing but its three
// standard streams: no descriptor of the runtime's own leaks into a sandbox.
func testOnlyStdio(t *testing.T, rt runtime.Runtime, tpl string) {
	for _, terminal := range []bool{false, true} {
		var out bytes.Buffer
		// ls opens /proc/self/fd itself, as descriptor 3.
		sbx := create(t, rt, runtime.Spec{Template: tpl, Process: runtime.Process{
			Args: []string{"/bin/ls", "/proc/self/fd"}, Terminal: terminal, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out,
		}})
		st, err := sbx.Wait(ctxFor(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(out.String()); strings.Join(got, " ") != "0 1 2 3" {
			t.Errorf("terminal=%v: descriptors of the first process = %v, want [0 1 2 3] (3 is ls's own); exit %+v", terminal, got, st)
		}
	}
}

// testReapsOrphans checks that the sandbox's init reaps processes orphaned
// inside the sandbox, so none stays a zombie.
func testReapsOrphans(t *testing.T, rt runtime.Runtime, tpl string) {
	var out bytes.Buffer
	// Each ( ... & ) leaves a child whose parent exits at once: it is
	// re-parented to PID 1, which must collect it when it exits.
	script := `for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 1; ps -eo pid=,ppid=,stat=,comm= | awk '$3 ~ /Z/'; echo checked`
	sbx := create(t, rt, runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"/bin/sh", "-c", script}, Stdout: &out}})
	if _, err := sbx.Wait(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "checked\n" {
		t.Errorf("zombies left in the sandbox:\n%s", got)
	}
}

// testCanceledCreate checks that Create honours its context and that a
// create cut short leaves nothing behind.
func testCanceledCreate(t *testing.T, rt runtime.Runtime, tpl string) {
	before, _ := rt.List(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sbx, err := rt.Create(ctx, runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"true"}}})
	if err == nil {
		sbx.Delete(context.Background())
		t.Fatal("Create with a canceled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Create error = %v, want context.Canceled", err)
	}
	// Deadlines spread over a create's duration cut it at different steps:
	// each must end in a sandbox or in DeadlineExceeded, never in leftovers.
	for d := time.Duration(0); d < 40*time.Millisecond; d += 2 * time.Millisecond {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		sbx, err := rt.Create(ctx, runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"true"}}})
		cancel()
		switch {
		case err == nil:
			sbx.Wait(context.Background())
			if err := sbx.Delete(context.Background()); err != nil {
				t.Errorf("Delete: %v", err)
			}
		case !errors.Is(err, context.DeadlineExceeded):
			t.Errorf("Create with a %v deadline = %v, want DeadlineExceeded", d, err)
		}
	}
	after, _ := rt.List(context.Background())
	if len(after) != len(before) {
		t.Errorf("sandboxes before %d, after canceled creates %d", len(before), len(after))
	}
}

// testStats checks that a sandbox's reported use follows what it does:
// CPU burnt, memory touched, files written — with and without a disk limit.
// The busy loop counts its own CPU time, not the wall's: on a loaded host
// 0.3 s of wall time is less CPU than the check wants.
func testStats(t *testing.T, rt runtime.Runtime, tpl string) {
	const script = `dd if=/dev/urandom of=/tmp/blob bs=1M count=20 status=none
exec python3 -c '
import time
b = bytearray(48 << 20)
for i in range(0, len(b), 4096): b[i] = 1
t = time.process_time()
while time.process_time() - t < 0.3: pass
print("ready", flush=True)
time.sleep(600)'`
	for _, disk := range []int64{0, 128 << 20} {
		t.Run(fmt.Sprintf("disk=%d", disk), func(t *testing.T) {
			var out syncbuf.Buffer
			sbx := create(t, rt, runtime.Spec{Template: tpl,
				Resources: runtime.Resources{MemoryBytes: 256 << 20, DiskBytes: disk},
				Process:   runtime.Process{Args: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &out}})
			for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), "ready"); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the workload never got ready: %q", out.String())
				}
			}
			st, err := sbx.Stats(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			if st.CPU < 250*time.Millisecond {
				t.Errorf("CPU = %v after a 0.3 s busy loop", st.CPU)
			}
			if st.MemoryUsed < 48<<20 || st.MemoryUsed > 256<<20 {
				t.Errorf("MemoryUsed = %d MiB with 48 MiB touched", st.MemoryUsed>>20)
			}
			if st.MemoryLimit != 256<<20 {
				t.Errorf("MemoryLimit = %d, want 256 MiB", st.MemoryLimit)
			}
			if st.Pids < 1 {
				t.Errorf("Pids = %d", st.Pids)
			}
			du, err := sbx.DiskUsage(ctxFor(t))
			if err != nil {
				t.Fatal(err)
			}
			if du.Used < 20<<20 || du.Used > du.Total {
				t.Errorf("disk used %d MiB of %d MiB after writing 20 MiB", du.Used>>20, du.Total>>20)
			}
			if disk > 0 && (du.Total > uint64(disk) || du.Total < uint64(disk)*3/4) {
				t.Errorf("disk total %d MiB with a %d MiB limit", du.Total>>20, disk>>20)
			}
		})
	}
}
