package runtimetest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/syncbuf"
)

// The seams the lifecycle builds pause, snapshots and forks on: freeze and
// thaw, capturing the writable layer, checkpoints, and the capabilities
// that say which of them a backend has on this host.

// counterScript prints 1, 2, 3, ... one line every 20 ms: a sandbox whose
// progress shows in its log.
const counterScript = `i=0; while :; do i=$((i+1)); echo $i; sleep 0.02; done`

// counter starts a sandbox running counterScript with its output in the
// sandbox's log, and waits until it has counted a little.
func counter(t *testing.T, rt runtime.Runtime, tpl string, res runtime.Resources) runtime.Sandbox {
	t.Helper()
	sbx := create(t, rt, runtime.Spec{Template: tpl, Resources: res, Process: runtime.Process{Args: []string{"/bin/sh", "-c", counterScript}}})
	waitFor(t, "the counter to start", func() bool { return count(t, sbx) >= 3 })
	return sbx
}

// count is the last number a counter sandbox has written to its log, 0
// before the first.
func count(t *testing.T, sbx runtime.Sandbox) int {
	t.Helper()
	log, err := sbx.Output(ctxFor(t))
	if errors.Is(err, errdefs.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("Output: %v", err)
	}
	defer log.Close()
	b := make([]byte, log.Size())
	if _, err := log.ReadAt(b, 0); err != nil && err != io.EOF {
		t.Fatalf("read output: %v", err)
	}
	// Only whole lines: the last may be half written.
	s := string(b)
	end := strings.LastIndexByte(s, '\n')
	if end < 0 {
		return 0
	}
	s = s[:end]
	n, err := strconv.Atoi(s[strings.LastIndexByte(s, '\n')+1:])
	if err != nil {
		t.Fatalf("counter output %q: %v", s, err)
	}
	return n
}

// waitFor polls cond until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// state is the sandbox's state as Status reports it.
func state(t *testing.T, sbx runtime.Sandbox) runtime.State {
	t.Helper()
	st, err := sbx.Status(ctxFor(t))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	return st.State
}

// requireFreeze skips the test when the backend cannot freeze on this
// host, after checking that Freeze says so as Capabilities does.
func requireFreeze(t *testing.T, rt runtime.Runtime, sbx runtime.Sandbox) {
	t.Helper()
	caps := rt.Capabilities(ctxFor(t))
	if caps.Freeze.Available {
		return
	}
	if err := sbx.Freeze(ctxFor(t)); !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("Freeze without a freezer = %v, want ErrNotImplemented", err)
	}
	t.Skipf("no freezer here: %s", caps.Freeze.Reason)
}

// testCapabilities checks that a backend's report is stable and claims
// nothing it does not have, and gives a reason for what it lacks.
func testCapabilities(t *testing.T, rt runtime.Runtime, tpl string) {
	caps := rt.Capabilities(ctxFor(t))
	t.Logf("capabilities: %+v", caps)
	if again := rt.Capabilities(ctxFor(t)); again != caps {
		t.Errorf("Capabilities changed between calls: %+v, then %+v", caps, again)
	}
	for _, f := range []struct {
		name string
		f    runtime.Feature
	}{{"Freeze", caps.Freeze}, {"Checkpoint", caps.Checkpoint}} {
		if !f.f.Available && f.f.Reason == "" {
			t.Errorf("%s is unavailable without a reason", f.name)
		}
	}
	if _, ok := rt.(runtime.Checkpointer); !ok && caps.Checkpoint.Available {
		t.Error("Checkpoint is available, but the runtime does not implement runtime.Checkpointer")
	}
}

