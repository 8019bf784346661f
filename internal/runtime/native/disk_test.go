package native

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/loopfs"
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
	if err := loopfs.Check(); err != nil {
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
		t.Fatalf("blank images %v, want one for the one size used", blanks)
	}
	// A blank cut short (by a crash, say) is refused with a clear error by
	// the next runtime, not copied.
	if err := os.Truncate(blanks[0], size/2); err != nil {
		t.Fatal(err)
	}
	rt2, err := New(Options{DataDir: rt.DataDir(), Templates: rt.templates})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt2.diskLayer(filepath.Join(t.TempDir(), "disk.img"), size, 100000); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("diskLayer from a damaged blank: %v, want it refused as damaged", err)
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

// TestPersonalise: each copy of a blank file system gets its own UUID and
// directory hash seed, and stays a file system e2fsck finds clean.
func TestPersonalise(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "dumpe2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s (e2fsprogs): %v", tool, err)
		}
	}
	dir := t.TempDir()
	const size = 64 << 20
	blank := filepath.Join(dir, "blank.img")
	if err := makeBlankDisk(blank, size); err != nil {
		t.Fatal(err)
	}
	ids := func(image string) (uuid, seed string) {
		t.Helper()
		out, err := exec.Command("dumpe2fs", "-h", image).Output()
		if err != nil {
			t.Fatalf("dumpe2fs %s: %v", image, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "Filesystem UUID":
				uuid = strings.TrimSpace(v)
			case "Directory Hash Seed":
				seed = strings.TrimSpace(v)
			}
		}
		return uuid, seed
	}
	seen := map[string]string{}
	bu, bs := ids(blank)
	seen[bu], seen[bs] = "the blank's UUID", "the blank's seed"
	src, err := openBlank(blank, size)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range 2 {
		image := filepath.Join(dir, fmt.Sprintf("copy%d.img", i))
		f, err := os.Create(image)
		if err != nil {
			t.Fatal(err)
		}
		err = copySparse(f, src, size)
		if err == nil {
			err = personalise(f)
		}
		f.Close()
		if err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
		if out, err := exec.Command("e2fsck", "-fn", image).CombinedOutput(); err != nil {
			t.Errorf("e2fsck -fn copy %d: %v\n%s", i, err, out)
		}
		u, s := ids(image)
		for _, v := range []string{u, s} {
			if was, dup := seen[v]; dup || v == "" {
				t.Errorf("copy %d: %q is %s", i, v, was)
			}
		}
		seen[u], seen[s] = fmt.Sprintf("copy %d's UUID", i), fmt.Sprintf("copy %d's seed", i)
	}
	// A file system made without metadata_csum_seed is left alone.
	plain := filepath.Join(dir, "plain.img")
	os.WriteFile(plain, nil, 0o600)
	os.Truncate(plain, size)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", plain).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v\n%s", err, out)
	}
	f, err := os.OpenFile(plain, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := personalise(f); err == nil {
		t.Error("personalise changed a file system whose checksums the UUID seeds")
	}
}

// TestAttachLoopConcurrent: many creates attaching loop devices at once
// each get one (GET_FREE hands them all the same free device first).
func TestAttachLoopConcurrent(t *testing.T) {
	testenv.RequireRoot(t, "loop devices")
	if err := loopfs.Check(); err != nil {
		t.Skipf("no loop devices: %v", err)
	}
	const n = 64
	dir := t.TempDir()
	errs := make(chan error, n)
	devs := make(chan *os.File, n)
	for i := range n {
		go func() {
			f, err := os.Create(filepath.Join(dir, fmt.Sprint(i)))
			if err == nil {
				defer f.Close()
				err = f.Truncate(1 << 20)
			}
			var dev *os.File
			if err == nil {
				dev, err = loopfs.Attach(f, unix.LO_FLAGS_READ_ONLY)
			}
			errs <- err
			devs <- dev
		}()
	}
	names := map[string]bool{}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		if dev := <-devs; dev != nil {
			if names[dev.Name()] {
				t.Errorf("%s attached twice", dev.Name())
			}
			names[dev.Name()] = true
			defer dev.Close() // autoclear detaches it
		}
	}
}
