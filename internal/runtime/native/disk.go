package native

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// minDisk is the smallest writable layer worth having.
const minDisk = 64 << 20

// BytesPerInode sets a disk layer's inode count: one per 16 KiB (65,536
// for 1 GiB), so a sandbox that makes empty files runs out of inodes in its
// own file system, never the host's.
const BytesPerInode = 16 << 10

// CheckDisk reports whether this host can give sandboxes disk limits: a
// loop device and mkfs.ext4 (from e2fsprogs).
func CheckDisk() error {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return fmt.Errorf("mkfs.ext4 (from e2fsprogs): %w", err)
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop devices: %w", err)
	}
	return ctl.Close()
}

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

// diskLayer makes the sandbox's disk image and returns a detached mount of it.
func diskLayer(image string, size int64, hostID int) (int, error) {
	f, err := os.OpenFile(image, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return -1, fmt.Errorf("disk image: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return -1, fmt.Errorf("disk image: %w", err)
	}
	// No journal: a sandbox's layer does not outlive a host crash anyway.
	// root_owner makes the file system's root belong to the sandbox's root.
	owner := strconv.Itoa(hostID)
	mkfs := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-i", strconv.Itoa(BytesPerInode),
		"-E", "lazy_itable_init=1,nodiscard,root_owner="+owner+":"+owner, image)
	if out, err := mkfs.CombinedOutput(); err != nil {
		return -1, fmt.Errorf("mkfs.ext4 (from e2fsprogs): %v: %s", err, out)
	}
	loop, err := attachLoop(f, 0)
	if err != nil {
		return -1, err
	}
	defer loop.Close()
	// The inode tables mkfs left uninitialised are holes of the sparse
	// image and read as zeros already: without noinit_itable the kernel
	// would write them all out in the background (64 MiB for 4 GiB) on
	// the host's disk.
	return mountExt4(loop.Name(), []string{"noinit_itable"}, unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
}

// mountExt4 returns a detached mount of the ext4 file system on device
// dev, with the superblock flags given and the mount's attributes.
func mountExt4(dev string, flags []string, attrs uint64) (int, error) {
	fsfd, err := unix.Fsopen("ext4", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen ext4: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "source", dev); err != nil {
		return -1, fmt.Errorf("disk layer source: %w", err)
	}
	for _, f := range flags {
		if err := unix.FsconfigSetFlag(fsfd, f); err != nil {
			return -1, fmt.Errorf("disk layer option %s: %w", f, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("mount disk layer: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, int(attrs))
	if err != nil {
		return -1, fmt.Errorf("fsmount disk layer: %w", err)
	}
	return mfd, nil
}

// attachLoop binds backing to a free loop device that clears itself once
// nothing uses it any more; flags adds LO_FLAGS_* (read-only, say).
func attachLoop(backing *os.File, flags uint32) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	// Another process may take the device between GET_FREE and CONFIGURE.
	for try := 0; try < 16; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open loop device: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | flags
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure loop device: %w", err)
		}
	}
	return nil, errors.New("configure loop device: all candidates were busy")
}
