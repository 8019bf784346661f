package native

//go:generate env GOARCH=amd64 go run ./seccomp/gen seccomp_amd64.go

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// loadSeccomp installs the sandbox filter (package seccomp) on every thread
// of the calling process; children inherit it and can never remove it. With
// noNewPrivs it sets no_new_privs first, which the kernel's TSYNC copies to
// every thread along with the filter.
func loadSeccomp(noNewPrivs bool) error {
	prog, err := sandboxProgram()
	if err != nil {
		return err
	}
	if noNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no_new_privs: %w", err)
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// With TSYNC a positive result is the id of a thread that could not be
	// synchronised.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp: thread %d could not take the filter", r)
	}
	return nil
}
