package native

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Sandboxes' init processes run this same binary. Nothing inside a sandbox
// may ever reach the hutch binary on disk through /proc/<pid>/exe and
// rewrite it (the CVE-2019-5736 class), so the init is never executed from
// the binary's own path but from one of:
//
//  1. readonlySelf: the binary seen through a private, read-only overlayfs
//     mount that is never attached anywhere (runc 1.2's approach). Writes
//     through it fail with EROFS whoever tries, no path leads to it, and it
//     shares the page cache with the binary, so it costs almost nothing.
//  2. sealedSelf: a sealed memfd copy, where overlayfs cannot be used. It
//     costs a copy of the binary (a few ms) once per Hutch process.

// selfExe returns a file, opened O_PATH or sealed, that the init is
// executed from. The caller keeps it open for as long as it starts inits.
func selfExe(emptyDir string) (*os.File, error) {
	if f, err := readonlySelf(emptyDir); err == nil {
		return f, nil
	}
	return sealedSelf()
}

func readonlySelf(emptyDir string) (*os.File, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(exe, " (deleted)") {
		return nil, fmt.Errorf("own binary was replaced on disk")
	}
	dir, base := filepath.Split(exe)
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	// Two lower layers and no upper make a read-only overlay.
	for _, l := range []string{dir, emptyDir} {
		if err := unix.FsconfigSetString(fsfd, "lowerdir+", l); err != nil {
			return nil, fmt.Errorf("overlay lowerdir %s: %w", l, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("create overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID)
	if err != nil {
		return nil, fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mfd)
	fd, err := unix.Openat(mfd, base, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open own binary through overlay: %w", err)
	}
	f := os.NewFile(uintptr(fd), "hutch (read-only)")
	// Make sure it is the running binary, not a newer one installed since.
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat("/proc/self/exe", &b) != nil || a.Ino != b.Ino || a.Size != b.Size || a.Mtim != b.Mtim {
		f.Close()
		return nil, fmt.Errorf("own binary changed on disk")
	}
	return f, nil
}

// sealedSelf returns a sealed, read-only in-memory copy of the running
// binary: it cannot be written, grown or shrunk by anyone.
func sealedSelf() (*os.File, error) {
	src, err := os.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("open own binary: %w", err)
	}
	defer src.Close()
	// MFD_EXEC is needed where vm.memfd_noexec defaults to no-exec memfds
	// (Linux 6.3+); older kernels reject the flag.
	fd, err := unix.MemfdCreate("hutch", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if err == unix.EINVAL {
		fd, err = unix.MemfdCreate("hutch", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:hutch")
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("copy own binary: %w", err)
	}
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal memfd: %w", err)
	}
	return f, nil
}
