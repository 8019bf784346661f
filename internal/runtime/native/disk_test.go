package native

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testenv"
)

func TestCopySparse(t *testing.T) {
	const block = 64 << 10
	tests := []struct {
		name string
		size int64
		data []int64 // offsets of block-sized runs of data; the rest holes
	}{
		{"all holes", 16 * block, nil},
		{"data at start", 16 * block, []int64{0}},
		{"data at end", 16 * block, []int64{15 * block}},
		{"scattered", 64 * block, []int64{0, 3 * block, 4 * block, 40 * block, 63 * block}},
		{"tail hole not block aligned", 16*block + 100, []int64{2 * block}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src, err := os.Create(filepath.Join(dir, "src"))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if err := src.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			for i, off := range tc.data {
				if _, err := src.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, block), off); err != nil {
					t.Fatal(err)
				}
			}
			dst, err := os.Create(filepath.Join(dir, "dst"))
			if err != nil {
				t.Fatal(err)
			}
			defer dst.Close()
			if err := copySparse(dst, src, tc.size); err != nil {
				t.Fatalf("copySparse: %v", err)
			}
			want, _ := os.ReadFile(src.Name())
			got, _ := os.ReadFile(dst.Name())
			if !bytes.Equal(got, want) {
				t.Fatalf("copy differs from the source (%d bytes, want %d)", len(got), len(want))
			}
			var st unix.Stat_t
			if err := unix.Fstat(int(dst.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			// Holes stay holes: what is allocated is the data (and at most
			// a block of metadata per run), not the file's size.
			if used, most := st.Blocks*512, int64(len(tc.data)+1)*block; used > most {
				t.Errorf("copy uses %d bytes on disk, want at most %d (size %d): holes were filled", used, most, tc.size)
			}
		})
	}
}

// TestDiskLayerFromBlank: sandboxes' disk images are copies of one blank
// file system per size, each with its root given to its sandbox's root.
func TestDiskLayerFromBlank(t *testing.T) {
	testenv.RequireRoot(t, "loop devices and mounts")
	if err := CheckDisk(); err != nil {
		t.Skipf("no disk limits on this host: %v", err)
	}
	rt := testRuntime(t)
	const size = 64 << 20
	for i, owner := range []int{100000, 200000} {
		image := filepath.Join(t.TempDir(), "disk.img")
		mfd, err := rt.diskLayer(image, size, owner)
		if err != nil {
			t.Fatalf("diskLayer %d: %v", i, err)
		}
		var st unix.Stat_t
		err = unix.Fstatat(mfd, "", &st, unix.AT_EMPTY_PATH)
		unix.Close(mfd)
		if err != nil {
			t.Fatal(err)
		}
		if int(st.Uid) != owner || int(st.Gid) != owner {
			t.Errorf("disk %d: root owned by %d:%d, want %d:%d", i, st.Uid, st.Gid, owner, owner)
		}
		fi, err := os.Stat(image)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != size {
			t.Errorf("disk %d: image of %d bytes, want %d", i, fi.Size(), size)
		}
	}
	blanks, _ := filepath.Glob(filepath.Join(rt.DataDir(), "disks", "blank-*.img"))
	if len(blanks) != 1 {
		t.Errorf("blank images %v, want one for the one size used", blanks)
	}
}

// TestFavorDynMods turns favordynmods off on the host's cgroup2 mount,
// then lets FavorDynMods turn it back on, keeping the mount's other
// options.
func TestFavorDynMods(t *testing.T) {
	testenv.RequireRoot(t, "reconfigures the host's cgroup2 mount")
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil || len(mounts) == 0 {
		t.Skipf("no cgroup2 mount (%v)", err)
	}
	m := mounts[0]
	before := strings.Split(m.VFSOptions, ",")
	others := slices.DeleteFunc(slices.Clone(before), func(o string) bool { return o == "favordynmods" || o == "rw" || o == "ro" })
	reconfigure := func(flags []string) {
		t.Helper()
		fd, err := unix.Fspick(unix.AT_FDCWD, m.Mountpoint, unix.FSPICK_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		for _, f := range flags {
			if err := unix.FsconfigSetFlag(fd, f); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.FsconfigReconfigure(fd); err != nil {
			t.Fatal(err)
		}
	}
	options := func() []string {
		t.Helper()
		ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(m.Mountpoint))
		if err != nil || len(ms) == 0 {
			t.Fatalf("%s: %v", m.Mountpoint, err)
		}
		return strings.Split(ms[len(ms)-1].VFSOptions, ",")
	}
	// Leave the host as it was.
	t.Cleanup(func() {
		reconfigure(slices.DeleteFunc(slices.Clone(before), func(o string) bool { return o == "rw" || o == "ro" }))
	})

	reconfigure(others)
	if slices.Contains(options(), "favordynmods") {
		t.Fatal("favordynmods still on after a reconfiguration without it")
	}
	on, err := FavorDynMods()
	if err != nil || !on {
		t.Fatalf("FavorDynMods = %v, %v; want true, nil", on, err)
	}
	after := options()
	if !slices.Contains(after, "favordynmods") {
		t.Errorf("options %v after FavorDynMods, want favordynmods among them", after)
	}
	for _, o := range others {
		if !slices.Contains(after, o) {
			t.Errorf("option %s lost (options %v, were %v)", o, after, before)
		}
	}
	// Already on: nothing to do, still on.
	if on, err := FavorDynMods(); err != nil || !on {
		t.Errorf("second FavorDynMods = %v, %v; want true, nil", on, err)
	}
}
