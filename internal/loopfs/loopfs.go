// Package loopfs mounts ext4 file systems kept in image files through
// loop devices: the sandboxes' disk layers and the volumes, each a file
// system of its own so that filling it fails with ENOSPC inside and never
// fills the host's disk. Written by hand over golang.org/x/sys/unix: no
// well-kept library configures loop devices (LOOP_CONFIGURE) and mounts
// with the new mount API (fsopen, fsmount).
package loopfs

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Check reports whether this host can make such file systems: mkfs.ext4
// (from e2fsprogs) and loop devices. The sandboxes' disk limits and the
// volumes' size limits both need it.
func Check() error {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		return fmt.Errorf("mkfs.ext4 (from e2fsprogs): %w", err)
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("loop devices: %w", err)
	}
	return ctl.Close()
}

// MountExt4 returns a detached mount of the ext4 file system on device
// dev, with the superblock flags given and the mount's attributes.
func MountExt4(dev string, flags []string, attrs uint64) (int, error) {
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

// Attach binds backing to a free loop device that clears itself once
// nothing uses it any more; flags adds LO_FLAGS_* (read-only, say).
func Attach(backing *os.File, flags uint32) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	// Another create (of this process or another) may take the device
	// between GET_FREE and CONFIGURE: GET_FREE hands the same free device
	// to every caller until one has configured it. With 50 creates at once
	// 16 immediate tries were not enough for some (bench/create.sh); the
	// tries now back off for a random while, for up to attachTime.
	deadline := time.Now().Add(attachTime)
	for {
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
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("configure loop device: every free one was taken by others for %v", attachTime)
		}
		time.Sleep(time.Duration(mrand.Int64N(int64(2 * time.Millisecond))))
	}
}

// attachTime bounds Attach's tries.
const attachTime = 5 * time.Second
