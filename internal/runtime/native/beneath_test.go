package native

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// TestDirBeneath: the directories a sandbox's start mounts on and writes
// into are found without following a link of the root's, whatever it
// points to (review 27, F2, F4, F7); missing ones are made.
func TestDirBeneath(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	for _, l := range [][2]string{{"proc", outside}, {"sys", "../../" + filepath.Base(outside)}, {"etcfile", ""}} {
		if l[1] == "" {
			os.WriteFile(filepath.Join(root, l[0]), nil, 0o644)
			continue
		}
		if err := os.Symlink(l[1], filepath.Join(root, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	os.Symlink(outside, filepath.Join(root, "dev", "pts"))
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"proc", false}, {"sys", false}, {"etcfile", false}, {"dev/pts", false}, {"/proc/x", false},
		{"dev", true}, {"dev/shm", true}, {"/mnt/a/b", true},
	} {
		fd, err := dirBeneath(root, tc.target)
		if err == nil {
			unix.Close(fd)
		}
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("dirBeneath(%q): %v, want ok %v (or ErrInvalidArgument)", tc.target, err, tc.ok)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("something was made outside the root: %v", ents)
	}
	// writeEtc through a linked /etc writes nothing outside.
	os.Symlink(outside, filepath.Join(root, "etc"))
	if err := writeEtc(root, "h"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("writeEtc through a linked /etc: %v", err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("writeEtc wrote outside the root: %v", ents)
	}
}
