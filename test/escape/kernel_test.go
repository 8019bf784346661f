package escape

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/sdk"
)

// abiAttempt is an attempt of raw system calls through test/internal/abi
// as the sandbox's root, natively (the x86_64 entry): each must fail.
func abiAttempt(name, class string, calls ...string) attempt {
	return attempt{name, class, func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		s.withABI(t, sbx)
		var script strings.Builder
		for _, c := range calls {
			fmt.Fprintf(&script, "/tmp/abi native %s\n", c)
		}
		refused(t, b, run(t, sbx, "root", script.String()), calls...)
		alive(t, sbx)
	}}
}

// scriptAttempt runs script as root; each name must report a refusal.
func scriptAttempt(name, class, script string, names ...string) attempt {
	return attempt{name, class, func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		refused(t, b, py(t, sbx, "root", script), names...)
		alive(t, sbx)
	}}
}

// kernelAttempts go for the kernel's shared state: mounts, cgroups,
// modules, sysctls, devices, the clock, the host's identity.
var kernelAttempts = []attempt{
	scriptAttempt("mount", "kernel: mounts", `
for name, args in (("tmpfs", ("none", "/mnt", "tmpfs")), ("bind-root", ("/", "/mnt", None)), ("proc", ("proc", "/mnt", "proc")),
                   ("sysfs", ("sysfs", "/mnt", "sysfs")), ("remount-root-rw", (None, "/", None))):
    src, dst, fs = args
    flags = 4096 if name == "bind-root" else (32 if name.startswith("remount") else 0)  # MS_BIND, MS_REMOUNT
    ctypes.set_errno(0)
    r = libc.mount(src and src.encode(), dst.encode(), fs and fs.encode(), flags, None)
    print(f"mount-{name}: {'OK' if r == 0 else errno.errorcode[ctypes.get_errno()]}")
`, "mount-tmpfs", "mount-bind-root", "mount-proc", "mount-sysfs", "mount-remount-root-rw"),
	abiAttempt("new-mount-api", "kernel: mounts", "fsopen", "open_tree", "move_mount", "mount_setattr", "pivot_root", "umount2"),
	scriptAttempt("cgroup-release-agent", "kernel: cgroups", `
os.makedirs("/tmp/cg", exist_ok=True)
ctypes.set_errno(0)
r = libc.mount(b"cgroup", b"/tmp/cg", b"cgroup", 0, b"memory")
print("mount-cgroup-v1:", "OK" if r == 0 else errno.errorcode[ctypes.get_errno()])
ctypes.set_errno(0)
r = libc.mount(b"cgroup2", b"/tmp/cg", b"cgroup2", 0, None)
print("mount-cgroup2:", "OK" if r == 0 else errno.errorcode[ctypes.get_errno()])
import glob
agents = glob.glob("/sys/fs/cgroup/*/release_agent") + glob.glob("/sys/fs/cgroup/release_agent") + ["/tmp/cg/release_agent"]
ok = []
for p in agents:
    try:
        open(p, "w").write("/tmp/x")
        ok.append(p)
    except OSError:
        pass
print("write-release-agent:", "OK " + " ".join(ok) if ok else "EACCES")
`, "mount-cgroup-v1", "mount-cgroup2", "write-release-agent"),
	abiAttempt("kernel-modules", "kernel: modules", "init_module", "finit_module", "delete_module"),
	scriptAttempt("proc-sys-writes", "kernel: sysctls", `
for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/sysrq", "/proc/sys/fs/file-max", "/proc/sys/net/ipv4/ip_forward"):
    attempt("write-" + p.rsplit("/", 1)[1], lambda p=p: os.close(os.open(p, os.O_WRONLY)))
`, "write-core_pattern", "write-modprobe", "write-overcommit_memory", "write-sysrq", "write-file-max"),
	scriptAttempt("sys-writes", "kernel: sysfs", `
for p in ("/sys/kernel/uevent_helper", "/sys/kernel/mm/ksm/run", "/sys/power/state", "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/module/sysrq/parameters/x"):
    attempt("write-" + p.rsplit("/", 1)[1], lambda p=p: os.close(os.open(p, os.O_WRONLY)))
`, "write-uevent_helper", "write-run", "write-state", "write-enabled"),
	scriptAttempt("sysrq-trigger", "kernel: sysctls", `
attempt("open-sysrq-trigger", lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY)))
attempt("create-sysrq-trigger", lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY | os.O_CREAT)))
`, "open-sysrq-trigger", "create-sysrq-trigger"),
	scriptAttempt("device-nodes", "kernel: devices", `
for name, kind, major, minor in (("mem", stat.S_IFCHR, 1, 1), ("kmem", stat.S_IFCHR, 1, 2), ("port", stat.S_IFCHR, 1, 4), ("kmsg", stat.S_IFCHR, 1, 11), ("sda", stat.S_IFBLK, 8, 0), ("vda", stat.S_IFBLK, 253, 0), ("nvme", stat.S_IFBLK, 259, 0)):
    p = "/tmp/dev-" + name
    try:
        os.mknod(p, kind | 0o600, os.makedev(major, minor))
    except OSError:
        pass
    # Made or not, the node must not open: a device of the host.
    attempt("open-" + name, lambda p=p: os.close(os.open(p, os.O_RDONLY)))
`, "open-mem", "open-kmem", "open-port", "open-kmsg", "open-sda", "open-vda", "open-nvme"),
	{"host-block-devices", "kernel: devices", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		ents, _ := os.ReadDir("/sys/block")
		var names []string
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "loop") {
				names = append(names, e.Name())
			}
		}
		if len(names) == 0 {
			t.Skip("the host has no block devices but loops")
		}
		var script strings.Builder
		for _, n := range names {
			fmt.Fprintf(&script, "attempt('open-%[1]s', lambda: os.close(os.open('/dev/%[1]s', os.O_RDONLY)))\n", n)
		}
		script.WriteString("print('dev:', ' '.join(sorted(os.listdir('/dev'))))\n")
		out := py(t, sbx, "root", script.String())
		var want []string
		for _, n := range names {
			want = append(want, "open-"+n)
		}
		refused(t, b, out, want...)
	}},
	abiAttempt("kexec", "kernel: reboot and kexec", "kexec_load"),
	scriptAttempt("reboot", "kernel: reboot and kexec", `
for name, cmd in (("restart", 0x01234567), ("power-off", 0x4321FEDC), ("cad-on", 0x89ABCDEF)):
    sc("reboot-" + name, 169, 0xfee1dead, 672274793, cmd, 0)
`, "reboot-restart", "reboot-power-off", "reboot-cad-on"),
	scriptAttempt("kernel-log", "kernel: the log", `
attempt("open-kmsg", lambda: os.read(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK), 4096))
buf = ctypes.create_string_buffer(4096)
sc("syslog-read-all", 103, 3, buf, 4096)
sc("syslog-clear", 103, 5, 0, 0)
`, "open-kmsg", "syslog-read-all", "syslog-clear"),
	scriptAttempt("masked-proc", "kernel: /proc", `
for p in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kpagecount", "/proc/kpageflags", "/proc/sys/kernel/random/boot_id.w"):
    attempt("read-" + p.rsplit("/", 1)[1], lambda p=p: (lambda d: (_ for _ in ()).throw(OSError(errno.EACCES, "empty")) if not d else None)(open(p, "rb").read(4096)))
`, "read-kcore", "read-keys", "read-timer_list", "read-sched_debug", "read-kpagecount", "read-kpageflags"),
	{"hostname", "kernel: the host's identity", func(t *testing.T, s *suite, b string) {
		// The sandbox's name is its own: setting it (where root may,
		// in the sandbox's UTS namespace) leaves the host's as it was.
		host, _ := os.Hostname()
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", `
sc("sethostname", 170, b"pwned-host", 10)
sc("setdomainname", 171, b"pwned-domain", 12)
attempt("write-proc-hostname", lambda: open("/proc/sys/kernel/hostname", "w").write("pwned-host"))
`)
		t.Logf("%s", out)
		if now, _ := os.Hostname(); now != host {
			t.Errorf("the host's name changed: %q, was %q", now, host)
		}
		next := s.sandbox(t, b, sdk.CreateOptions{})
		absent(t, run(t, next, "user", "hostname; cat /proc/sys/kernel/domainname"), "pwned")
	}},
	abiAttempt("clock", "kernel: the clock", "settimeofday", "clock_settime"),
	scriptAttempt("adjtimex", "kernel: the clock", `
class Timex(ctypes.Structure):
    _fields_ = [("modes", ctypes.c_uint), ("pad", ctypes.c_byte * 204)]
tx = Timex()
tx.modes = 0x0001  # ADJ_OFFSET
sc("adjtimex-set", 159, ctypes.byref(tx))
sc("clock_adjtime-set", 305, 0, ctypes.byref(tx))
`, "adjtimex-set", "clock_adjtime-set"),
	abiAttempt("swap-and-accounting", "kernel: swap and accounting", "swapon", "acct"),
}

// syscallAttempts are the calls seccomp refuses natively, through every
// entry point, and the kernel interfaces behind them.
var syscallAttempts = []attempt{
	{"i386-entry", "seccomp: entry points", func(t *testing.T, s *suite, b string) { abiEntry(t, s, b, "i386") }},
	{"x32-entry", "seccomp: entry points", func(t *testing.T, s *suite, b string) { abiEntry(t, s, b, "x32") }},
	abiAttempt("io-uring", "seccomp: io_uring", "io_uring_setup"),
	scriptAttempt("userfaultfd", "seccomp: userfaultfd", `
sc("userfaultfd", 323, 0)
sc("userfaultfd-user-only", 323, 1)
attempt("open-dev-userfaultfd", lambda: os.close(os.open("/dev/userfaultfd", os.O_RDWR)))
`, "userfaultfd", "userfaultfd-user-only", "open-dev-userfaultfd"),
	abiAttempt("perf-events", "seccomp: perf and bpf", "perf_event_open"),
	scriptAttempt("bpf", "seccomp: perf and bpf", `
attr = (ctypes.c_uint32 * 32)()
attr[0], attr[1], attr[2], attr[3] = 2, 4, 8, 1  # BPF_MAP_TYPE_ARRAY
sc("bpf-map-create", 321, 0, attr, 128)
insns = (ctypes.c_uint64 * 2)(0xb7, 0x95)  # r0 = 0; exit
lic = ctypes.create_string_buffer(b"GPL")
pa = (ctypes.c_uint64 * 16)()
pa[0] = 1 | (2 << 32)  # BPF_PROG_TYPE_SOCKET_FILTER, 2 instructions
pa[1] = ctypes.addressof(insns)
pa[2] = ctypes.addressof(lic)
sc("bpf-prog-load", 321, 5, pa, 128)
`, "bpf-map-create", "bpf-prog-load"),
	{"keyrings", "seccomp: keyrings", func(t *testing.T, s *suite, b string) {
		// Keyrings are the kernel's, per host uid: a key added inside
		// would be read by every sandbox of the same uid, and the host's.
		mark := unique("key")
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", fmt.Sprintf(`
sc("add_key", 248, b"user", %[1]q.encode(), b"secret", 6, -2)
sc("add_key-session", 248, b"user", %[1]q.encode(), b"secret", 6, -3)
sc("keyctl-join", 250, 1, b"hutch-escape")
sc("request_key", 249, b"user", %[1]q.encode(), b"callout", 0)
`, mark))
		refused(t, b, out, "add_key", "add_key-session", "keyctl-join", "request_key")
		if keys, err := os.ReadFile("/proc/keys"); err == nil && strings.Contains(string(keys), mark) {
			t.Errorf("the sandbox's key is in the host's keyrings")
		}
	}},
	abiAttempt("fanotify", "seccomp: other interfaces", "fanotify_init"),
	abiAttempt("namespaces", "kernel: namespaces", "unshare", "clone-newuser", "setns"),
	scriptAttempt("clone3-flags", "kernel: namespaces", `
import glob
cg = os.open("/sys/fs/cgroup", os.O_RDONLY)
for name, flags in (("newuser", 0x10000000), ("newns", 0x00020000), ("newnet", 0x40000000), ("newpid", 0x20000000), ("newcgroup", 0x02000000), ("into-cgroup", 0x200000000)):
    args = (ctypes.c_uint64 * 11)()
    args[0] = flags
    args[4] = 17  # SIGCHLD
    args[10] = cg
    r = sc("clone3-" + name, 435, args, 88)
    if r == 0:
        os._exit(0)
    elif r > 0:
        os.waitpid(r, 0)
`, "clone3-newuser", "clone3-newns", "clone3-newnet", "clone3-newpid", "clone3-newcgroup"),
	{"setns-by-path", "kernel: namespaces", func(t *testing.T, s *suite, b string) {
		// The host process's namespaces, by its number: not there to open.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", fmt.Sprintf(`
for kind in ("net", "mnt", "pid", "user", "uts", "ipc", "cgroup"):
    attempt(f"open-host-{kind}", lambda kind=kind: os.close(os.open(f"/proc/%d/ns/{kind}", os.O_RDONLY)))
`, s.hostPid))
		refused(t, b, out, "open-host-net", "open-host-mnt", "open-host-pid", "open-host-user", "open-host-uts", "open-host-ipc", "open-host-cgroup")
	}},
	abiAttempt("memory-policy", "seccomp: other interfaces", "mbind", "set_mempolicy"),
	{"tiocsti", "seccomp: terminals", func(t *testing.T, s *suite, b string) {
		// Typing into a terminal someone else reads, with the request's
		// number in 32 bits and in 64.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		s.withABI(t, sbx)
		// Started in the background: not a session leader, it may setsid.
		out := run(t, sbx, "root", "/tmp/abi native tiocsti-high-bits & wait")
		out += py(t, sbx, "root", `
import pty, fcntl, termios
m, sl = pty.openpty()
attempt("tiocsti", lambda: fcntl.ioctl(sl, termios.TIOCSTI, b"X"))
os.set_blocking(m, False)
try:
    print("echoed:", os.read(m, 16))
except BlockingIOError:
    print("echoed: nothing")
`)
		want(t, out, "injected: nothing", "echoed: nothing")
		refused(t, b, out, "tiocsti-high-bits", "tiocsti")
	}},
	scriptAttempt("raw-and-packet-sockets", "kernel: sockets", `
for name, fam, typ, proto in (("raw-icmp", socket.AF_INET, socket.SOCK_RAW, 1), ("raw-tcp", socket.AF_INET, socket.SOCK_RAW, 6), ("raw-ip6", socket.AF_INET6, socket.SOCK_RAW, 58), ("packet", socket.AF_PACKET, socket.SOCK_RAW, 0x0300)):
    attempt(name, lambda: socket.socket(fam, typ, proto).close())
`, "raw-icmp", "raw-tcp", "raw-ip6", "packet"),
	abiAttempt("vsock-and-crypto-sockets", "kernel: sockets", "socket-vsock", "socket-alg"),
}

// abiEntry makes every refused call through entry (i386's int $0x80 or
// x32's numbers): the filter kills the process (exit 159, SIGSYS) or the
// call answers ENOSYS; on none may it succeed.
func abiEntry(t *testing.T, s *suite, b, entry string) {
	t.Helper()
	sbx := s.sandbox(t, b, sdk.CreateOptions{})
	s.withABI(t, sbx)
	classes := []string{"unshare", "clone-newuser", "setns", "mount", "umount2", "pivot_root", "fsopen", "open_tree",
		"open_by_handle_at", "name_to_handle_at", "bpf", "perf_event_open", "add_key", "keyctl", "request_key",
		"userfaultfd", "io_uring_setup", "fanotify_init", "init_module", "finit_module", "delete_module", "kexec_load",
		"reboot-cad-off", "swapon", "syslog", "acct", "settimeofday", "clock_settime", "process_vm_readv", "kcmp",
		"pidfd_getfd", "ioctl-tiocsti", "socket-vsock", "socket-alg"}
	out := run(t, sbx, "root", fmt.Sprintf(`for c in %s; do out=$(/tmp/abi %s $c 2>/dev/null); echo "$c rc=$? $out"; done`, strings.Join(classes, " "), entry))
	for _, c := range classes {
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, c+" rc=") {
				line = l
			}
		}
		if line == "" || strings.HasSuffix(line, ": OK") || !(strings.Contains(line, "rc=159") || strings.Contains(line, ": E")) {
			t.Errorf("%s through %s: %q, want the process killed or an error", c, entry, line)
		}
	}
	alive(t, sbx)
}
