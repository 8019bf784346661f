package seccomp

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Architecture ids of seccomp_data.arch (linux/audit.h).
const (
	auditArchX86_64  = 0xc000003e
	auditArchI386    = 0x40000003
	auditArchAarch64 = 0xc00000b7
	x32Bit           = 0x40000000
)

// run evaluates the sandbox program for one syscall the way the kernel
// does, in x/net/bpf's interpreter. seccomp_data is native-endian, while
// the interpreter loads words big-endian: each 32-bit word is stored
// big-endian at its native offset (a 64-bit argument's low word first).
func run(t *testing.T, vm *bpf.VM, archID, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], nr)
	binary.BigEndian.PutUint32(data[4:], archID)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[16+8*i+4:], uint32(a>>32))
	}
	out, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(out)
}

func newVM(t *testing.T) *bpf.VM {
	t.Helper()
	if goruntime.GOARCH != "amd64" {
		t.Skip("the verdicts below are for amd64's syscall numbers")
	}
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, f := range prog {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the program does not disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func actionName(a uint32) string {
	switch a {
	case ActionAllow:
		return "allow"
	case ActionKillProcess:
		return "kill"
	case ActionEPERM:
		return "EPERM"
	case ActionENOSYS:
		return "ENOSYS"
	case ActionEAFNOSUPPORT:
		return "EAFNOSUPPORT"
	}
	return fmt.Sprintf("%#x", a)
}

func TestVerdicts(t *testing.T) {
	vm := newVM(t)
	const hi = 1 << 32 // set in the high word of an argument
	tests := []struct {
		name string
		arch uint32
		nr   uint32
		args []uint64
		want uint32
	}{
		{"getpid", auditArchX86_64, unix.SYS_GETPID, nil, ActionAllow},
		{"read", auditArchX86_64, unix.SYS_READ, nil, ActionAllow},
		{"unshare", auditArchX86_64, unix.SYS_UNSHARE, []uint64{unix.CLONE_NEWUSER}, ActionEPERM},
		{"mount", auditArchX86_64, unix.SYS_MOUNT, nil, ActionEPERM},
		{"listmount", auditArchX86_64, unix.SYS_LISTMOUNT, nil, ActionEPERM},
		{"statmount", auditArchX86_64, unix.SYS_STATMOUNT, nil, ActionEPERM},
		{"open_tree_attr", auditArchX86_64, unix.SYS_OPEN_TREE_ATTR, nil, ActionEPERM},
		{"listns", auditArchX86_64, unix.SYS_LISTNS, nil, ActionEPERM},
		{"file_getattr (newer than the library's table)", auditArchX86_64, unix.SYS_FILE_GETATTR, nil, ActionAllow},
		{"newest classified", auditArchX86_64, NewestSyscall, nil, ActionAllow},
		{"one past the newest", auditArchX86_64, NewestSyscall + 1, nil, ActionENOSYS},
		{"far past the newest", auditArchX86_64, 4000, nil, ActionENOSYS},
		{"max number", auditArchX86_64, 0xffffffff, nil, ActionENOSYS},

		// Foreign architectures: nothing gets through, not even getpid.
		{"i386 unshare (int $0x80)", auditArchI386, 310, []uint64{unix.CLONE_NEWUSER}, ActionKillProcess},
		{"i386 getpid", auditArchI386, 20, nil, ActionKillProcess},
		{"i386 with an x86_64 number", auditArchI386, unix.SYS_GETPID, nil, ActionKillProcess},
		{"aarch64", auditArchAarch64, 172, nil, ActionKillProcess},
		{"no architecture", 0, unix.SYS_GETPID, nil, ActionKillProcess},
		// x32: every call refused.
		{"x32 unshare", auditArchX86_64, x32Bit | unix.SYS_UNSHARE, nil, ActionENOSYS},
		{"x32 getpid", auditArchX86_64, x32Bit | unix.SYS_GETPID, nil, ActionENOSYS},
		{"x32 ioctl (512+)", auditArchX86_64, x32Bit | 514, nil, ActionENOSYS},

		{"clone thread", auditArchX86_64, unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, ActionAllow},
		{"clone new user ns", auditArchX86_64, unix.SYS_CLONE, []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, ActionEPERM},
		{"clone new net ns, high bits set", auditArchX86_64, unix.SYS_CLONE, []uint64{hi | unix.CLONE_NEWNET}, ActionEPERM},
		{"clone3", auditArchX86_64, unix.SYS_CLONE3, nil, ActionENOSYS},
		{"io_setup (AIO: one host-wide table)", auditArchX86_64, unix.SYS_IO_SETUP, []uint64{4096}, ActionENOSYS},
		{"io_submit", auditArchX86_64, unix.SYS_IO_SUBMIT, nil, ActionENOSYS},

		{"ioctl TCGETS", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TCGETS}, ActionAllow},
		{"ioctl TIOCGWINSZ", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCGWINSZ}, ActionAllow},
		{"ioctl TIOCSTI", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI}, ActionEPERM},
		{"ioctl TIOCSTI, high bits set", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, hi | unix.TIOCSTI}, ActionEPERM},
		{"ioctl TIOCSTI, all high bits set", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, 0xffffffff00000000 | unix.TIOCSTI}, ActionEPERM},
		{"ioctl TIOCLINUX", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCLINUX}, ActionEPERM},
		{"ioctl TIOCLINUX, high bits set", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, hi | unix.TIOCLINUX}, ActionEPERM},
		{"ioctl a superset of TIOCSTI's bits", auditArchX86_64, unix.SYS_IOCTL, []uint64{0, unix.TIOCSTI | 0x80000000}, ActionAllow},

		{"personality query", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{0xffffffff}, ActionAllow},
		{"personality linux", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{0}, ActionAllow},
		{"personality READ_IMPLIES_EXEC", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{0x0400000}, ActionEPERM},
		{"personality ADDR_NO_RANDOMIZE", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{0x0040000}, ActionEPERM},
		{"personality linux, high bits set", auditArchX86_64, unix.SYS_PERSONALITY, []uint64{hi}, ActionEPERM},

		{"socket AF_INET", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET, unix.SOCK_STREAM}, ActionAllow},
		{"socket AF_INET6", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_INET6, unix.SOCK_DGRAM}, ActionAllow},
		{"socket AF_UNIX", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, ActionAllow},
		{"socket AF_NETLINK", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_NETLINK, unix.SOCK_RAW}, ActionAllow},
		{"socket AF_PACKET (refused by capabilities)", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_PACKET, unix.SOCK_RAW}, ActionAllow},
		{"socket AF_VSOCK", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, ActionEAFNOSUPPORT},
		{"socket AF_VSOCK, high bits set", auditArchX86_64, unix.SYS_SOCKET, []uint64{hi | unix.AF_VSOCK, unix.SOCK_STREAM}, ActionEAFNOSUPPORT},
		{"socket AF_INET, high bits set", auditArchX86_64, unix.SYS_SOCKET, []uint64{hi | unix.AF_INET, unix.SOCK_STREAM}, ActionEAFNOSUPPORT},
		{"socket AF_ALG", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_ALG, unix.SOCK_SEQPACKET}, ActionEAFNOSUPPORT},
		{"socket AF_KEY", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_KEY, unix.SOCK_RAW}, ActionEAFNOSUPPORT},
		{"socket AF_TIPC", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_TIPC, unix.SOCK_RDM}, ActionEAFNOSUPPORT},
		{"socket AF_XDP", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_XDP, unix.SOCK_RAW}, ActionEAFNOSUPPORT},
		{"socket AF_BLUETOOTH", auditArchX86_64, unix.SYS_SOCKET, []uint64{unix.AF_BLUETOOTH, unix.SOCK_RAW}, ActionEAFNOSUPPORT},
		{"socketpair AF_UNIX", auditArchX86_64, unix.SYS_SOCKETPAIR, []uint64{unix.AF_UNIX, unix.SOCK_STREAM}, ActionAllow},
		{"socketpair AF_VSOCK", auditArchX86_64, unix.SYS_SOCKETPAIR, []uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, ActionEAFNOSUPPORT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := run(t, vm, tt.arch, tt.nr, tt.args...); got != tt.want {
				t.Errorf("arch %#x nr %d args %#x: %s, want %s", tt.arch, tt.nr, tt.args, actionName(got), actionName(tt.want))
			}
		})
	}
}

