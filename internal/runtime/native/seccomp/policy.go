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
// A deny-list is only as good as the door to it, so the program checks
// three things before any syscall number is looked at (this part is
// written here: go-seccomp-bpf lets every architecture other than the
// native one through to its default action, which is "allow"):
//
//	architecture not the native one      → kill the process. On x86_64 that
//	                                       is the i386 ABI (int $0x80, or
//	                                       sysenter from 32-bit code), whose
//	                                       syscall numbers differ, so a
//	                                       deny-list by number would not hold.
//	x32 ABI (number has bit 30 set)       → ENOSYS (go-seccomp-bpf's check).
//	number above the newest classified    → ENOSYS: a syscall newer than this
//	syscall (NewestSyscall)                 list is refused until someone
//	                                       decides it is safe, never allowed
//	                                       by default.
//
// A test (classify_test.go) fails when a syscall in the kernel headers
// Hutch builds against (golang.org/x/sys's table) is neither in
// DeniedSyscalls, Conditional nor AllowedSyscalls.

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
	// Mounts, namespaces and filesystem handles, including the mount API's
	// newer calls (listmount and statmount read the host's mount tree by id).
	"mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen",
	"fsconfig", "fsmount", "fspick", "mount_setattr", "setns", "unshare",
	"open_by_handle_at", "name_to_handle_at",
	"open_tree_attr", "listmount", "statmount",
	// BPF, perf, keyrings, userfaultfd, io_uring, fanotify (Docker: SYS_ADMIN).
	"bpf", "perf_event_open", "add_key", "request_key", "keyctl",
	"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"fanotify_init",
	// Other processes' memory and descriptors, NUMA placement (Docker:
	// CAP_SYS_PTRACE and CAP_SYS_NICE).
	"process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
	"get_mempolicy", "set_mempolicy", "mbind", "move_pages", "set_mempolicy_home_node",
}

// AbsentSyscalls fail with ENOSYS, as on a kernel built without them, so
// programs take their fallback: Linux's native AIO, whose contexts come
// from one host-wide table (fs.aio-max-nr) that nothing bounds per user or
// cgroup — one sandbox could take it all. (libaio users such as InnoDB fall
// back to threads.)
var AbsentSyscalls = []string{"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents"}

// Conditional are the syscalls allowed or refused by their arguments (see
// Policy); clone3 is refused with ENOSYS.
var Conditional = []string{"clone", "clone3", "ioctl", "personality", "socket", "socketpair"}

// SocketFamilies are the address families a sandbox may open sockets of;
// any other fails with EAFNOSUPPORT, as on a kernel without it. Docker
// refuses only AF_VSOCK, which is neither filtered by the network policy
// nor namespaced (a sandbox would share the VM's vsock ports with the
// host); the rarely used families (AF_ALG, AF_KEY, AF_TIPC, AF_RDS,
// AF_XDP, Bluetooth, CAN, X.25, ...) are a frequent kernel-exploit surface
// and nothing a sandbox needs. AF_PACKET stays listed so that its refusal
// comes from the missing CAP_NET_RAW, as an ordinary EPERM.
var SocketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, unix.AF_PACKET}

// cloneNamespaceFlags are the clone(2) flags that create namespaces.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Actions of the filter, as the kernel sees them.
const (
	ActionEPERM        = uint32(seccomp.ActionErrno) | uint32(unix.EPERM)
	ActionENOSYS       = uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)
	ActionEAFNOSUPPORT = uint32(seccomp.ActionErrno) | uint32(unix.EAFNOSUPPORT)
	ActionKillProcess  = uint32(seccomp.ActionKillProcess)
	ActionAllow        = uint32(seccomp.ActionAllow)
)

