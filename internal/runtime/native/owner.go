package native

import (
	"fmt"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// startAsOwner runs start — which clones the sandbox's init into its new
// user namespace — with the effective uid and gid set to id, the host id
// the sandbox's root maps to, so that the namespace belongs to that id
// rather than to host root.
//
// Why: the kernel charges what a user namespace's processes use of per-user
// budgets (inotify instances and watches, POSIX message queue bytes, queued
// signals, user namespaces) to the namespace's owner in the parent
// namespace too, and the owner is its creator's effective uid. With host
// root as every sandbox's owner, all sandboxes and host root itself shared
// one budget: one sandbox's 128 inotify instances left none for the others
// or for the host. With the ranges unique host-wide (uids.go), each
// sandbox now has budgets of its own.
//
// How: on a thread of its own, locked and never given back (it ends with
// the goroutine, so its credentials never reach other code; and the Go
// runtime makes new threads from a clean template thread while a goroutine
// is locked, never by cloning this one), the thread's effective ids become
// id with raw setres[ug]id calls, which change this thread only.
// SECBIT_NO_SETUID_FIXUP keeps its capabilities through the change: it
// still writes the new namespace's id maps, which needs CAP_SETUID; the
// bit is cleared again before the clone so the init does not inherit it.
func startAsOwner(id int, start func() (int, error)) (int, error) {
	// linux/securebits.h; golang.org/x/sys does not define it.
	const secbitNoSetuidFixup = 1 << 2
	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked: the thread goes with the goroutine
		pid, err := func() (int, error) {
			bits, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
			if err != nil {
				return 0, fmt.Errorf("securebits: %w", err)
			}
			if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits|secbitNoSetuidFixup), 0, 0, 0); err != nil {
				return 0, fmt.Errorf("securebits: %w", err)
			}
			keep := ^uintptr(0) // -1: leave that id as it is
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(id), keep); e != 0 {
				return 0, fmt.Errorf("become the sandbox's owner (gid %d): %w", id, e)
			}
			if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(id), keep); e != 0 {
				return 0, fmt.Errorf("become the sandbox's owner (uid %d): %w", id, e)
			}
			if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
				return 0, fmt.Errorf("securebits: %w", err)
			}
			return start()
		}()
		done <- result{pid, err}
	}()
	r := <-done
	return r.pid, r.err
}
