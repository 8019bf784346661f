package native

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// sealedSelf returns a sealed, read-only in-memory copy of the running
// binary. Sandboxes' init processes are executed from it, so nothing inside
// a sandbox can ever reach the hutch binary on disk through /proc/<pid>/exe
// and rewrite it (the CVE-2019-5736 class): a sealed memfd cannot be written,
// grown or shrunk by anyone, and it is gone when the last user exits.
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
