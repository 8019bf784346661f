// Command abi makes one system call through a chosen ABI and prints what
// happened, for the escape tests: "abi i386|x32|native CLASS" prints
// "CLASS: OK" or "CLASS: ERRNO"; a process the seccomp filter kills prints
// nothing (its shell sees exit 159, SIGSYS).
//
// i386 calls go through int $0x80, whose arguments are 32 bits: every
// buffer is a global, which a non-PIE Go binary keeps below 4 GiB.
package main

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

func int80(nr, a1, a2, a3, a4, a5, a6 uint32) int32

// Buffers for pointer arguments, all in the binary's data segment.
var (
	strNone  = [8]byte{'n', 'o', 'n', 'e'}
	strTmp   = [8]byte{'/', 't', 'm', 'p'}
	strTmpfs = [8]byte{'t', 'm', 'p', 'f', 's'}
	strRoot  = [8]byte{'/'}
	strProc  = [8]byte{'/', 'p', 'r', 'o', 'c'}
	strUser  = [8]byte{'u', 's', 'e', 'r'}
	strKey   = [8]byte{'k'}
	strSwap  = [16]byte{'/', 't', 'm', 'p', '/', 's', 'w', 'a', 'p'}
	scratch  [4096]byte
	sockArgs [6]uint32
)

func addr[T any](p *T) uintptr { return uintptr(unsafe.Pointer(p)) }

// call is one attempt: its i386 and x86_64 numbers and arguments (pointers
// as addresses of the globals above).
type call struct {
	i386, amd64 uint32
	args        []uintptr
}

const (
	newNS   = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET
	afVsock = unix.AF_VSOCK
)