// Policy is the sandbox policy's syscall part, as go-seccomp-bpf takes it;
// Program adds the architecture and number checks in front.
func Policy() seccomp.Policy {
	eperm := seccomp.Action(ActionEPERM)
	var notFamily []seccomp.Condition
	for _, f := range SocketFamilies {
		notFamily = append(notFamily, seccomp.Condition{Argument: 0, Operation: seccomp.NotEqual, Value: f})
	}
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: eperm, Names: DeniedSyscalls},
			{
				Action: eperm,
				NamesWithCondtions: []seccomp.NameWithConditions{
					// New namespaces through clone's flags (argument 0 on x86_64).
					{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags}}},
					// Pushing input into a terminal (TIOCSTI) and the console
					// ioctls. The kernel reads ioctl's command as 32 bits, so
					// only those are compared: with a 64-bit compare,
					// 0x1_00005412 would pass the filter and still be TIOCSTI.
					{Name: "ioctl", Conditions: low32Equal(1, unix.TIOCSTI)},
					{Name: "ioctl", Conditions: low32Equal(1, unix.TIOCLINUX)},
					// Personalities beyond Docker's allowed five (which include
					// querying): e.g. READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE.
					// Refused unless equal to one of them, so high bits set by
					// the caller cannot sneak a personality past.
					{Name: "personality", Conditions: []seccomp.Condition{
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x0},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x8},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x20000},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0x20008},
						{Argument: 0, Operation: seccomp.NotEqual, Value: 0xffffffff},
					}},
				},
			},
			// Address families outside SocketFamilies.
			{
				Action: seccomp.Action(ActionEAFNOSUPPORT),
				NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "socket", Conditions: notFamily},
					{Name: "socketpair", Conditions: notFamily},
				},
			},
			// clone3 passes its flags in memory a filter cannot read: answer
			// ENOSYS so libc falls back to clone, as Docker does.
			{Action: seccomp.Action(ActionENOSYS), Names: append([]string{"clone3"}, AbsentSyscalls...)},
		},
	}
}

// low32Equal matches when the low 32 bits of argument arg equal v, whatever
// the high bits: every bit of v set and no other low bit.
func low32Equal(arg uint32, v uint32) []seccomp.Condition {
	var c []seccomp.Condition
	for bit := uint32(1); bit != 0; bit <<= 1 {
		if v&bit != 0 {
			c = append(c, seccomp.Condition{Argument: arg, Operation: seccomp.BitsSet, Value: uint64(bit)})
		}
	}
	return append(c, seccomp.Condition{Argument: arg, Operation: seccomp.BitsNotSet, Value: uint64(^v)})
}

// numbered is a syscall by number, for those go-seccomp-bpf cannot name.
type numbered struct {
	name string
	nr   uint32
}

// seccomp_data's layout (linux/seccomp.h).
const (
	offNr   = 0
	offArch = 4
)

// prologue is the part of the program in front of go-seccomp-bpf's: the
// architecture check that fails closed, the refusal of syscalls newer than
// NewestSyscall and of denied syscalls the library's table does not know.
func prologue(native uint32) []bpf.Instruction {
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: native, SkipTrue: 1},
		bpf.RetConstant{Val: ActionKillProcess},
	}
	if NewestSyscall == 0 {
		return p
	}
	p = append(p,
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		// Numbers with the x32 bit are above NewestSyscall too: refused.
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: NewestSyscall, SkipFalse: 1},
		bpf.RetConstant{Val: ActionENOSYS},
	)
	for _, d := range deniedByNumber {
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: d.nr, SkipFalse: 1},
			bpf.RetConstant{Val: ActionEPERM},
		)
	}
	return p
}

// Program assembles the sandbox filter for the architecture this binary
// runs on.
func Program() ([]unix.SockFilter, error) {
	p := Policy()
	insts, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	native, ok := nativeArch(insts)
	if !ok {
		return nil, fmt.Errorf("seccomp policy: go-seccomp-bpf's program does not start with its architecture check")
	}
	raw, err := bpf.Assemble(append(prologue(native), insts...))
	if err != nil {
		return nil, fmt.Errorf("seccomp policy: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// nativeArch reads the AUDIT_ARCH value go-seccomp-bpf compares against
// (its program starts "load arch; jump if (not) equal ARCH").
func nativeArch(insts []bpf.Instruction) (uint32, bool) {
	if len(insts) < 2 {
		return 0, false
	}
	if ld, ok := insts[0].(bpf.LoadAbsolute); !ok || ld.Off != offArch {
		return 0, false
	}
	j, ok := insts[1].(bpf.JumpIf)
	if !ok {
		return 0, false
	}
	return j.Val, true
}