// TestEveryListedSyscall checks each list's verdict on its own members.
func TestEveryListedSyscall(t *testing.T) {
	vm := newVM(t)
	nums := xsysSyscalls(t)
	check := func(names []string, want uint32) {
		for _, n := range names {
			nr, ok := nums[n]
			if !ok {
				t.Errorf("%s is not in golang.org/x/sys's amd64 table", n)
				continue
			}
			if got := run(t, vm, auditArchX86_64, nr); got != want {
				t.Errorf("%s (%d): %s, want %s", n, nr, actionName(got), actionName(want))
			}
			// The same number through the x32 ABI is refused.
			if got := run(t, vm, auditArchX86_64, x32Bit|nr); got != ActionENOSYS {
				t.Errorf("x32 %s: %s, want ENOSYS", n, actionName(got))
			}
		}
	}
	check(DeniedSyscalls, ActionEPERM)
	check(AbsentSyscalls, ActionENOSYS)
	for _, d := range deniedByNumber {
		check([]string{d.name}, ActionEPERM)
	}
	check(AllowedSyscalls, ActionAllow)
}

// TestEverySyscallClassified fails when a syscall in the kernel headers
// Hutch builds against (golang.org/x/sys's amd64 table, from the Linux
// headers) is neither allowed nor denied on purpose: a new kernel's
// syscall must be looked at, not allowed by default.
func TestEverySyscallClassified(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("syscalls are classified for amd64")
	}
	nums := xsysSyscalls(t)
	lists := map[string][]string{
		"DeniedSyscalls": DeniedSyscalls, "AbsentSyscalls": AbsentSyscalls, "Conditional": Conditional, "AllowedSyscalls": AllowedSyscalls,
	}
	for _, d := range deniedByNumber {
		lists["deniedByNumber"] = append(lists["deniedByNumber"], d.name)
	}
	in := map[string][]string{}
	for list, names := range lists {
		for _, n := range names {
			in[n] = append(in[n], list)
		}
	}
	newest := uint32(0)
	for n, nr := range nums {
		newest = max(newest, nr)
		switch l := in[n]; len(l) {
		case 0:
			t.Errorf("syscall %s (%d) is neither allowed nor denied: add it to AllowedSyscalls or DeniedSyscalls (policy_amd64.go, policy.go)", n, nr)
		case 1:
		default:
			t.Errorf("syscall %s is in %v: one list only", n, l)
		}
	}
	for n, l := range in {
		if _, ok := nums[n]; !ok {
			t.Errorf("%s (in %v) is not an amd64 syscall", n, l)
		}
	}
	if NewestSyscall != newest {
		t.Errorf("NewestSyscall = %d, want %d, the newest syscall in golang.org/x/sys", NewestSyscall, newest)
	}
	// Denied calls the library cannot name must be few and named right.
	for _, d := range deniedByNumber {
		if nums[d.name] != d.nr {
			t.Errorf("deniedByNumber %s = %d, want %d", d.name, d.nr, nums[d.name])
		}
		if _, ok := arch.X86_64.SyscallNames[d.name]; ok {
			t.Errorf("%s is in go-seccomp-bpf's table now: move it to DeniedSyscalls", d.name)
		}
	}
}

// xsysSyscalls reads golang.org/x/sys's amd64 syscall table, generated
// from the Linux headers: name (as go-seccomp-bpf spells it) → number.
func xsysSyscalls(t *testing.T) map[string]uint32 {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	if err != nil {
		t.Fatalf("locate golang.org/x/sys: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "unix", "zsysnum_linux_amd64.go"))
	if err != nil {
		t.Fatal(err)
	}
	nums := map[string]uint32{}
	for _, m := range regexp.MustCompile(`(?m)^\s*SYS_([A-Z0-9_]+)\s*=\s*(\d+)`).FindAllStringSubmatch(string(src), -1) {
		n, _ := strconv.ParseUint(m[2], 10, 32)
		nums[strings.ToLower(m[1])] = uint32(n)
	}
	if len(nums) < 300 {
		t.Fatalf("read %d syscalls from x/sys: the table's format changed?", len(nums))
	}
	return nums
}