// calls cover every class of DeniedSyscalls and the argument rules, plus
// getpid as the control that proves the ABI itself works or is refused.
func calls() map[string]call {
	return map[string]call{
		"getpid":            {20, unix.SYS_GETPID, nil},
		"unshare":           {310, unix.SYS_UNSHARE, []uintptr{newNS}},
		"clone-newuser":     {120, unix.SYS_CLONE, []uintptr{unix.CLONE_NEWUSER | uintptr(unix.SIGCHLD)}},
		"setns":             {346, unix.SYS_SETNS, []uintptr{0, 0}},
		"mount":             {21, unix.SYS_MOUNT, []uintptr{addr(&strNone), addr(&strTmp), addr(&strTmpfs), 0, 0}},
		"umount2":           {52, unix.SYS_UMOUNT2, []uintptr{addr(&strProc), unix.MNT_DETACH}},
		"pivot_root":        {217, unix.SYS_PIVOT_ROOT, []uintptr{addr(&strRoot), addr(&strRoot)}},
		"fsopen":            {430, unix.SYS_FSOPEN, []uintptr{addr(&strTmpfs), 0}},
		"open_tree":         {428, unix.SYS_OPEN_TREE, []uintptr{uintptr(0xffffff9c), addr(&strRoot), 1}},
		"move_mount":        {429, unix.SYS_MOVE_MOUNT, []uintptr{0, 0, 0, 0, 0}},
		"mount_setattr":     {442, unix.SYS_MOUNT_SETATTR, []uintptr{0, 0, 0, 0, 0}},
		"statmount":         {457, unix.SYS_STATMOUNT, []uintptr{addr(&scratch), addr(&scratch), 4096, 0}},
		"listmount":         {458, unix.SYS_LISTMOUNT, []uintptr{addr(&scratch), addr(&scratch), 16, 0}},
		"open_tree_attr":    {467, unix.SYS_OPEN_TREE_ATTR, []uintptr{uintptr(0xffffff9c), addr(&strRoot), 1, 0, 0}},
		"listns":            {470, unix.SYS_LISTNS, []uintptr{addr(&scratch), addr(&scratch), 16, 0}},
		"open_by_handle_at": {342, unix.SYS_OPEN_BY_HANDLE_AT, []uintptr{0, addr(&scratch), 0}},
		"name_to_handle_at": {341, unix.SYS_NAME_TO_HANDLE_AT, []uintptr{uintptr(0xffffff9c), addr(&strRoot), addr(&scratch), addr(&scratch), 0}},
		"bpf":               {357, unix.SYS_BPF, []uintptr{0, addr(&scratch), 64}},
		"perf_event_open":   {336, unix.SYS_PERF_EVENT_OPEN, []uintptr{addr(&scratch), 0, 0xffffffff, 0xffffffff, 0}},
		"add_key":           {286, unix.SYS_ADD_KEY, []uintptr{addr(&strUser), addr(&strKey), addr(&strKey), 1, 0xfffffffd}},
		"keyctl":            {288, unix.SYS_KEYCTL, []uintptr{0, 0xfffffffd, 0}},
		"request_key":       {287, unix.SYS_REQUEST_KEY, []uintptr{addr(&strUser), addr(&strKey), 0, 0}},
		"userfaultfd":       {374, unix.SYS_USERFAULTFD, []uintptr{0}},
		"io_uring_setup":    {425, unix.SYS_IO_URING_SETUP, []uintptr{1, addr(&scratch)}},
		"io_setup":          {245, unix.SYS_IO_SETUP, []uintptr{4096, addr(&scratch)}},
		"fanotify_init":     {338, unix.SYS_FANOTIFY_INIT, []uintptr{0, 0}},
		"init_module":       {128, unix.SYS_INIT_MODULE, []uintptr{addr(&scratch), 4, addr(&strNone)}},
		"finit_module":      {350, unix.SYS_FINIT_MODULE, []uintptr{0, addr(&strNone), 0}},
		"delete_module":     {129, unix.SYS_DELETE_MODULE, []uintptr{addr(&strNone), 0}},
		"kexec_load":        {283, unix.SYS_KEXEC_LOAD, []uintptr{0, 0, 0, 0}},
		"reboot-cad-off":    {88, unix.SYS_REBOOT, []uintptr{0xfee1dead, 672274793, 0, 0}},
		"swapon":            {87, unix.SYS_SWAPON, []uintptr{addr(&strSwap), 0}},
		"syslog":            {103, unix.SYS_SYSLOG, []uintptr{3, addr(&scratch), 64}},
		"acct":              {51, unix.SYS_ACCT, []uintptr{addr(&strSwap)}},
		"settimeofday":      {79, unix.SYS_SETTIMEOFDAY, []uintptr{0, 0}},
		"clock_settime":     {264, unix.SYS_CLOCK_SETTIME, []uintptr{0, addr(&scratch)}},
		"process_vm_readv":  {347, unix.SYS_PROCESS_VM_READV, []uintptr{1, addr(&scratch), 1, addr(&scratch), 1, 0}},
		"kcmp":              {349, unix.SYS_KCMP, []uintptr{1, 1, 0, 0, 0}},
		"pidfd_getfd":       {438, unix.SYS_PIDFD_GETFD, []uintptr{0, 0, 0}},
		"mbind":             {274, unix.SYS_MBIND, []uintptr{0, 0, 0, 0, 0, 0}},
		"set_mempolicy":     {276, unix.SYS_SET_MEMPOLICY, []uintptr{0, 0, 0}},
		"personality":       {136, unix.SYS_PERSONALITY, []uintptr{0x0400000}},
		"ioctl-tiocsti":     {54, unix.SYS_IOCTL, []uintptr{0, unix.TIOCSTI, addr(&strKey)}},
		"socket-vsock":      {359, unix.SYS_SOCKET, []uintptr{afVsock, unix.SOCK_STREAM, 0}},
		"socket-alg":        {359, unix.SYS_SOCKET, []uintptr{unix.AF_ALG, unix.SOCK_SEQPACKET, 0}},
	}
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: abi i386|x32|native CLASS")
		os.Exit(2)
	}
	abi, name := os.Args[1], os.Args[2]
	if abi == "native" && name == "tiocsti-high-bits" {
		tiocstiHighBits()
		return
	}
	c, ok := calls()[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "abi: unknown class", name)
		os.Exit(2)
	}
	var a [6]uintptr
	copy(a[:], c.args)
	var r uintptr
	var errno unix.Errno
	switch abi {
	case "i386":
		for _, v := range a {
			if v > 0xffffffff {
				fmt.Fprintln(os.Stderr, "abi: an argument does not fit 32 bits (is the binary PIE?)")
				os.Exit(2)
			}
		}
		if name == "socket-vsock" || name == "socket-alg" {
			// Also through socketcall(SYS_SOCKET, args), the older entry.
			sockArgs[0], sockArgs[1], sockArgs[2] = uint32(a[0]), uint32(a[1]), uint32(a[2])
			rc := int80(102, 1, uint32(addr(&sockArgs)), 0, 0, 0, 0)
			report(name+"-socketcall", uintptr(rc), errnoOf(rc))
		}
		rc := int80(c.i386, uint32(a[0]), uint32(a[1]), uint32(a[2]), uint32(a[3]), uint32(a[4]), uint32(a[5]))
		r, errno = uintptr(rc), errnoOf(rc)
	case "x32":
		r, _, errno = unix.RawSyscall6(uintptr(c.amd64)|0x40000000, a[0], a[1], a[2], a[3], a[4], a[5])
	case "native":
		r, _, errno = unix.RawSyscall6(uintptr(c.amd64), a[0], a[1], a[2], a[3], a[4], a[5])
	default:
		fmt.Fprintln(os.Stderr, "abi: unknown ABI", abi)
		os.Exit(2)
	}
	if name == "clone-newuser" && errno == 0 && r == 0 {
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0) // the child of a clone that worked
	}
	report(name, r, errno)
}