// testFreezeThaw checks that a frozen sandbox makes no progress and goes
// on after Thaw, that both are idempotent, and what works while frozen.
func testFreezeThaw(t *testing.T, rt runtime.Runtime, tpl string) {
	ctx := ctxFor(t)
	sbx := counter(t, rt, tpl, runtime.Resources{MemoryBytes: 128 << 20})
	requireFreeze(t, rt, sbx)
	before, err := sbx.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}

	if err := sbx.Thaw(ctx); err != nil {
		t.Errorf("Thaw of a running sandbox: %v", err)
	}
	if got := state(t, sbx); got != runtime.StateRunning {
		t.Errorf("after Thaw of a running sandbox: state %q, want %q", got, runtime.StateRunning)
	}

	if err := sbx.Freeze(ctx); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	st, err := sbx.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != runtime.StateFrozen || st.Pid != before.Pid || st.Exit != nil {
		t.Errorf("Status of a frozen sandbox = %+v, want state %q, pid %d, no exit", st, runtime.StateFrozen, before.Pid)
	}
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		if s.ID == sbx.ID() && s.State != runtime.StateFrozen {
			t.Errorf("List reports the frozen sandbox as %q", s.State)
		}
	}
	frozenAt := count(t, sbx)
	time.Sleep(300 * time.Millisecond) // 15 counts' worth
	if got := count(t, sbx); got != frozenAt {
		t.Fatalf("the counter went from %d to %d while frozen", frozenAt, got)
	}

	if err := sbx.Freeze(ctx); err != nil {
		t.Errorf("Freeze of a frozen sandbox: %v", err)
	}
	if got := state(t, sbx); got != runtime.StateFrozen {
		t.Errorf("after a second Freeze: state %q, want %q", got, runtime.StateFrozen)
	}
	stats, err := sbx.Stats(ctx)
	if err != nil {
		t.Errorf("Stats while frozen: %v", err)
	} else if stats.Pids < 1 || stats.MemoryLimit != 128<<20 {
		t.Errorf("Stats while frozen = %+v, want pids and the 128 MiB limit", stats)
	}
	if _, err := sbx.DiskUsage(ctx); err != nil {
		t.Errorf("DiskUsage while frozen: %v", err)
	}
	if err := sbx.Signal(ctx, syscall.SIGTERM); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Signal while frozen = %v, want ErrFailedPrecondition", err)
	}
	time.Sleep(100 * time.Millisecond)
	if got := count(t, sbx); got != frozenAt {
		t.Errorf("the counter went from %d to %d while frozen", frozenAt, got)
	}

	if err := sbx.Thaw(ctx); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	if got := state(t, sbx); got != runtime.StateRunning {
		t.Errorf("after Thaw: state %q, want %q", got, runtime.StateRunning)
	}
	waitFor(t, "the counter to go on after Thaw", func() bool { return count(t, sbx) > frozenAt+3 })
	if err := sbx.Thaw(ctx); err != nil {
		t.Errorf("second Thaw: %v", err)
	}
	// The SIGTERM refused while frozen was never delivered.
	if got := state(t, sbx); got != runtime.StateRunning {
		t.Errorf("after a second Thaw: state %q, want %q", got, runtime.StateRunning)
	}
}

// testFreezeExited checks Freeze and Thaw of a sandbox whose first process
// has ended.
func testFreezeExited(t *testing.T, rt runtime.Runtime, tpl string) {
	ctx := ctxFor(t)
	sbx := create(t, rt, runtime.Spec{Template: tpl, Process: runtime.Process{Args: []string{"true"}, Stdout: &bytes.Buffer{}}})
	if _, err := sbx.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sbx.Freeze(ctx); !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("Freeze of an exited sandbox = %v, want ErrFailedPrecondition", err)
	}
	if err := sbx.Thaw(ctx); err != nil {
		t.Errorf("Thaw of an exited sandbox: %v", err)
	}
	if got := state(t, sbx); got != runtime.StateExited {
		t.Errorf("state %q, want %q", got, runtime.StateExited)
	}
}

// testDeleteFrozen checks that a frozen sandbox, with processes besides
// its first, is deleted promptly and completely.
func testDeleteFrozen(t *testing.T, rt runtime.Runtime, tpl string) {
	for _, disk := range []int64{0, 64 << 20} {
		t.Run(fmt.Sprintf("disk=%d", disk), func(t *testing.T) {
			ctx := ctxFor(t)
			var out syncbuf.Buffer
			sbx := create(t, rt, runtime.Spec{Template: tpl, Resources: runtime.Resources{DiskBytes: disk}, Process: runtime.Process{
				Args:   []string{"/bin/sh", "-c", `trap '' TERM; sleep 1000 & sleep 1000 & (sleep 1000 &); echo ready; wait`},
				Stdout: &out,
			}})
			waitFor(t, "the sandbox to start", func() bool { return strings.Contains(out.String(), "ready") })
			requireFreeze(t, rt, sbx)
			st, err := sbx.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := sbx.Freeze(ctx); err != nil {
				t.Fatalf("Freeze: %v", err)
			}
			dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			start := time.Now()
			if err := sbx.Delete(dctx); err != nil {
				t.Fatalf("Delete of a frozen sandbox: %v", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("Delete of a frozen sandbox took %v", took)
			}
			if _, err := sbx.Wait(ctx); err != nil {
				t.Errorf("Wait after Delete: %v", err)
			}
			if _, err := rt.Load(ctx, sbx.ID()); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Load after Delete = %v, want ErrNotFound", err)
			}
			if err := syscall.Kill(st.Pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Errorf("the init (pid %d) is still there after Delete: kill 0 = %v", st.Pid, err)
			}
		})
	}
}

