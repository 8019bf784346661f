package template

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// TestExtractKeepsTheInodeFloor: copying files into a build (Extract) stops
// at the store's floor of free inodes, as unpack does, however few bytes
// the files take (review 18: a COPY of 130,000 empty files went 60,000
// inodes past the floor).
func TestExtractKeepsTheInodeFloor(t *testing.T) {
	testenv.RequireRoot(t, "a tmpfs with few inodes")
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// 300 MiB (over the byte floor) and 80,000 inodes: 14,000 over theirs.
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=300m,nr_inodes=80000"); err != nil {
		t.Skipf("no tmpfs: %v", err)
	}
	defer unix.Unmount(dir, unix.MNT_DETACH)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := range 30000 {
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("f%d", i), Typeflag: tar.TypeReg, Mode: 0o644})
	}
	tw.Close()
	err := Extract(context.Background(), dir, &b)
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("extracting 30,000 empty files with 14,000 inodes to spare = %v; want resource exhausted", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Ffree < 60000 {
		t.Errorf("free inodes after: %d, %v; the floor is %d", st.Ffree, err, minFreeInodes)
	}
}
