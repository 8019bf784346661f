package native

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// keptCaps is the bounding set of sandbox processes: Docker's default set
// less NET_RAW (ping works through ICMP sockets instead). These are
// capabilities inside the sandbox's user namespace only.
var keptCaps = map[int]bool{
	unix.CAP_CHOWN: true, unix.CAP_DAC_OVERRIDE: true, unix.CAP_FSETID: true,
	unix.CAP_FOWNER: true, unix.CAP_MKNOD: true, unix.CAP_SETGID: true,
	unix.CAP_SETUID: true, unix.CAP_SETFCAP: true, unix.CAP_SETPCAP: true,
	unix.CAP_NET_BIND_SERVICE: true, unix.CAP_SYS_CHROOT: true, unix.CAP_KILL: true,
	unix.CAP_AUDIT_WRITE: true,
}

// lockdown applies the limits that every sandbox process inherits from the
// init: rlimits, a cgroup namespace, the capability bounding set,
// no_new_privs, non-dumpability and the seccomp filter (last, since it
// forbids the calls made before it).
func lockdown(cfg *initConfig) error {
	// Open files: as many as the host allows (hosts without CAP_SYS_RESOURCE
	// cannot raise a hard limit). syscall.Setrlimit tells Go's runtime too.
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil {
		nofile.Cur = min(nofile.Max, 1<<20)
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nofile)
	}
	// Thread-scoped from here: this is the locked main thread (see init).
	// The cgroup namespace is rooted at the sandbox's cgroup, which the
	// parent moved us into before sending the config.
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("cgroup namespace: %w", err)
	}
	last := lastCap()
	for c := 0; c <= last; c++ {
		if !keptCaps[c] {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	// Nothing in the sandbox may ptrace the init or open its /proc files.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	return loadSeccomp(cfg.NoNewPrivileges)
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return unix.CAP_LAST_CAP
	}
	return n
}
