package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// smallStore makes a template store on a tmpfs of size bytes holding the
// machine's base template: its build and names copied, its layers bind
// mounted (they take none of the tmpfs).
func smallStore(t *testing.T, size string) *template.Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "templates")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		t.Skipf("no tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	big := template.Open(testenv.TemplatesDir())
	base, err := big.Get(DefaultTemplate)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"builds", "names", "layers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "builds"), 0o755)
	os.Chmod(filepath.Join(dir, "names"), 0o755)
	for _, f := range []string{"builds/" + base.ID + ".json", "names/" + DefaultTemplate + ".json"} {
		b, err := os.ReadFile(filepath.Join(big.Dir(), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range base.Layers {
		target := filepath.Join(dir, "layers", l)
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(filepath.Join(big.Dir(), "layers", l), target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
	}
	return template.Open(dir)
}

// TestSnapshotOnAFullDisk: a snapshot that fills the template store's disk
// fails with a clear error, registers nothing, leaves no partial layer,
// and the source runs on with its files; so does a pause of the files.
func TestSnapshotOnAFullDisk(t *testing.T) {
	testenv.RequireRoot(t, "namespaces, cgroups and mounts")
	ctx := context.Background()
	tpl := smallStore(t, "320m") // the store stops 256 MiB before full
	m := newEnvOn(t, tpl).manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, sb.ID, "", "head -c 120000000 /dev/urandom > /home/user/big && echo kept > /home/user/f"); err != nil {
		t.Fatal(err)
	}
	layersBefore, _ := os.ReadDir(filepath.Join(tpl.Dir(), "layers"))
	_, err = m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{Name: "full"})
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "left") {
		t.Errorf("a snapshot past the store's room = %v; want a clear resource-exhausted error", err)
	}
	if l, _, _ := m.ListSnapshots(ctx, SnapshotFilter{}); len(l) != 0 {
		t.Errorf("listed after the failure: %+v", l)
	}
	if _, err := tpl.Get("full"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the failed snapshot's name: %v", err)
	}
	if err := m.Pause(ctx, "", sb.ID, false); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("a pause of the files past the store's room = %v; want resource exhausted", err)
	}
	layersAfter, _ := os.ReadDir(filepath.Join(tpl.Dir(), "layers"))
	if len(layersAfter) != len(layersBefore) {
		t.Errorf("layers %d before, %d after: a partial layer was left", len(layersBefore), len(layersAfter))
	}
	got, err := m.Get(ctx, "", sb.ID)
	if err != nil || got.State != StateRunning {
		t.Fatalf("the source after the failures: %+v, %v; want running", got, err)
	}
	if out := readFile(t, m, sb.ID, "/home/user/f"); out != "kept\n" {
		t.Errorf("the source's file: %q", out)
	}
}

// TestSparseFilesCannotFillTheStore: a sparse file costs a sandbox no disk
// and a capture its whole length; a capture is bounded by twice the
// sandbox's disk limit, so a sparse file far past it fails the snapshot
// (and the pause of the files) with a clear error, and the sandbox runs on.
func TestSparseFilesCannotFillTheStore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m := e.managerWith(t, Options{Resources: runtime.Resources{MemoryBytes: 256 << 20, CPUs: 1, Pids: 256, DiskBytes: 128 << 20}})
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, sb.ID, "", "truncate -s 4G /home/user/sparse && echo kept > /home/user/f"); err != nil {
		t.Fatal(err)
	}
	for what, call := range map[string]func() error{
		"snapshot": func() error { _, err := m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{}); return err },
		"fork":     func() error { _, err := m.Fork(ctx, "", sb.ID, 1, time.Minute); return err },
		"pause":    func() error { return m.Pause(ctx, "", sb.ID, false) },
	} {
		if err := call(); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "sparse") {
			t.Errorf("%s of a sandbox with a 4 GiB sparse file = %v; want a resource-exhausted error naming sparse files", what, err)
		}
	}
	got, err := m.Get(ctx, "", sb.ID)
	if err != nil || got.State != StateRunning {
		t.Fatalf("after the refused captures: %+v, %v; want running", got, err)
	}
	if out := readFile(t, m, sb.ID, "/home/user/f"); out != "kept\n" {
		t.Errorf("the sandbox's file: %q", out)
	}
	if l, _, _ := m.ListSnapshots(ctx, SnapshotFilter{Sandbox: sb.ID}); len(l) != 0 {
		t.Errorf("snapshots left: %+v", l)
	}

	// One made to pause its files at its timeout, whose files cannot be
	// kept, is paused with its memory instead: not left running past its
	// end, nor tried again and again (review 16).
	auto, err := m.Create(ctx, CreateRequest{Timeout: time.Second, Lifecycle: Lifecycle{OnTimeout: OnTimeoutPause, PauseFilesystem: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, auto.ID, "", "truncate -s 4G /home/user/sparse && echo kept > /home/user/f"); err != nil {
		t.Fatal(err)
	}
	// The pause of its files reads up to its capture bound first.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		got, err = m.Get(ctx, "", auto.ID)
		if err == nil && got.State == StatePaused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a minute after its timeout: %+v, %v; want paused", got, err)
		}
	}
	m.mu.Lock()
	frozen := m.live[auto.ID] != nil && m.live[auto.ID].paused
	m.mu.Unlock()
	if !frozen {
		t.Error("not paused with its memory")
	}
	if _, _, err := m.Connect(ctx, "", auto.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if out := readFile(t, m, auto.ID, "/home/user/f"); out != "kept\n" {
		t.Errorf("after the resume: %q", out)
	}
}

// TestSnapshotsCannotExhaustInodes: snapshots of a sandbox holding many
// empty files take inodes, not bytes; the store keeps a floor of free
// inodes as it does of bytes (review 17: snapshot after snapshot took the
// host's inodes), and the source runs on.
func TestSnapshotsCannotExhaustInodes(t *testing.T) {
	testenv.RequireRoot(t, "namespaces, cgroups and mounts")
	ctx := context.Background()
	// 320 MiB and 80,000 inodes: room for 14,000 above the 65,536 floor.
	tpl := smallStore(t, "320m,nr_inodes=80000")
	m := newEnvOn(t, tpl).manager(t)
	sb, err := m.Create(ctx, CreateRequest{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, m, sb.ID, "", "mkdir /home/user/many && cd /home/user/many && seq 1 20000 | xargs touch && echo kept > /home/user/f"); err != nil {
		t.Fatal(err)
	}
	_, err = m.CreateSnapshot(ctx, "", sb.ID, SnapshotRequest{})
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "inodes") {
		t.Errorf("a snapshot past the store's inodes = %v; want a resource-exhausted error naming inodes", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(tpl.Dir(), &fs); err != nil || fs.Ffree < 60000 {
		t.Errorf("free inodes after the refused snapshot: %d, %v", fs.Ffree, err)
	}
	if out := readFile(t, m, sb.ID, "/home/user/f"); out != "kept\n" {
		t.Errorf("the source's file: %q", out)
	}
}
