package remotecli

import (
	"crypto/md5"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// testCpSparse copies sparse files out of the sandbox: their holes stay
// holes here, and a copy larger than the destination's free space is
// refused unless --ignore-free-space, when a full disk leaves nothing
// behind.
func testCpSparse(t *testing.T, f *fixture, id string) {
	const (
		holes = "/tmp/sparse/holes" // 2 GiB, a few bytes of data
		full  = "/tmp/full/big"     // 80 MiB of data
		size  = 2 << 30
	)
	// The data sits at the start, in the middle and near the end, after
	// which there is a trailing hole.
	f.ok(t, "exec", id, "--", "bash", "-c", `set -e
mkdir -p /tmp/sparse /tmp/full
truncate -s 2G `+holes+`
for at in 0 1073741827 2147000000; do printf 'data at %d' $at | dd of=`+holes+` bs=1 seek=$at conv=notrunc status=none; done
head -c 80M /dev/urandom >`+full)
	want := strings.Fields(f.ok(t, "exec", id, "--", "md5sum", holes))[0]

	// sparseCopy checks that p is the sandbox's file, with holes.
	sparseCopy := func(t *testing.T, p string) {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		alloc := fi.Sys().(*syscall.Stat_t).Blocks * 512
		if fi.Size() != size || alloc > 4<<20 {
			t.Errorf("%s: %d bytes, %d of them allocated; want %d, under 4 MiB", p, fi.Size(), alloc, int64(size))
		}
		if got := md5File(t, p); got != want {
			t.Errorf("%s: md5 %s, want the sandbox's %s", p, got, want)
		}
	}
	cp := func(t *testing.T, args ...string) {
		t.Helper()
		r := f.hutch(t, "", append([]string{"cp"}, args...)...)
		if r.Code != 0 || r.Stdout != "" || r.Stderr != "" {
			t.Fatalf("cp %s: %s", strings.Join(args, " "), r)
		}
	}
	// empty checks that a failed copy left nothing in dir.
	empty := func(t *testing.T, dir string) {
		t.Helper()
		names, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			t.Errorf("%s was left behind", filepath.Join(dir, n.Name()))
		}
	}

	t.Run("a file keeps its holes", func(t *testing.T) {
		dir := t.TempDir()
		cp(t, id+":"+holes, dir)
		sparseCopy(t, filepath.Join(dir, "holes"))
	})

	t.Run("a directory keeps its files' holes", func(t *testing.T) {
		dir := t.TempDir()
		cp(t, id+":/tmp/sparse", filepath.Join(dir, "tree"))
		sparseCopy(t, filepath.Join(dir, "tree", "holes"))
	})

	// small is a 64 MiB file system: the 2 GiB file seems too large for it.
	small := t.TempDir()
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=64m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(small, unix.MNT_DETACH) })

	t.Run("refused past the free space", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"a sparse file", []string{id + ":" + holes, small}, id + ":" + holes + " is 2.0 GiB, more than the 64.0 MiB free in " + small},
			{"a file to a new name", []string{id + ":" + full, filepath.Join(small, "big")}, id + ":" + full + " is 80.0 MiB, more than the 64.0 MiB free in " + small},
			{"a directory", []string{id + ":/tmp/sparse", filepath.Join(small, "tree")}, id + ":/tmp/sparse is 2.0 GiB, more than the 64.0 MiB free in " + small},
			{"a directory's contents", []string{id + ":/tmp/sparse/.", filepath.Join(small, "tree")}, id + ":/tmp/sparse/. is 2.0 GiB, more than the 64.0 MiB free in " + small + " ("},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := f.hutch(t, "", append([]string{"cp"}, tc.args...)...)
				wantFailure(t, r, 1, tc.want)
				if !strings.Contains(r.Stderr, "--ignore-free-space") {
					t.Errorf("stderr %q does not name --ignore-free-space", r.Stderr)
				}
				empty(t, small)
			})
		}
	})

	t.Run("--ignore-free-space", func(t *testing.T) {
		cp(t, "--ignore-free-space", id+":"+holes, small)
		sparseCopy(t, filepath.Join(small, "holes"))
		os.Remove(filepath.Join(small, "holes"))
		cp(t, "--ignore-free-space", id+":/tmp/sparse", filepath.Join(small, "tree"))
		sparseCopy(t, filepath.Join(small, "tree", "holes"))
		os.RemoveAll(filepath.Join(small, "tree"))
	})

	t.Run("--ignore-free-space and a disk that fills", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
		}{
			{"a file", []string{id + ":" + full, small}},
			{"a file in a directory", []string{id + ":/tmp/full/.", small}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := f.hutch(t, "", append([]string{"cp", "--ignore-free-space"}, tc.args...)...)
				wantFailure(t, r, 1, "no space left in "+small+" for "+id+":/tmp/full")
				empty(t, small)
			})
		}
	})
}

// md5File is the hex MD5 of the file at p.
func md5File(t *testing.T, p string) string {
	t.Helper()
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	h := md5.New()
	if _, err := io.Copy(h, fh); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
