package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/loopfs"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// TestSizeLimit: a volume made with a size limit is a file system of its
// own: writes past its size fail with ENOSPC and leave the host's disk
// alone; it is mounted again by a new manager once unmounted (a reboot);
// Delete unmounts it and removes its image.
func TestSizeLimit(t *testing.T) {
	testenv.RequireRoot(t, "loop devices and mounts")
	if err := loopfs.Check(); err != nil {
		t.Skipf("no size limits on this host: %v", err)
	}
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(data, "hutch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := New(st, data, 32<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Create(ctx, "", "small")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(v.Dir, unix.MNT_DETACH) })
	if !mounted(v.Dir) {
		t.Fatal("the volume is not a file system of its own")
	}
	if ents, _ := os.ReadDir(v.Dir); len(ents) != 0 {
		t.Errorf("a new volume holds %v", ents)
	}
	if fi, err := os.Stat(v.Dir); err != nil || fi.Mode().Perm() != 0o777 || fi.Mode()&os.ModeSticky == 0 {
		t.Errorf("the volume's root: %v, %v; want 1777", fi.Mode(), err)
	}
	c, err := m.Open(ctx, v.ID, v.Token)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.WriteFile("/big", io.LimitReader(zeros{}, 64<<20), Owner{})
	c.Close()
	if !errors.Is(err, syscall.ENOSPC) && !strings.Contains(strings.ToLower(err.Error()), "no space") {
		t.Errorf("writing 64 MiB into a 32 MiB volume = %v; want ENOSPC", err)
	}

	// A reboot: unmounted; a new manager mounts it again, files and all.
	os.WriteFile(filepath.Join(v.Dir, "kept"), []byte("kept"), 0o644)
	if err := unix.Unmount(v.Dir, 0); err != nil {
		t.Fatal(err)
	}
	m2, err := New(st, data, 32<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(v.Dir, "kept")); err != nil || string(b) != "kept" {
		t.Errorf("after mounting again: %q, %v", b, err)
	}
	if err := m2.Delete(ctx, "", v.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m2.image(v.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the image after Delete: %v", err)
	}
	if _, err := os.Stat(v.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory after Delete: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestVolumeCosts: a key has at most its cap of volumes (review 17: 100
// volumes in 2.6 s), and an empty volume takes little of the host's disk
// whatever its size (it took 69 MB for a 10 GiB one with its journal
// written out).
func TestVolumeCosts(t *testing.T) {
	testenv.RequireRoot(t, "loop devices and mounts")
	if err := loopfs.Check(); err != nil {
		t.Skipf("no size limits on this host: %v", err)
	}
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(data, "hutch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := NewWithCap(st, data, 10<<30, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		v, err := m.Create(ctx, "", name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Delete(context.Background(), "", v.ID) })
		var st unix.Stat_t
		if err := unix.Stat(m.image(v.ID), &st); err != nil {
			t.Fatal(err)
		}
		if used := st.Blocks * 512; used > 16<<20 {
			t.Errorf("an empty 10 GiB volume takes %d MiB of the host's disk", used>>20)
		}
	}
	var le *LimitError
	if _, err := m.Create(ctx, "", "c"); !errors.As(err, &le) || le.Limit != 2 {
		t.Errorf("a third volume past a cap of 2 = %v; want a LimitError", err)
	}

	// Creates at once do not all pass the cap (review 18: 12 of 12 did).
	data2 := t.TempDir()
	st2, err := store.Open(ctx, filepath.Join(data2, "hutch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	other, err := NewWithCap(st2, data2, 64<<20, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 12)
	for i := range 12 {
		go func() {
			v, err := other.Create(ctx, "", fmt.Sprintf("race%d", i))
			if err == nil {
				t.Cleanup(func() { other.Delete(context.Background(), "", v.ID) })
			}
			errs <- err
		}()
	}
	made := 0
	for range 12 {
		if err := <-errs; err == nil {
			made++
		} else if !errors.As(err, &le) {
			t.Errorf("a create at once: %v", err)
		}
	}
	if made != 3 {
		t.Errorf("%d of 12 creates at once were made under a cap of 3", made)
	}
}
