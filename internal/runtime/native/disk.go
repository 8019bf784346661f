package native

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/loopfs"
)

// minDisk is the smallest writable layer worth having.
const minDisk = 64 << 20

// BytesPerInode sets a disk layer's inode count: one per 16 KiB (65,536
// for 1 GiB), so a sandbox that makes empty files runs out of inodes in its
// own file system, never the host's.
const BytesPerInode = 16 << 10

// A sandbox with a disk limit gets its writable layer on a file system of
// its own: a sparse ext4 image in its directory, attached to a loop device
// and mounted (detached) by the parent, then attached by the init inside
// its mount namespace as the overlay's upper layer. Filling it fails with
// ENOSPC inside the sandbox and can never fill the host's disk. This works
// on every host, unlike project quotas, which need a kernel with quota
// support and a file system mounted with prjquota (neither is here).
//
// The loop device is set to clear itself when the file system is unmounted,
// which happens when the sandbox's mount namespace dies with its init.

// diskLayer makes the sandbox's disk image and returns a detached mount of
// it. The image is a sparse copy of a blank file system of its size that
// mkfs.ext4 made once (see goldenDisk): copying its ~170 KiB of metadata
// costs well under a millisecond, where running mkfs.ext4 for every sandbox
// cost 7-10 ms and a fork of the whole server (bench/README.md, issue 16).
// Each copy then gets a UUID and a directory hash seed of its own
// (personalise): a shared seed would let every sandbox compute the
// directory hashes of every other's file system (review 10, F3).
// DiskLayer is diskLayer for another backend: a detached mount of a new
// file system of size bytes in image, its root owned by hostID.
func (rt *Runtime) DiskLayer(image string, size int64, hostID int) (int, error) {
	return rt.diskLayer(image, size, hostID)
}

func (rt *Runtime) diskLayer(image string, size int64, hostID int) (int, error) {
	golden, err := rt.goldenDisk(size)
	if err != nil {
		return -1, err
	}
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return -1, fmt.Errorf("disk image: %w", err)
	}
	defer f.Close()
	if err := copySparse(f, golden, size); err != nil {
		return -1, fmt.Errorf("disk image: %w", err)
	}
	if err := personalise(f); err != nil {
		return -1, fmt.Errorf("disk image: %w", err)
	}
	loop, err := loopfs.Attach(f, 0)
	if err != nil {
		return -1, err
	}
	defer loop.Close()
	// The inode tables mkfs left uninitialised are holes of the sparse
	// image and read as zeros already: without noinit_itable the kernel
	// would write them all out in the background (64 MiB for 4 GiB) on
	// the host's disk.
	mfd, err := loopfs.MountExt4(loop.Name(), []string{"noinit_itable"}, unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return -1, err
	}
	// The blank file system's root belongs to real root; the sandbox's root
	// gets it (what mkfs.ext4's root_owner did).
	if err := unix.Fchownat(mfd, "", hostID, hostID, unix.AT_EMPTY_PATH); err != nil {
		unix.Close(mfd)
		return -1, fmt.Errorf("disk layer owner: %w", err)
	}
	return mfd, nil
}

// goldenDisk returns a blank ext4 image of size bytes, made by mkfs.ext4
// the first time a sandbox of that disk size is created and kept, read
// only, in the data dir's disks directory for every later one (of this
// process and of others sharing the data dir: it is renamed into place
// whole).
func (rt *Runtime) goldenDisk(size int64) (*os.File, error) {
	rt.diskMu.Lock()
	defer rt.diskMu.Unlock()
	if f := rt.disks[size]; f != nil {
		return f, nil
	}
	dir := filepath.Join(rt.dataDir, "disks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk images: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("blank-v%d-%d-%d.img", blankFormat, size, BytesPerInode))
	f, err := openBlank(path, size)
	if errors.Is(err, os.ErrNotExist) {
		if err := makeBlankDisk(path, size); err != nil {
			return nil, err
		}
		f, err = openBlank(path, size)
	}
	if err != nil {
		return nil, fmt.Errorf("disk image: %w", err)
	}
	if rt.disks == nil {
		rt.disks = map[int64]*os.File{}
	}
	rt.disks[size] = f
	return f, nil
}

// blankFormat versions the blank images' mkfs options: a blank made with
// other options is not used (nor removed: another hutch may use it).
const blankFormat = 2

// openBlank opens the blank image at path, checking that it is whole (a
// crash may have cut one short; makeBlankDisk syncs it before renaming
// it into place, and this catches what was there before).
func openBlank(path string, size int64) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	sb := make([]byte, superblockSize)
	fi, err := f.Stat()
	if err == nil && fi.Size() == size {
		_, err = f.ReadAt(sb, superblockOffset)
	}
	if err != nil || fi.Size() != size || binary.LittleEndian.Uint16(sb[sbMagic:]) != ext4Magic {
		f.Close()
		return nil, fmt.Errorf("blank disk image %s is damaged (remove it: the next sandbox makes a new one)", filepath.Base(path))
	}
	return f, nil
}