// testCaptureLayer checks the writable layer's tar stream: files, owners,
// links, whiteouts and opaque directories, from a frozen sandbox and from
// an exited one, with and without a disk limit.
func testCaptureLayer(t *testing.T, rt runtime.Runtime, tpl string) {
	// /home/user is the template's: removed and made again, it is opaque.
	// /etc/group is the template's too: removed, it leaves a whiteout.
	const script = `set -e
rm -rf /home/user && mkdir -p /home/user/dir/sub
echo hello > /home/user/dir/new.txt
chown 1000:1000 /home/user/dir/new.txt
ln /home/user/dir/new.txt /home/user/dir/hard
ln -s new.txt /home/user/dir/link
mkfifo /home/user/dir/fifo
rm /etc/group
echo ready`
	tests := []struct {
		name   string
		disk   int64
		frozen bool // captured frozen while running, else once exited
	}{
		{"exited", 0, false},
		{"frozen", 0, true},
		{"exited with disk", 64 << 20, false},
		{"frozen with disk", 64 << 20, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			args := []string{"/bin/sh", "-c", script}
			if tc.frozen {
				args[2] += "; exec sleep 1000"
			}
			var out, errb syncbuf.Buffer
			sbx := create(t, rt, runtime.Spec{Template: tpl, Resources: runtime.Resources{DiskBytes: tc.disk}, Process: runtime.Process{
				Args: args, User: "root", Cwd: "/", Stdout: &out, Stderr: &errb,
			}})
			waitFor(t, "the files to be made", func() bool { return strings.Contains(out.String(), "ready") })
			if tc.frozen {
				if err := sbx.CaptureLayer(ctx, io.Discard); !errors.Is(err, errdefs.ErrFailedPrecondition) {
					t.Errorf("CaptureLayer of a running sandbox = %v, want ErrFailedPrecondition", err)
				}
				requireFreeze(t, rt, sbx)
				if err := sbx.Freeze(ctx); err != nil {
					t.Fatal(err)
				}
			} else if st, err := sbx.Wait(ctx); err != nil || st.Code != 0 {
				t.Fatalf("Wait = %+v, %v; stderr %q", st, err, errb.String())
			} else if !rt.Capabilities(ctx).LayerAfterExit {
				if err := sbx.CaptureLayer(ctx, io.Discard); !errors.Is(err, errdefs.ErrFailedPrecondition) {
					t.Errorf("CaptureLayer of an exited sandbox whose layer is gone = %v, want ErrFailedPrecondition", err)
				}
				return
			}
			var layer bytes.Buffer
			if err := sbx.CaptureLayer(ctx, &layer); err != nil {
				t.Fatalf("CaptureLayer: %v", err)
			}
			checkLayer(t, &layer)
			if tc.frozen {
				if got := state(t, sbx); got != runtime.StateFrozen {
					t.Errorf("after CaptureLayer: state %q, want %q", got, runtime.StateFrozen)
				}
			}
		})
	}
}

