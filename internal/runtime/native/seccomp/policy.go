// Package seccomp defines the seccomp filter of Hutch's sandboxes and
// assembles it with go-seccomp-bpf.
//
// The native runtime does not import this package on amd64: there it loads
// a copy of the assembled program generated into seccomp_amd64.go (go
// generate; a test keeps it current), because the library's syscall tables
// cost every process 1-3 ms of start-up. Elsewhere it assembles at run time.
package seccomp

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Sandboxes get a deny-list seccomp filter at least as strict as Docker's
// default profile (which is an allow-list whose gaps are exactly these
// calls): kernel-global state, module loading, mounts and namespaces, BPF
// and perf, keyrings, io_uring, and the arguments Docker filters for clone,
// ioctl and personality. Everything denied fails with EPERM, as in Docker,
// so programs see an ordinary "operation not permitted".
//
// go-seccomp-bpf assembles the BPF program; it also rejects foreign
// architectures and the x32 ABI, which would otherwise bypass a deny-list.

// DeniedSyscalls fail with EPERM in every sandbox.
var DeniedSyscalls = []string{
	// Kernel, clock and host-global state.
	"acct", "clock_adjtime", "clock_settime", "settimeofday", "reboot",
	"swapon", "swapoff", "syslog", "sysfs", "_sysctl", "ustat", "uselib",
	"vhangup", "nfsservctl", "quotactl", "quotactl_fd", "lookup_dcookie",
	"iopl", "ioperm", "kexec_load", "kexec_file_load",
	// Kernel modules.
	"create_module", "init_module", "finit_module", "delete_module",
	"get_kernel_syms", "query_module",
	// Mounts, namespaces and filesystem handles.
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr", "setns", "unshare",
	"open_by_handle_at", "name_to_handle_at",
	// BPF, perf, keyrings, userfaultfd, io_uring.
	"bpf", "perf_event_open", "add_key", "request_key", "keyctl",
	"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	// Other processes' memory and NUMA placement (Docker: CAP_SYS_PTRACE/NICE).
	"process_vm_readv", "process_vm_writev", "kcmp",
	"get_mempolicy", "set_mempolicy", "mbind", "move_pages",
}

// cloneNamespaceFlags are the clone(2) flags that create namespaces.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Policy is the sandbox policy.
func Policy() seccomp.Policy {
	eperm := seccomp.ActionErrno | seccomp.Action(unix.EPERM)
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: eperm, Names: DeniedSyscalls},
			{
				Action: eperm,
				NamesWithCondtions: []seccomp.NameWithConditions{
					// New namespaces through clone's flags (argument 0 on x86_64).
					{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags}}},
					// Pushing input into a terminal (TIOCSTI) and the console ioctls.
					{Name: "ioctl", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.Equal, Value: unix.TIOCSTI}}},
					{Name: "ioctl", Conditions: []seccomp.Condition{{Argument: 1, Operation: seccomp.Equal, Value: unix.TIOCLINUX}}},
					// Personalities beyond Docker's allowed five (which include
					// querying): e.g. READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE.
					{Name: "personality", Conditions: []seccomp.Condition{
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x0},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x8},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x20000},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x20008},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0xffffffff},
					}},
				},
			},
			// clone3 passes its flags in memory a filter cannot read: answer
			// ENOSYS so libc falls back to clone, as Docker does.
			{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		},
	}
}

// Program assembles Policy for the architecture this binary runs on.
func Program() ([]unix.SockFilter, error) {
	p := Policy()
	insts, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}
