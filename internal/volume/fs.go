package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/loopfs"
)

// A volume with a size limit is a file system of its own: an ext4 image,
// DataDir/volumes/<id>.img (sparse: it takes on the host's disk what its
// files take), attached to a loop device and mounted at the volume's
// directory, in the host's mount namespace, nosuid and nodev. Filling it
// fails with ENOSPC in the sandboxes that mount it and in the content API,
// never filling the host's disk. The mount outlives hutch serve, as the
// sandboxes do; a server that starts mounts the images it finds unmounted
// (after a reboot of the host, say). The loop device clears itself when
// the file system is unmounted, at Delete.
//
// It has a journal, unlike a sandbox's disk layer: a volume's files are
// meant to outlive a crash of the host.

func (m *Manager) image(id string) string { return filepath.Join(m.dir, id+".img") }

// minFree is the space the data dir's file system keeps beyond a new
// volume's size.
const minFree = 256 << 20

// checkRoom refuses a new volume that could not be filled: its size (and
// minFree) must be free on the data dir's file system. Volumes are sparse
// and may together be promised more than the disk holds, as sandboxes'
// disks are; this and the cap per key bound how much.
func (m *Manager) checkRoom() error {
	var st unix.Statfs_t
	if err := unix.Statfs(m.dir, &st); err != nil {
		return nil
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < m.size+minFree {
		return fmt.Errorf("the data dir's disk has %d MiB free, less than a volume's %d MiB and %d MiB to spare: %w", free>>20, m.size>>20, minFree>>20, errdefs.ErrResourceExhausted)
	}
	return nil
}

// makeImage makes volume id's file system, of m.size bytes, and mounts it
// at dir (which exists, empty).
func (m *Manager) makeImage(id, dir string) error {
	img := m.image(id)
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(m.size)
	f.Close()
	if err != nil {
		os.Remove(img)
		return err
	}
	// -m 0: no blocks reserved for root, who is no one in particular here.
	// lazy_journal_init: the journal of a new sparse image is zeros
	// already; writing it would take 64 MiB of a 10 GiB volume's disk
	// before anything is in it.
	mkfs := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=0:0", img)
	if out, err := mkfs.CombinedOutput(); err != nil {
		os.Remove(img)
		return fmt.Errorf("mkfs.ext4: %v: %s", err, out)
	}
	if err := m.mountImage(id, dir); err != nil {
		os.Remove(img)
		return err
	}
	// A file system's root starts with lost+found, which is e2fsck's, not
	// the volume's users'.
	os.Remove(filepath.Join(dir, "lost+found"))
	return nil
}

// mountImage mounts volume id's image at dir.
func (m *Manager) mountImage(id, dir string) error {
	f, err := os.OpenFile(m.image(id), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	dev, err := loopfs.Attach(f, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	mfd, err := loopfs.MountExt4(dev.Name(), nil, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount volume %s: %w", id, err)
	}
	return nil
}

// mounted reports whether a file system other than its parent's is
// mounted at dir.
func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// mountAll mounts the image of every volume that has one and is not
// mounted: after a reboot of the host, or the first start on a data dir
// carried over from another host.
func (m *Manager) mountAll(ctx context.Context) {
	vols, err := m.store.ListVolumes(ctx, "")
	if err != nil {
		m.logger.Error("volume: list volumes to mount", "err", err)
		return
	}
	for _, v := range vols {
		dir := filepath.Join(m.dir, v.ID)
		if _, err := os.Stat(m.image(v.ID)); err != nil || mounted(dir) {
			continue
		}
		if err := m.mountImage(v.ID, dir); err != nil {
			m.logger.Error("volume: mount", "volume", v.ID, "err", err)
		}
	}
}

// ensureMounted mounts volume id's image at its directory if it has one
// and it is not mounted: a volume made with a size limit is never used as
// a bare directory of the host's file system.
func (m *Manager) ensureMounted(id string) error {
	dir := filepath.Join(m.dir, id)
	if _, err := os.Stat(m.image(id)); err != nil || mounted(dir) {
		return nil
	}
	if err := m.mountImage(id, dir); err != nil {
		return fmt.Errorf("volume %s is not mounted: %w", id, err)
	}
	return nil
}

// unmount unmounts volume dir, if it is mounted, and removes its image.
func (m *Manager) unmount(id, dir string) error {
	if mounted(dir) {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount volume %s: %w", id, err)
		}
	}
	if err := os.Remove(m.image(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
