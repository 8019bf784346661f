package sandbox

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// readFile is the content of path in sandbox id.
func readFile(t *testing.T, m *Manager, id, path string) string {
	t.Helper()
	out, err := run(t, m, id, "", "cat "+path)
	if err != nil {
		t.Fatalf("cat %s in %s: %v", path, id, err)
	}
	return out
}

// TestPauseFiles: a pause without memory
// keeps the files (written, changed and deleted ones) and stops every
// process; the sandbox gives its slot back while paused, survives a new
// server, and a connect boots it again under its id with its files.
func TestPauseFiles(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first := e.managerWith(t, Options{MaxPerKey: 1})
	sb, err := first.Create(ctx, CreateRequest{Timeout: time.Minute, Envs: map[string]string{"KEPT": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, first, sb.ID, "", "echo kept > /home/user/f && sudo rm /etc/motd"); err != nil {
		t.Fatal(err)
	}
	counter(t, first, sb.ID)
	if err := first.Pause(ctx, "", sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := first.Pause(ctx, "", sb.ID, false); !errors.Is(err, ErrAlreadyPaused) {
		t.Errorf("second pause = %v, want already paused", err)
	}
	if _, err := first.rt.Load(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the runtime still has the sandbox paused without memory: %v", err)
	}
	other, err := first.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("a paused sandbox without memory still holds its slot: %v", err)
	}
	first.Kill(ctx, "", other.ID)
	first.Close()

	second := e.managerWith(t, Options{MaxPerKey: 1})
	if err := second.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := second.Get(ctx, "", sb.ID)
	if err != nil || got.State != StatePaused {
		t.Fatalf("after a restart: %+v, %v; want paused", got, err)
	}
	_, resumed, err := second.Connect(ctx, "", sb.ID, time.Minute)
	if err != nil || !resumed {
		t.Fatalf("connect = %v, %v; want resumed", resumed, err)
	}
	if got := readFile(t, second, sb.ID, "/home/user/f"); got != "kept\n" {
		t.Errorf("file after resume = %q", got)
	}
	if out, _ := run(t, second, sb.ID, "", "test -e /etc/motd && echo there; echo $KEPT; pgrep -c sleep || true"); out != "yes\n0\n" {
		t.Errorf("after resume: %q; want the deletion kept, the env, no process of before", out)
	}
	if _, err := second.Create(ctx, CreateRequest{Timeout: time.Minute}); err == nil {
		t.Error("the resumed sandbox holds no slot")
	}
}

// TestCrashAtEveryStep: a server killed at each step of a pause, a resume
// and a snapshot leaves, after a restart, the sandbox running or paused
// (never half) with its files, and it works either way.
func TestCrashAtEveryStep(t *testing.T) {
	cases := []struct {
		step       string
		pauseFirst string // "", "memory" or "files": paused before the crashing call
		call       func(m *Manager, id string) error
		want       State
	}{
		{"pause.frozen", "", func(m *Manager, id string) error { return m.Pause(context.Background(), "", id, false) }, StateRunning},
		{"pause.captured", "", func(m *Manager, id string) error { return m.Pause(context.Background(), "", id, false) }, StateRunning},
		{"pause.recorded", "", func(m *Manager, id string) error { return m.Pause(context.Background(), "", id, false) }, StatePaused},
		{"pause.frozen", "", func(m *Manager, id string) error { return m.Pause(context.Background(), "", id, true) }, StateRunning},
		{"resume.started", "files", func(m *Manager, id string) error {
			_, _, err := m.Connect(context.Background(), "", id, time.Minute)
			return err
		}, StatePaused},
		{"resume.recorded", "files", func(m *Manager, id string) error {
			_, _, err := m.Connect(context.Background(), "", id, time.Minute)
			return err
		}, StateRunning},
		{"resume.thawed", "memory", func(m *Manager, id string) error {
			_, _, err := m.Connect(context.Background(), "", id, time.Minute)
			return err
		}, StatePaused},
		{"snapshot.captured", "", func(m *Manager, id string) error {
			_, err := m.CreateSnapshot(context.Background(), "", id, SnapshotRequest{})
			return err
		}, StateRunning},
	}
	e := newEnv(t)
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s after %s pause", c.step, c.pauseFirst), func(t *testing.T) {
			ctx := context.Background()
			first := e.manager(t)
			sb, err := first.Create(ctx, CreateRequest{Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := run(t, first, sb.ID, "", "echo kept > /home/user/f"); err != nil {
				t.Fatal(err)
			}
			if c.pauseFirst != "" {
				if err := first.Pause(ctx, "", sb.ID, c.pauseFirst == "memory"); err != nil {
					t.Fatal(err)
				}
			}
			// The call stops at the step, as a killed server would; it is
			// let go (and ends there) only after the test.
			reached, release := make(chan struct{}), make(chan struct{})
			first.crash = func(step string) {
				if step == c.step {
					close(reached)
					<-release
					runtime.Goexit()
				}
			}
			t.Cleanup(func() { close(release) })
			go c.call(first, sb.ID)
			select {
			case <-reached:
			case <-time.After(time.Minute):
				t.Fatalf("the call never reached %s", c.step)
			}
			first.Close()

			second := e.manager(t)
			if err := second.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := second.Get(ctx, "", sb.ID)
			if err != nil || got.State != c.want {
				t.Fatalf("after the restart: %+v, %v; want %s", got, err, c.want)
			}
			if got.State == StatePaused {
				if _, _, err := second.Connect(ctx, "", sb.ID, time.Minute); err != nil {
					t.Fatalf("connect after the restart: %v", err)
				}
			}
			if got := readFile(t, second, sb.ID, "/home/user/f"); got != "kept\n" {
				t.Errorf("file after the restart = %q", got)
			}
			snaps, _, _ := second.ListSnapshots(ctx, SnapshotFilter{Sandbox: sb.ID})
			for _, s := range snaps {
				second.DeleteSnapshot(ctx, "", s.ID)
			}
		})
	}
}

// TestSnapshotWhileWriting: a snapshot of a sandbox that writes files as
// fast as it can holds each file whole, as the sandbox had it at one
// moment; the source runs on; a sandbox made from the snapshot has them.
func TestSnapshotWhileWriting(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Each file is written whole, then renamed into place: one that is
	// there at all is whole in any consistent view.
	if _, err := run(t, m, sb.ID, "", `mkdir /home/user/w && nohup sh -c 'i=0; while :; do i=$((i+1)); head -c 200000 /dev/urandom > /home/user/w/.t; sha256sum < /home/user/w/.t | cut -c1-64 > /home/user/w/.s; cat /home/user/w/.t /home/user/w/.s > /home/user/w/.u; mv /home/user/w/.u /home/user/w/f$i; done' >/dev/null 2>&1 & sleep 0.5`); err != nil {
		t.Fatal(err)
	}
	snap, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.DeleteSnapshot(ctx, "", snap.ID)
	before, _ := run(t, m, sb.ID, "", "ls /home/user/w | wc -l")
	time.Sleep(300 * time.Millisecond)
	after, _ := run(t, m, sb.ID, "", "ls /home/user/w | wc -l")
	if before == after {
		t.Errorf("the source stopped writing after the snapshot (%s files)", strings.TrimSpace(after))
	}
	copy, err := m.Create(ctx, CreateRequest{Template: snap.ID, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(t, m, copy.ID, "", `cd /home/user/w && n=0; for f in f*; do n=$((n+1)); head -c 200000 $f | sha256sum | cut -c1-64 | cmp -s - <(tail -c 65 $f | head -c 64; echo) || echo "torn $f"; done; echo "$n files"`)
	if err != nil || strings.Contains(out, "torn") || strings.HasPrefix(out, "0 files") {
		t.Errorf("in the snapshot: %q, %v", out, err)
	}
}

// TestFork: the forks of one call run on one
// captured build (shared layers, no copy per fork), each has the files,
// the source runs on; forks past a cap fail one by one and leave nothing.
func TestFork(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.managerWith(t, Options{MaxPerKey: 3})
	src, err := m.Create(ctx, CreateRequest{Timeout: time.Minute, Metadata: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, src.ID, "", "echo from-source > /home/user/f"); err != nil {
		t.Fatal(err)
	}
	results, err := m.Fork(ctx, "", src.ID, 4, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var ok, limited int
	builds := map[string]bool{}
	for _, r := range results {
		switch {
		case r.Err == nil:
			ok++
			if got := readFile(t, m, r.Sandbox.ID, "/home/user/f"); got != "from-source\n" {
				t.Errorf("fork %s has %q", r.Sandbox.ID, got)
			}
			if r.Sandbox.Metadata["k"] != "v" || r.Sandbox.Alias != src.Alias {
				t.Errorf("fork %+v: want the source's metadata and alias", r.Sandbox)
			}
			st, err := m.rt.Load(ctx, r.Sandbox.ID)
			if err != nil {
				t.Fatal(err)
			}
			status, _ := st.Status(ctx)
			builds[status.TemplateID] = true
		case errors.Is(r.Err, errdefs.ErrResourceExhausted):
			limited++
		default:
			t.Errorf("fork error %v", r.Err)
		}
	}
	if ok != 2 || limited != 2 {
		t.Errorf("%d forks made, %d refused at the cap; want 2 and 2", ok, limited)
	}
	if len(builds) != 1 {
		t.Errorf("forks run on %d builds, want one shared", len(builds))
	}
	sts, _ := m.rt.List(ctx)
	if len(sts) != 3 {
		t.Errorf("the runtime has %d sandboxes, want the source and 2 forks", len(sts))
	}
	if got := readFile(t, m, src.ID, "/home/user/f"); got != "from-source\n" {
		t.Errorf("source after the fork: %q", got)
	}
	for _, n := range []int{0, MaxForks + 1} {
		if _, err := m.Fork(ctx, "", src.ID, n, 0); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("fork of %d = %v, want invalid argument", n, err)
		}
	}
}

// TestRetention: a snapshot past its retention and a sandbox paused past
// the paused retention are removed by the sweep; others stay.
func TestRetention(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.managerWith(t, Options{PausedRetention: time.Second})
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	short, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.DeleteSnapshot(ctx, "", kept.ID)
	if err := m.Pause(ctx, "", sb.ID, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	m.sweepSnapshots(ctx)
	left, _, err := m.ListSnapshots(ctx, SnapshotFilter{Sandbox: sb.ID})
	if err != nil || len(left) != 1 || left[0].ID != kept.ID {
		t.Errorf("snapshots after the sweep: %+v, %v; want only %s", left, err, kept.ID)
	}
	if _, err := m.templates.Get(short.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the expired snapshot's build: %v", err)
	}
	if _, err := m.Get(ctx, "", sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("sandbox paused past its retention: %v, want gone", err)
	}
	if _, err := m.templates.Get(pausedName(sb.ID)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("its files: %v, want removed", err)
	}
	if _, err := m.Create(ctx, CreateRequest{Template: kept.Name}); err != nil {
		t.Errorf("create from the kept snapshot: %v", err)
	}
}

// TestSnapshotNames: a name of Hutch's own, a malformed one or a paused
// sandbox's store name is refused; a reused name moves to the new
// snapshot; a paused sandbox's files cannot be used to create.
func TestSnapshotNames(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"base", "Bad", "../x", "paused-x", strings.Repeat("a", 64)} {
		if _, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{Name: bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("snapshot named %q = %v, want invalid argument", bad, err)
		}
	}
	name := "snap-names-" + randomHex(4)
	a, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if tpl, err := m.templates.Get(name); err != nil || tpl.ID != b.ID {
		t.Errorf("name %s after a second snapshot: %v, %v; want %s", name, tpl, err, b.ID)
	}
	// Deleted while a sandbox made from it runs: gone for everyone else.
	user, err := m.Create(ctx, CreateRequest{Template: b.ID, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteSnapshot(ctx, "", b.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteSnapshot(ctx, "", b.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a second delete = %v, want not found", err)
	}
	if _, err := m.Create(ctx, CreateRequest{Template: b.ID}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("create from a deleted snapshot = %v, want not found", err)
	}
	if l, _, _ := m.ListSnapshots(ctx, SnapshotFilter{Sandbox: sb.ID}); len(l) != 0 {
		t.Errorf("listed after the delete: %+v", l)
	}
	if got := readFile(t, m, user.ID, "/etc/hostname"); got == "" {
		t.Error("the sandbox made from it lost its files")
	}
	if _, err := m.templates.Get(b.ID); err != nil {
		t.Errorf("the build of a deleted snapshot in use: %v; want kept until unused", err)
	}
	if _, err := m.templates.Get(a.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the superseded snapshot: %v, want removed", err)
	}
	if err := m.Pause(ctx, "", sb.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, CreateRequest{Template: pausedName(sb.ID)}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("create from a paused sandbox's files = %v, want not found", err)
	}
	tpl, err := m.templates.Get(pausedName(sb.ID))
	if err != nil || tpl.Snapshot == nil || tpl.Snapshot.Kind != template.SnapshotPause || tpl.Listed() {
		t.Errorf("the paused files' build: %+v, %v", tpl, err)
	}
}

// TestWarmPoolOfASnapshot: a warm pool named after a snapshot keeps
// sandboxes of it ready, and a create by the snapshot's id (as E2B's SDKs
// create from a snapshot) takes one, with the snapshot's files.
func TestWarmPoolOfASnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, sb.ID, "", "echo warm > /home/user/f"); err != nil {
		t.Fatal(err)
	}
	name := "warm-snap-" + randomHex(4)
	snap, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	defer m.DeleteSnapshot(ctx, "", snap.ID)
	warm := e.managerWith(t, Options{Warm: map[string]int{name: 1}})
	if err := warm.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	p := warm.pools[name]
	deadline := time.Now().Add(time.Minute)
	for p.idle.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the snapshot's pool never filled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := warm.Create(ctx, CreateRequest{Template: snap.ID, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if p.lastTake.Load() == 0 {
		t.Error("the create by the snapshot's id did not take from its pool")
	}
	if out := readFile(t, warm, got.ID, "/home/user/f"); out != "warm\n" {
		t.Errorf("a warm sandbox of the snapshot has %q", out)
	}
}

// TestPausesAtOnce: of two pauses of one sandbox at once, whatever their
// modes, one pauses it and the other finds it paused; a kill racing a
// pause leaves the sandbox gone, not half paused.
func TestPausesAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	for _, modes := range [][2]bool{{true, true}, {false, false}, {true, false}} {
		sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for _, keep := range modes {
			go func() { errs <- m.Pause(ctx, "", sb.ID, keep) }()
		}
		e1, e2 := <-errs, <-errs
		if (e1 == nil) == (e2 == nil) || !errors.Is(errors.Join(e1, e2), ErrAlreadyPaused) {
			t.Errorf("pauses %v at once: %v and %v; want one nil and one already paused", modes, e1, e2)
		}
		if got, err := m.Get(ctx, "", sb.ID); err != nil || got.State != StatePaused {
			t.Errorf("after the pauses: %+v, %v", got, err)
		}
		m.Kill(ctx, "", sb.ID)
	}
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Pause(ctx, "", sb.ID, false) }()
	if err := m.Kill(ctx, "", sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a pause racing a kill = %v; want success or not found", err)
	}
	if _, err := m.Get(ctx, "", sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after a kill racing a pause: %v; want gone", err)
	}
	if _, err := m.rt.Load(ctx, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the runtime still has the sandbox: %v", err)
	}
	if _, err := m.templates.Get(pausedName(sb.ID)); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("its paused files are left: %v", err)
	}
}

// TestCaptureKeepsAnySymlink: a symlink that climbs above the root is a
// sandbox's own business (".." stops at its root): a snapshot and a pause
// of the files keep it as it is (review 16: one such link failed every
// capture).
func TestCaptureKeepsAnySymlink(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, sb.ID, "", "ln -s ../../../../../etc/passwd /tmp/up && ln -s /etc/hostname /tmp/abs"); err != nil {
		t.Fatal(err)
	}
	snap, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{})
	if err != nil {
		t.Fatalf("snapshot with a climbing symlink: %v", err)
	}
	defer m.DeleteSnapshot(ctx, "", snap.ID)
	if err := m.Pause(ctx, "", sb.ID, false); err != nil {
		t.Fatalf("pause of the files with a climbing symlink: %v", err)
	}
	if _, _, err := m.Connect(ctx, "", sb.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	copy, err := m.Create(ctx, CreateRequest{Template: snap.ID, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{sb.ID, copy.ID} {
		out, err := run(t, m, id, "", "readlink /tmp/up /tmp/abs; head -c 5 /tmp/up")
		if err != nil || out != "../../../../../etc/passwd\n/etc/hostname\nroot:" {
			t.Errorf("in %s: %q, %v", id, out, err)
		}
	}
}

// TestCaptureBounds: a capture reads the tree a sandbox made inside the
// server: a tree nested past the bound fails it with a clear error and the
// sandbox runs on; a directory of many entries is read a chunk at a time
// and captured whole (review 17: millions of names were held at once).
func TestCaptureBounds(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, sb.ID, "", `mkdir /home/user/wide && cd /home/user/wide && seq 1 3000 | xargs touch && ln 1 link && cd /home/user && python3 -c '
import os
os.makedirs("deep", exist_ok=True); os.chdir("deep")
for i in range(300):
    os.mkdir("d"); os.chdir("d")
'`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{}); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("a snapshot of a tree 300 deep = %v; want a resource-exhausted error naming the depth", err)
	}
	if _, err := run(t, m, sb.ID, "", "rm -rf /home/user/deep"); err != nil {
		t.Fatal(err)
	}
	snap, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.DeleteSnapshot(ctx, "", snap.ID)
	copy, err := m.Create(ctx, CreateRequest{Template: snap.ID, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, m, copy.ID, "", "ls /home/user/wide | wc -l; stat -c %h /home/user/wide/1"); err != nil || out != "3001\n2\n" {
		t.Errorf("the wide directory in the snapshot: %q, %v; want 3001 entries and the hard link", out, err)
	}
}