func errnoOf(rc int32) unix.Errno {
	if rc < 0 && rc > -4096 {
		return unix.Errno(-rc)
	}
	return 0
}

func report(name string, r uintptr, errno unix.Errno) {
	if errno != 0 {
		fmt.Printf("%s: %s\n", name, unix.ErrnoName(errno))
		return
	}
	fmt.Printf("%s: OK\n", name)
}

// tiocstiHighBits tries TIOCSTI with bits set above the 32 the kernel
// reads, on a terminal of its own that it makes its controlling terminal:
// a filter that compares all 64 bits lets it through.
func tiocstiHighBits() {
	master, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		fmt.Println("tiocsti-high-bits: setup:", err)
		return
	}
	if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
		fmt.Println("tiocsti-high-bits: setup:", err)
		return
	}
	n, err := unix.IoctlGetInt(master, unix.TIOCGPTN)
	if err != nil {
		fmt.Println("tiocsti-high-bits: setup:", err)
		return
	}
	if _, err := unix.Setsid(); err != nil {
		fmt.Println("tiocsti-high-bits: setup: setsid:", err)
		return
	}
	slave, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR, 0) // becomes the controlling terminal
	if err != nil {
		fmt.Println("tiocsti-high-bits: setup:", err)
		return
	}
	var t unix.Termios
	if tp, err := unix.IoctlGetTermios(slave, unix.TCGETS); err == nil {
		t = *tp
		t.Lflag &^= unix.ICANON | unix.ECHO
		unix.IoctlSetTermios(slave, unix.TCSETS, &t)
	}
	ch := [1]byte{'X'}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(slave), 1<<32|unix.TIOCSTI, uintptr(unsafe.Pointer(&ch[0])))
	report("tiocsti-high-bits", 0, errno)
	unix.SetNonblock(slave, true)
	buf := make([]byte, 16)
	if k, err := unix.Read(slave, buf); err == nil && k > 0 {
		fmt.Printf("injected: %q\n", buf[:k])
	} else {
		fmt.Println("injected: nothing")
	}
}