// makeBlankDisk runs mkfs.ext4 on a new sparse file of size bytes and
// renames it to path.
func makeBlankDisk(path string, size int64) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".blank-*")
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Truncate(size)
	tmp.Close()
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	// No journal: a sandbox's layer does not outlive a host crash anyway.
	// metadata_csum_seed: the checksums of the file system's metadata are
	// seeded by a value of their own, not by the UUID, so that each copy
	// can be given a UUID without rewriting them (personalise).
	mkfs := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode,metadata_csum_seed", "-i", strconv.Itoa(BytesPerInode),
		"-E", "lazy_itable_init=1,nodiscard", tmp.Name())
	if out, err := mkfs.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 (from e2fsprogs): %v: %s", err, out)
	}
	if err := os.Chmod(tmp.Name(), 0o400); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if err := syncFile(tmp.Name()); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	return syncFile(filepath.Dir(path))
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// The ext4 superblock fields personalise writes (Linux's struct
// ext4_super_block, Documentation/filesystems/ext4/super.rst).
const (
	superblockOffset  = 1024
	superblockSize    = 1024
	sbMagic           = 0x38  // __le16 s_magic
	sbFeatureIncompat = 0x60  // __le32 s_feature_incompat
	sbUUID            = 0x68  // __u8 s_uuid[16]
	sbHashSeed        = 0xEC  // __le32 s_hash_seed[4]
	sbChecksum        = 0x3FC // __le32 s_checksum: crc32c of the bytes before it
	ext4Magic         = 0xEF53
	incompatCsumSeed  = 0x2000 // EXT4_FEATURE_INCOMPAT_CSUM_SEED
)

// personalise gives the ext4 file system in f a random UUID and directory
// hash seed, and the superblock a new checksum. Written by hand: no
// library edits an ext4 superblock, and tune2fs would cost the fork this
// copying avoids. It is safe only on a file system made with
// metadata_csum_seed (checked), whose other checksums do not depend on the
// UUID, and with no indexed directory yet (a blank one), whose hashes
// would depend on the seed.
func personalise(f *os.File) error {
	sb := make([]byte, superblockSize)
	if _, err := f.ReadAt(sb, superblockOffset); err != nil {
		return fmt.Errorf("read superblock: %w", err)
	}
	if binary.LittleEndian.Uint16(sb[sbMagic:]) != ext4Magic {
		return errors.New("not an ext4 file system")
	}
	if binary.LittleEndian.Uint32(sb[sbFeatureIncompat:])&incompatCsumSeed == 0 {
		return errors.New("file system made without metadata_csum_seed")
	}
	if _, err := rand.Read(sb[sbUUID : sbUUID+16]); err != nil {
		return err
	}
	sb[sbUUID+6] = sb[sbUUID+6]&0x0f | 0x40 // a version 4 UUID, as mkfs makes
	sb[sbUUID+8] = sb[sbUUID+8]&0x3f | 0x80
	if _, err := rand.Read(sb[sbHashSeed : sbHashSeed+16]); err != nil {
		return err
	}
	// Linux's crc32c(~0, sb, offset), without the final inversion that Go's
	// Checksum applies.
	sum := ^crc32.Checksum(sb[:sbChecksum], crc32.MakeTable(crc32.Castagnoli))
	binary.LittleEndian.PutUint32(sb[sbChecksum:], sum)
	if _, err := f.WriteAt(sb, superblockOffset); err != nil {
		return fmt.Errorf("write superblock: %w", err)
	}
	return nil
}

// copySparse makes dst, an empty file, a copy of src of size bytes in
// which src's holes stay holes: only src's data is copied, in the kernel
// (copy_file_range).
func copySparse(dst, src *os.File, size int64) error {
	if err := dst.Truncate(size); err != nil {
		return err
	}
	sfd, dfd := int(src.Fd()), int(dst.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(sfd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only holes from off to the end
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(sfd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for roff, woff := data, data; roff < hole; {
			n, err := unix.CopyFileRange(sfd, &roff, dfd, &woff, int(hole-roff), 0)
			if err != nil {
				return fmt.Errorf("copy_file_range: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("copy_file_range: %w", io.ErrUnexpectedEOF)
			}
		}
		off = hole
	}
	return nil
}
