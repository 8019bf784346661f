package sdk_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestCheckpointBounds: on gvisor a pause that keeps memory writes the
// sandbox's memory and files into a checkpoint in the data dir and frees
// its slot; without bounds one key filled the disk with create, fill,
// pause loops (review 23, F6). A key may have as many sandboxes paused
// into a checkpoint as paused with their memory natively (the running
// cap), and a checkpoint is written only while the data dir's disk has
// room for it above the floor the template store keeps (256 MiB). A
// refused pause answers 429 with why, leaves no checkpoint, and the
// sandbox runs on with its files.
func TestCheckpointBounds(t *testing.T) {
	hutchtest.RequireRunsc(t)
	ctx := t.Context()
	refused := func(t *testing.T, e *env, sbx *sdk.Sandbox, err error, why string) {
		t.Helper()
		if !errors.Is(err, sdk.ErrRateLimit) || !strings.Contains(err.Error(), why) {
			t.Errorf("Pause = %v; want a 429 saying %q", err, why)
		}
		info, err := e.client.GetInfo(ctx, sbx.ID)
		if err != nil || info.State != sdk.StateRunning {
			t.Errorf("after the refused pause GetInfo = %+v, %v; want running", info, err)
		}
		if got := run(t, sbx, "cat "+home+"/f", nil).Stdout; got != "kept\n" {
			t.Errorf("after the refused pause the sandbox has %q", got)
		}
		ents, _ := os.ReadDir(filepath.Join(e.srv.DataDir, "checkpoints"))
		for _, d := range ents {
			if strings.HasSuffix(d.Name(), sbx.ID) {
				t.Errorf("a refused pause left %s", d.Name())
			}
		}
	}

	t.Run("per key", func(t *testing.T) {
		e := startServer(t, "--runtime", "gvisor", "--max-sandboxes-per-key", "1")
		a := e.sandbox(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
		if ok, err := a.Pause(ctx); err != nil || !ok {
			t.Fatalf("the first Pause = %v, %v", ok, err)
		}
		b := e.sandbox(t, sdk.CreateOptions{Timeout: 5 * time.Minute}) // a's slot is free
		run(t, b, "echo kept > "+home+"/f", nil)
		_, err := b.Pause(ctx)
		refused(t, e, b, err, "paused with their memory")
		// Killing the paused one makes room for the next.
		must(t, e.client.Kill(ctx, a.ID), "Kill")
		if ok, err := b.Pause(ctx); err != nil || !ok {
			t.Errorf("Pause after the kill = %v, %v", ok, err)
		}
	})

	t.Run("disk room", func(t *testing.T) {
		// A data dir of 700 MiB: a sandbox that wrote 300 MiB leaves about
		// 390, and its checkpoint (300 MiB of files and its memory) would
		// leave less than the floor.
		tmp := t.TempDir()
		os.Chmod(filepath.Dir(tmp), 0o711)
		data := filepath.Join(tmp, "data")
		if err := os.Mkdir(data, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=700m,mode=0711"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(data, unix.MNT_DETACH) })
		srv := hutchtest.StartServeIn(t, hutchBin.Path(t), data, "--warm", "0", "--runtime", "gvisor")
		cfg := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
		c, err := sdk.NewClient(cfg)
		must(t, err, "NewClient")
		e := &env{srv: srv, cfg: cfg, client: c}
		sbx := e.sandbox(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
		run(t, sbx, "head -c 300M /dev/urandom > "+home+"/big && sync && echo kept > "+home+"/f", nil)
		// On the data dir's disk, not only in the host's page cache: the
		// sandbox's disk image is a file there.
		unix.Sync()
		var st unix.Statfs_t
		unix.Statfs(data, &st)
		t.Logf("the data dir has %d MiB free", int64(st.Bavail)*st.Bsize>>20)
		_, err = sbx.Pause(ctx)
		refused(t, e, sbx, err, "MiB to spare")
		// A snapshot of it is a checkpoint too.
		_, err = sbx.CreateSnapshot(ctx, sdk.SnapshotOptions{Name: unique("cp-room")})
		refused(t, e, sbx, err, "MiB to spare")
	})
}