// checkLayer checks a layer captured after testCaptureLayer's script.
func checkLayer(t *testing.T, r io.Reader) {
	t.Helper()
	type entry struct {
		hdr  *tar.Header
		data string
	}
	entries := map[string]entry{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || strings.HasPrefix(name, "../") {
			t.Errorf("entry %q is not a clean relative name", hdr.Name)
		}
		if _, dup := entries[name]; dup {
			t.Errorf("entry %q appears twice", name)
		}
		if dir := path.Dir(name); dir != "." && entries[dir].hdr == nil {
			t.Errorf("entry %q comes before its directory", name)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", hdr.Name, err)
		}
		entries[name] = entry{hdr, string(b)}
	}
	want := []struct {
		name     string
		typeflag byte
		uid      int
		linkname string
	}{
		{"home/user", tar.TypeDir, 0, ""},
		{"home/user/.wh..wh..opq", tar.TypeReg, 0, ""},
		{"home/user/dir/sub", tar.TypeDir, 0, ""},
		{"home/user/dir/link", tar.TypeSymlink, 0, "new.txt"},
		{"home/user/dir/fifo", tar.TypeFifo, 0, ""},
		{"etc/.wh.group", tar.TypeReg, 0, ""},
	}
	for _, w := range want {
		e, ok := entries[w.name]
		if !ok {
			t.Errorf("no entry %s in the layer", w.name)
			continue
		}
		if e.hdr.Typeflag != w.typeflag || e.hdr.Uid != w.uid || e.hdr.Linkname != w.linkname {
			t.Errorf("%s: type %q uid %d link %q, want type %q uid %d link %q", w.name, e.hdr.Typeflag, e.hdr.Uid, e.hdr.Linkname, w.typeflag, w.uid, w.linkname)
		}
	}
	if _, ok := entries["etc/group"]; ok {
		t.Error("the deleted etc/group is in the layer")
	}
	// new.txt and its hard link: one is the file, the other links to it.
	file, link := entries["home/user/dir/new.txt"], entries["home/user/dir/hard"]
	if file.hdr == nil || link.hdr == nil {
		t.Fatalf("new.txt or its hard link is missing from the layer")
	}
	if file.hdr.Typeflag == tar.TypeLink {
		file, link = link, file
	}
	if file.hdr.Typeflag != tar.TypeReg || file.data != "hello\n" || file.hdr.Uid != 1000 || file.hdr.Gid != 1000 {
		t.Errorf("new.txt: type %q, %q, owner %d:%d; want a file with \"hello\\n\" owned by 1000:1000", file.hdr.Typeflag, file.data, file.hdr.Uid, file.hdr.Gid)
	}
	if link.hdr.Typeflag != tar.TypeLink || strings.TrimSuffix(link.hdr.Linkname, "/") != strings.TrimSuffix(file.hdr.Name, "/") {
		t.Errorf("hard link: type %q to %q, want a link to %s", link.hdr.Typeflag, link.hdr.Linkname, file.hdr.Name)
	}
}

// testCheckpoint checks a backend's checkpoints, if it has them: a
// sandbox saved goes on running, and each restore of it goes on counting
// from where it was saved.
func testCheckpoint(t *testing.T, rt runtime.Runtime, tpl string) {
	caps := rt.Capabilities(ctxFor(t))
	cp, ok := rt.(runtime.Checkpointer)
	if !ok {
		t.Skipf("the backend does not implement runtime.Checkpointer: %s", caps.Checkpoint.Reason)
	}
	ctx := ctxFor(t)
	sbx := counter(t, rt, tpl, runtime.Resources{})
	if !caps.Checkpoint.Available {
		if err := cp.Checkpoint(ctx, sbx.ID(), t.TempDir()+"/checkpoint"); !errors.Is(err, errdefs.ErrNotImplemented) {
			t.Errorf("Checkpoint where unavailable = %v, want ErrNotImplemented", err)
		}
		t.Skipf("checkpoints are unavailable here: %s", caps.Checkpoint.Reason)
	}
	saved := count(t, sbx)
	dir := t.TempDir() + "/checkpoint"
	if err := cp.Checkpoint(ctx, sbx.ID(), dir); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if got := state(t, sbx); got != runtime.StateRunning {
		t.Errorf("after Checkpoint: state %q, want %q", got, runtime.StateRunning)
	}
	waitFor(t, "the saved sandbox to go on", func() bool { return count(t, sbx) > saved+3 })
	for i := 0; i < 2; i++ {
		restored, err := cp.Restore(ctx, dir, runtime.RestoreSpec{Labels: map[string]string{"restore": strconv.Itoa(i)}})
		if err != nil {
			t.Fatalf("Restore %d: %v", i, err)
		}
		t.Cleanup(func() { restored.Delete(context.Background()) })
		if restored.ID() == sbx.ID() {
			t.Errorf("restore %d took the saved sandbox's id", i)
		}
		st, err := restored.Status(ctx)
		if err != nil || st.State != runtime.StateRunning || st.Labels["restore"] != strconv.Itoa(i) {
			t.Errorf("restore %d: Status = %+v, %v; want running with label restore=%d", i, st, err, i)
		}
		waitFor(t, "the restored sandbox to count on", func() bool { return count(t, restored) > saved+3 })
	}
}
