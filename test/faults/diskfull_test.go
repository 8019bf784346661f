package faults

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

	"github.com/hutch-sandbox/hutch/sdk"
)

// smallFS mounts a tmpfs of size ("64m") at dir, unmounted when the test
// ends.
func smallFS(t *testing.T, dir, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0711"); err != nil {
		t.Fatalf("tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

// fill writes a file at path until its file system is full, leaving
// leave bytes free.
func fill(t *testing.T, path string, leave int64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		t.Fatal(err)
	}
	n := (int64(st.Bavail)*st.Bsize - leave) >> 20
	// dd stops at the end of the room, failing: that is what is wanted.
	exec.Command("dd", "if=/dev/zero", "of="+path, "bs=1M", "count="+strconv.FormatInt(n, 10)).Run()
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil || int64(st.Bavail)*st.Bsize > leave+1<<20 {
		t.Fatalf("fill %s: %d bytes left, %v", path, int64(st.Bavail)*st.Bsize, err)
	}
}

// noRoom checks a client's error for a request refused for want of disk:
// an answer of the server (E2B's JSON error: a status and a message)
// that names the disk.
func noRoom(t *testing.T, what string, err error) {
	t.Helper()
	var se *sdk.Error
	var be *sdk.BuildError
	switch {
	case err == nil:
		t.Errorf("%s on a full disk succeeded", what)
	case errors.As(err, &be):
		if !strings.Contains(be.Message, "disk") && !strings.Contains(be.Message, "space") {
			t.Errorf("%s on a full disk: %v; want it to say the disk is full", what, err)
		}
	case !errors.As(err, &se) || se.StatusCode == 0 || se.StatusCode == 500 || (!strings.Contains(se.Message, "disk") && !strings.Contains(se.Message, "space")):
		t.Errorf("%s on a full disk: %v; want an answer (not 500) saying the disk is full", what, err)
	default:
		t.Logf("%s on a full disk: %d %s", what, se.StatusCode, se.Message)
	}
}

// TestDataDirFull: with the data dir's file system full, a create fails
// with a clear error and leaves nothing half; the sandboxes made before
// run on; once there is room again, creates work.
func TestDataDirFull(t *testing.T) {
	ctx := context.Background()
	tmp, err := os.MkdirTemp(filepath.Dir(templates), "full")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o711)
	data := filepath.Join(tmp, "data")
	smallFS(t, data, "512m")
	e := newEnvIn(t, data, templates, "native")
	e.start("")
	before := e.sandbox(t)
	filler := filepath.Join(data, "filler")
	fill(t, filler, 0)
	_, err = e.client.Create(ctx, sdk.CreateOptions{Timeout: time.Minute})
	noRoom(t, "create", err)
	e.consistent(t, []string{before.ID}, onDisk(data))

	os.Remove(filler)
	sb, err := e.client.Create(ctx, sdk.CreateOptions{Timeout: time.Minute})
	if err != nil {
		t.Fatalf("create once there is room: %v", err)
	}
	e.works(t, sb.ID, false)
}

// TestTemplateStoreFull: with the template store's file system (nearly)
// full, a snapshot, a pause of the files and a template build fail with a
// clear error and leave nothing half — no snapshot or template listed,
// the sandbox running with its files; once there is room, they work.
func TestTemplateStoreFull(t *testing.T) {
	ctx := context.Background()
	tmp, err := os.MkdirTemp(filepath.Dir(templates), "store")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	os.Chmod(tmp, 0o711)
	store := filepath.Join(tmp, "templates")
	smallFS(t, store, "384m")
	// The base template: its files copied, its layer bind-mounted (it
	// takes none of the small file system).
	for _, d := range []string{"names", "builds", "layers"} {
		if err := os.MkdirAll(filepath.Join(store, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	layers, _ := os.ReadDir(filepath.Join(templates, "layers"))
	for _, f := range []string{"names", "builds"} {
		if out, err := exec.Command("sh", "-c", "cp -a "+filepath.Join(templates, f)+"/. "+filepath.Join(store, f)).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	for _, l := range layers {
		target := filepath.Join(store, "layers", l.Name())
		os.Mkdir(target, 0o700)
		if err := syscall.Mount(filepath.Join(templates, "layers", l.Name()), target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Unmount(target, syscall.MNT_DETACH) })
	}
	e := newEnv(t, "native")
	e.base = append(e.base, "HUTCH_TEMPLATES="+store)
	e.start("")
	sb := e.sandbox(t)
	filler := filepath.Join(store, "filler")
	fill(t, filler, 8<<20)

	_, err = e.client.CreateSnapshot(ctx, sb.ID, sdk.SnapshotOptions{Name: "full"})
	noRoom(t, "snapshot", err)
	_, err = e.client.Pause(ctx, sb.ID, sdk.PauseOptions{Filesystem: true})
	noRoom(t, "pause of the files", err)
	_, err = e.client.BuildTemplate(ctx, buildSpec("faults-full"))
	noRoom(t, "template build", err)
	if snaps, _, err := e.client.ListSnapshots(ctx, sdk.ListSnapshotsOptions{}); err != nil || len(snaps) != 0 {
		t.Errorf("snapshots listed after the failures: %+v, %v", snaps, err)
	}
	if ok, err := e.client.TemplateExists(ctx, "faults-full"); err != nil || ok {
		t.Errorf("the failed build's template exists: %v, %v", ok, err)
	}
	e.consistent(t, []string{sb.ID}, nil)

	os.Remove(filler)
	if _, err := e.client.CreateSnapshot(ctx, sb.ID, sdk.SnapshotOptions{Name: "full"}); err != nil {
		t.Errorf("snapshot once there is room: %v", err)
	}
	if _, err := e.client.BuildTemplate(ctx, buildSpec("faults-full")); err != nil {
		t.Errorf("build once there is room: %v", err)
	}
	if _, err := e.client.Pause(ctx, sb.ID, sdk.PauseOptions{Filesystem: true}); err != nil {
		t.Errorf("pause once there is room: %v", err)
	}
	e.works(t, sb.ID, true)
}
