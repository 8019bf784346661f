package native

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Sandboxes' init processes (and their envd) run either this same binary
// or hutch-sandbox, the part of hutch that sandboxes need, when it is
// installed beside it (see FindSandboxBinary). Nothing inside a sandbox
// may ever reach that binary on disk through /proc/<pid>/exe and rewrite
// it (the CVE-2019-5736 class), so the init is never executed from the
// binary's own path but from one of:
//
//  1. readonlyBinary: the binary seen through a private, read-only overlayfs
//     mount that is never attached anywhere (runc 1.2's approach). Writes
//     through it fail with EROFS whoever tries, no path leads to it, and it
//     shares the page cache with the binary, so it costs almost nothing.
//  2. sealedCopy: a sealed memfd copy, where overlayfs cannot be used. It
//     costs a copy of the binary (a few ms) once per Hutch process.

// sandboxExe returns a file, read-only or sealed, that the init is executed
// from: the binary at path, or this one when path is empty. The caller
// keeps it open for as long as it starts inits.
func sandboxExe(path, emptyDir string) (*os.File, error) {
	if path == "" {
		exe, err := os.Readlink("/proc/self/exe")
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(exe, " (deleted)") {
			return sealedCopy("/proc/self/exe")
		}
		if f, err := readonlyBinary(exe, "/proc/self/exe", emptyDir); err == nil {
			return f, nil
		}
		// Through /proc/self/exe, the copy is of the running binary even
		// when its path was since given to another.
		return sealedCopy("/proc/self/exe")
	}
	if f, err := readonlyBinary(path, path, emptyDir); err == nil {
		return f, nil
	}
	return sealedCopy(path)
}

// readonlyBinary opens the binary at path through a read-only overlay of
// its directory, making sure it is still the file at same (the path
// itself, or /proc/self/exe for the running binary).
func readonlyBinary(path, same, emptyDir string) (*os.File, error) {
	dir, base := filepath.Split(path)
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
	// Readable (not O_PATH): the runtime checks a hutch-sandbox's build
	// through it (sandboxBinaryMatches).
	fd, err := unix.Openat(mfd, base, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s through overlay: %w", base, err)
	}
	f := os.NewFile(uintptr(fd), base+" (read-only)")
	// Make sure it is the binary meant, not a newer one installed since.
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat(same, &b) != nil || a.Ino != b.Ino || a.Size != b.Size || a.Mtim != b.Mtim {
		f.Close()
		return nil, fmt.Errorf("%s changed on disk", path)
	}
	return f, nil
}

// sealedCopy returns a sealed, read-only in-memory copy of the binary at
// path: it cannot be written, grown or shrunk by anyone.
func sealedCopy(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
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
		return nil, fmt.Errorf("copy %s: %w", path, err)
	}
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal memfd: %w", err)
	}
	return f, nil
}
