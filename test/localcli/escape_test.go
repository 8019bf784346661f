package localcli

// TestEscape makes escape attempts from inside a sandbox, one subtest each,
// and checks the evidence a security reviewer would look for: the exact
// errno or error text of the refused operation, the host file content that
// must not appear, the host process that must not be visible, the host uid
// a sandbox's root really runs as, and host state (the hutch binary, the
// template, the hostname, boot id, core_pattern, release_agent) that must
// be unchanged afterwards. The areas covered:
//
//   - file system: host files through absolute paths, /proc/<pid>/root and
//     ../ traversal; leaked and inherited descriptors; the template under the
//     writable layer; the hutch binary through /proc/1/exe (CVE-2019-5736).
//   - processes: host and neighbour processes invisible; the init cannot be
//     ptraced, killed or have its memory read; kill -9 -1 stays inside.
//   - privileges: root inside is an unprivileged host uid; sudo is refused
//     under no_new_privs and harmless without it; the capability set.
//   - kernel: mount (incl. cgroup v1 release_agent), modules, /proc/sys and
//     /sys writes, sysrq, mknod, raw sockets, namespaces, the seccomp-denied
//     calls, TIOCSTI, hostname, reboot, the kernel log, masked /proc files,
//     /dev contents, host network interfaces.
//
// Attempts that could hurt the host if they succeeded (sysrq, drop_caches,
// /sys/power/state) only open the file for writing and never write to it.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// pyPrelude defines helpers for the Python attempts:
// sc(name, nr, *args) makes raw syscall nr and prints "name: OK" or
// "name: ERRNO"; attempt(name, fn, *args) does the same for a call that
// raises OSError.
const pyPrelude = `
import ctypes, errno, os, socket, stat, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def _arg(a):
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    return ctypes.c_long(a)
def sc(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    if r == 0 and nr in (56,):  # a clone that worked: the child leaves at once
        os._exit(0)
    e = ctypes.get_errno()
    print(f"{name}: {'OK' if r != -1 else errno.errorcode.get(e, str(e))}", flush=True)
def attempt(name, fn, *args):
    try:
        fn(*args)
        print(f"{name}: OK", flush=True)
    except OSError as e:
        print(f"{name}: {errno.errorcode.get(e.errno, str(e.errno))}", flush=True)
`

// visibilityScript is hutchtest.ProcessScan with the Python helpers.
const visibilityScript = pyPrelude + hutchtest.ProcessScan

// escapeCase is one attempt: argv runs in a fresh sandbox made with flags
// (as the template's user unless flags say --user), and check looks at
// what happened. With inherit set, hutch is started holding that file open
// as descriptor 10.
type escapeCase struct {
	name    string
	flags   []string
	argv    []string
	inherit *os.File
	check   func(t *testing.T, r result)
}

func TestEscape(t *testing.T) {
	root := []string{"--user", "root"}

	// Host-side fixtures every case may look at.

	// A secret that only isolation, not file permissions, keeps from the
	// sandbox: world-readable in a world-readable directory.
	secretDir, err := os.MkdirTemp("", "hutch-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secretDir) })
	if err := os.Chmod(secretDir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := "hutch-secret-" + randHex(t) + randHex(t)
	secretPath := filepath.Join(secretDir, "secret")
	if err := os.WriteFile(secretPath, []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	secretDirFile, err := os.Open(secretDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { secretDirFile.Close() })

	hostSleep, hostMark := startHostSleep(t)

	// A neighbour sandbox, a root sandbox and a sudo sandbox, each running a
	// marked sleep that the host can find.
	neighbourMark := sleepArg(t)
	neighbour := detachSandbox(t, nil, "sleep", neighbourMark)
	rootMark := sleepArg(t)
	detachSandbox(t, root, "sleep", rootMark)
	sudoMark := sleepArg(t)
	detachSandbox(t, []string{"--no-new-privileges=false"}, "sudo", "-n", "sleep", sudoMark)

	hutchSum := fileSHA256(t, hutchBin)
	base, err := template.Open(templates).Get("base")
	if err != nil {
		t.Fatal(err)
	}
	tplRoot := base.LowerDirs()[len(base.Layers)-1]
	tplPasswd := filepath.Join(tplRoot, "etc", "passwd")
	tplPasswdSum := fileSHA256(t, tplPasswd)
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	bootID := readTrim(t, "/proc/sys/kernel/random/boot_id")
	corePattern := readTrim(t, "/proc/sys/kernel/core_pattern")
	releaseAgent := "/sys/fs/cgroup/memory/release_agent"
	var releaseAgentBefore string
	if b, err := os.ReadFile(releaseAgent); err == nil {
		releaseAgentBefore = string(b)
	}
	hostName := "esc-host-" + randHex(t)
	etcMark := "pwned-" + randHex(t)

	// errnoOf returns the result printed for name by sc or attempt.
	errnoOf := func(out, name string) string {
		for _, l := range outLines(out) {
			if v, ok := strings.CutPrefix(l, name+": "); ok {
				return v
			}
		}
		return "(no result)"
	}
	wantErrno := func(t *testing.T, r result, want string, names ...string) {
		t.Helper()
		for _, n := range names {
			if got := errnoOf(r.Stdout, n); got != want {
				t.Errorf("%s: got %s, want %s", n, got, want)
			}
		}
	}
	// refused checks that each named attempt failed, whatever the errno.
	refused := func(t *testing.T, r result, names ...string) {
		t.Helper()
		for _, n := range names {
			if got := errnoOf(r.Stdout, n); got == "OK" || got == "(no result)" {
				t.Errorf("%s: got %s, want an error", n, got)
			}
		}
	}
	noSecret := func(t *testing.T, r result) {
		t.Helper()
		if strings.Contains(r.Stdout+r.Stderr, secret) {
			t.Errorf("the host secret of %s was read from inside the sandbox:\n%v", secretPath, r)
		}
	}
	// uidMapHost returns the first host id of a "0 <host> 65536" uid_map.
	uidMapHost := func(t *testing.T, uidMap string) int {
		t.Helper()
		f := strings.Fields(uidMap)
		if len(f) != 3 || f[0] != "0" || f[2] != "65536" {
			t.Fatalf("uid_map = %q, want \"0 <host uid> 65536\"", uidMap)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	dots := strings.Repeat("../", 8)
	cases := []escapeCase{
		{
			name:  "read-host-file",
			flags: append([]string{"-e", "P=" + secretPath, "-e", "D=" + secretDir}, root...),
			argv: []string{"/bin/sh", "-c", `
for p in "$P" "/proc/1/root$P" "/proc/self/root$P" "/proc/self/cwd/` + dots + `$P" "` + dots + `$P" "/proc/1/cwd/` + dots + `$P"; do
	if out=$(cat "$p" 2>&1); then echo "READ $p: $out"; else echo "DENIED $p: $out"; fi
done
grep -rsF -e hutch-secret- "/proc/self/root$D" "$D" /proc/[0-9]*/root"$D" && echo FOUND
cd ` + dots + ` && echo "cwd after ../ traversal: $(pwd)"`},
			check: func(t *testing.T, r result) {
				noSecret(t, r)
				denied := 0
				for _, l := range outLines(r.Stdout) {
					if strings.HasPrefix(l, "READ ") || l == "FOUND" {
						t.Errorf("escape: %s", l)
					}
					if strings.HasPrefix(l, "DENIED ") {
						denied++
						if !strings.Contains(l, "No such file or directory") && !strings.Contains(l, "Permission denied") {
							t.Errorf("got %q, want No such file or directory or Permission denied", l)
						}
					}
				}
				if denied != 6 {
					t.Errorf("got %d refused reads, want 6\n%v", denied, r)
				}
				wantLines(t, r, "cwd after ../ traversal: /")
			},
		},
		{
			name:  "host-processes",
			flags: []string{"-e", "M=" + hostMark, "-e", "C=" + sleepArg(t)},
			argv:  pyArgv(visibilityScript),
			check: func(t *testing.T, r result) {
				if len(hostPids("sleep", hostMark)) != 1 {
					t.Fatalf("the host's sleep %s is not running: the test proves nothing", hostMark)
				}
				wantLines(t, r, "control-seen: True", "marker-in-proc: []", "marker-in-ps: False")
			},
		},
		{
			name:  "neighbour-processes",
			flags: []string{"-e", "M=" + neighbourMark, "-e", "C=" + sleepArg(t)},
			argv:  pyArgv(visibilityScript),
			check: func(t *testing.T, r result) {
				if len(hostPids("sleep", neighbourMark)) != 1 {
					t.Fatalf("the neighbour's sleep %s is not running: the test proves nothing", neighbourMark)
				}
				wantLines(t, r, "control-seen: True", "marker-in-proc: []", "marker-in-ps: False")
			},
		},
		{
			name:  "mount",
			flags: root,
			argv: pyArgv(pyPrelude + `
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
def mnt(name, src, fstype, flags, data=None):
    ctypes.set_errno(0)
    r = libc.mount(src, b"/mnt", fstype, flags, data)
    e = ctypes.get_errno()
    print(f"{name}: {'OK' if r == 0 else errno.errorcode[e]}", flush=True)
mnt("mount-tmpfs", b"none", b"tmpfs", 0)
mnt("mount-proc", b"proc", b"proc", 0)
mnt("mount-bind-root", b"/", None, 4096 | 16384)  # MS_BIND|MS_REC
mnt("mount-remount", b"none", None, 32, None)  # MS_REMOUNT
sc("fsopen-tmpfs", 430, b"tmpfs", 0)
sc("open_tree-root", 428, -100, b"/", 1)
r = subprocess.run(["mount", "-t", "tmpfs", "none", "/mnt"], capture_output=True, text=True)
print("mount(8):", r.returncode, r.stderr.splitlines()[0] if r.stderr else "")
print("mounts-on-mnt:", sum(1 for l in open("/proc/self/mountinfo") if l.split()[4] == "/mnt"))
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "mount-tmpfs", "mount-proc", "mount-bind-root", "mount-remount", "fsopen-tmpfs", "open_tree-root")
				wantLines(t, r, "mount(8): 32 mount: /mnt: permission denied.", "mounts-on-mnt: 0")
			},
		},
		{
			name:  "load-kernel-module",
			flags: root,
			argv: pyArgv(pyPrelude + `
fd = os.open("/bin/true", os.O_RDONLY)
sc("init_module", 175, b"\x7fELF", 4, b"")
sc("finit_module", 313, fd, b"", 0)
sc("delete_module", 176, b"overlay", 0)
print("modules-dir:", os.path.exists("/lib/modules"))
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "init_module", "finit_module", "delete_module")
				wantLines(t, r, "modules-dir: False")
			},
		},
		{
			name:  "write-proc-sys",
			flags: root,
			argv: pyArgv(pyPrelude + `
for p in ["/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hostname"]:
    attempt(p, lambda p: os.close(os.open(p, os.O_WRONLY)), p)
r = subprocess.run(["sh", "-c", "echo '|/tmp/pwn' > /proc/sys/kernel/core_pattern"], capture_output=True, text=True)
print("sh:", r.stderr.strip())
`),
			check: func(t *testing.T, r result) {
				for _, p := range []string{"/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/hostname"} {
					want := []string{"EROFS", "EACCES"} // read-only bind; files of the host's root
					if _, err := os.Stat(p); err != nil {
						want = []string{"ENOENT"} // not in this host's kernel
					}
					if got := errnoOf(r.Stdout, p); !slices.Contains(want, got) {
						t.Errorf("%s: got %s, want one of %v", p, got, want)
					}
				}
				wantLines(t, r, "sh: sh: 1: cannot create /proc/sys/kernel/core_pattern: Read-only file system")
				if got := readTrim(t, "/proc/sys/kernel/core_pattern"); got != corePattern {
					t.Errorf("host core_pattern = %q, want %q (unchanged)", got, corePattern)
				}
			},
		},
		{
			name:  "write-sys",
			flags: root,
			argv: pyArgv(pyPrelude + `
for p in ["/sys/kernel/mm/ksm/run", "/sys/class/net/lo/mtu", "/sys/kernel/profiling", "/sys/power/state",
          "/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled"]:
    if os.path.lexists(p):
        attempt(p, lambda p: os.close(os.open(p, os.O_WRONLY)), p)
attempt("mkdir-sys-kernel", os.mkdir, "/sys/kernel/pwn")
`),
			check: func(t *testing.T, r result) {
				tried := 0
				for _, p := range []string{"/sys/kernel/mm/ksm/run", "/sys/class/net/lo/mtu", "/sys/kernel/profiling", "/sys/power/state", "/sys/kernel/uevent_helper", "/sys/kernel/mm/transparent_hugepage/enabled"} {
					if _, err := os.Stat(p); err != nil {
						continue // not on this host's kernel
					}
					tried++
					wantErrno(t, r, "EROFS", p)
				}
				if tried == 0 {
					t.Error("none of the /sys files exists on this host: the test proves nothing")
				}
				wantErrno(t, r, "EROFS", "mkdir-sys-kernel")
			},
		},
		{
			name:  "sysrq-trigger",
			flags: root,
			argv: pyArgv(pyPrelude + `
attempt("open-sysrq-trigger", lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY)))
attempt("create-sysrq-trigger", lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY | os.O_CREAT, 0o600)))
`),
			check: func(t *testing.T, r result) {
				if _, err := os.Stat("/proc/sysrq-trigger"); err == nil {
					// Read-only bind: EROFS (EACCES would also mean refused).
					for _, n := range []string{"open-sysrq-trigger", "create-sysrq-trigger"} {
						if got := errnoOf(r.Stdout, n); got != "EROFS" && got != "EACCES" {
							t.Errorf("%s: got %s, want EROFS or EACCES\n%v", n, got, r)
						}
					}
					return
				}
				t.Log("this host's kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ off); checking it cannot be made")
				wantErrno(t, r, "ENOENT", "open-sysrq-trigger", "create-sysrq-trigger")
			},
		},
		{
			name:  "raw-socket",
			flags: root,
			argv: pyArgv(pyPrelude + `
attempt("packet-raw", socket.socket, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
attempt("packet-dgram", socket.socket, socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(3))
attempt("inet-raw-icmp", socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
attempt("inet-raw-ipproto-raw", socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
attempt("inet6-raw", socket.socket, socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "packet-raw", "packet-dgram", "inet-raw-icmp", "inet-raw-ipproto-raw", "inet6-raw")
			},
		},
		{
			name: "host-network-interfaces",
			argv: pyArgv(pyPrelude + `
print("if_nameindex:", sorted(n for _, n in socket.if_nameindex()))
print("sys-class-net:", sorted(os.listdir("/sys/class/net")))
print("proc-net-dev:", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
r = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True)
print("ip-link:", sorted(l.split(":")[1].strip() for l in r.stdout.splitlines()))
`),
			check: func(t *testing.T, r result) {
				wantLines(t, r, "if_nameindex: ['lo']", "sys-class-net: ['lo']", "proc-net-dev: ['lo']", "ip-link: ['lo']")
				ifs, err := net.Interfaces()
				if err != nil {
					t.Fatal(err)
				}
				for _, i := range ifs {
					if i.Name != "lo" && strings.Contains(r.Stdout, "'"+i.Name+"'") {
						t.Errorf("host interface %s is visible in the sandbox", i.Name)
					}
				}
			},
		},
		{
			name:  "mknod",
			flags: root,
			argv: pyArgv(pyPrelude + `
nodes = [("/tmp/sda", stat.S_IFBLK, 8, 0), ("/dev/shm/mem", stat.S_IFCHR, 1, 1), ("/tmp/kmsg", stat.S_IFCHR, 1, 11), ("/dev/sda", stat.S_IFBLK, 8, 0)]
for p, kind, ma, mi in nodes:
    attempt("mknod " + p, os.mknod, p, 0o600 | kind, os.makedev(ma, mi))
for p, *_ in nodes:
    if os.path.lexists(p):
        attempt("open " + p, lambda p: print(len(os.read(os.open(p, os.O_RDONLY), 16))), p)
print("created:", [p for p, *_ in nodes if os.path.lexists(p)])
r = subprocess.run(["mknod", "/tmp/sdb", "b", "8", "16"], capture_output=True, text=True)
print("mknod(1):", r.stderr.strip())
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "mknod /tmp/sda", "mknod /dev/shm/mem", "mknod /tmp/kmsg", "mknod /dev/sda")
				wantLines(t, r, "created: []", "mknod(1): mknod: /tmp/sdb: Operation not permitted")
			},
		},
		{
			name:  "ptrace-init",
			flags: append([]string{"-e", "HP=" + strconv.Itoa(hostSleep.Process.Pid)}, root...),
			argv: pyArgv(pyPrelude + `
hp = int(os.environ["HP"])
sc("ptrace-attach-init", 101, 16, 1, 0, 0)
sc("ptrace-seize-init", 101, 0x4206, 1, 0, 0)
sc("ptrace-attach-host-pid", 101, 16, hp, 0, 0)
sc("process_vm_readv-init", 310, 1, 0, 0, 0, 0, 0)
attempt("open-init-mem", os.open, "/proc/1/mem", os.O_RDONLY)
attempt("open-init-environ", os.open, "/proc/1/environ", os.O_RDONLY)
print("pid1:", open("/proc/1/cmdline").read().split("\0")[0])
print("host-pid-visible:", os.path.exists(f"/proc/{hp}"))
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "ptrace-attach-init", "ptrace-seize-init", "process_vm_readv-init")
				wantErrno(t, r, "ESRCH", "ptrace-attach-host-pid")
				wantErrno(t, r, "EACCES", "open-init-mem", "open-init-environ")
				wantLines(t, r, "pid1: hutch-init", "host-pid-visible: False")
			},
		},
		{
			name:  "cgroup-release-agent",
			flags: root,
			argv: pyArgv(pyPrelude + `
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
def mnt(name, fstype, data):
    ctypes.set_errno(0)
    r = libc.mount(b"cgroup", b"/mnt", fstype, 0, data)
    print(f"{name}: {'OK' if r == 0 else errno.errorcode[ctypes.get_errno()]}", flush=True)
mnt("mount-cgroup-memory", b"cgroup", b"memory")
mnt("mount-cgroup-rdma", b"cgroup", b"rdma")
mnt("mount-cgroup-named", b"cgroup", b"none,name=pwn")
mnt("mount-cgroup2", b"cgroup2", None)
sc("unshare-cgroupns", 272, 0x02000000)
attempt("mkdir-sys-fs-cgroup", os.mkdir, "/sys/fs/cgroup/pwn")
attempt("create-release-agent", lambda: os.close(os.open("/sys/fs/cgroup/release_agent", os.O_WRONLY | os.O_CREAT, 0o700)))
print("sys-fs-cgroup:", os.listdir("/sys/fs/cgroup"))
w = [os.path.join(d, f) for d, _, fs in os.walk("/sys/fs/cgroup") for f in fs if os.access(os.path.join(d, f), os.W_OK)]
print("writable:", w)
print("own-cgroups:", sorted(set(l.strip().split(":", 2)[2] for l in open("/proc/self/cgroup"))))
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "mount-cgroup-memory", "mount-cgroup-rdma", "mount-cgroup-named", "mount-cgroup2", "unshare-cgroupns")
				refused(t, r, "mkdir-sys-fs-cgroup", "create-release-agent")
				wantLines(t, r, "sys-fs-cgroup: []", "writable: []", "own-cgroups: ['/']")
				if b, err := os.ReadFile(releaseAgent); err == nil && string(b) != releaseAgentBefore {
					t.Errorf("host %s = %q, want %q (unchanged)", releaseAgent, b, releaseAgentBefore)
				}
			},
		},
		{
			name:  "overwrite-hutch-binary",
			flags: root,
			argv: pyArgv(pyPrelude + `
attempt("open-exe-write", os.open, "/proc/1/exe", os.O_WRONLY)
attempt("open-exe-rdwr", os.open, "/proc/1/exe", os.O_RDWR)
attempt("open-exe-read", os.open, "/proc/1/exe", os.O_RDONLY)
attempt("readlink-exe", os.readlink, "/proc/1/exe")
attempt("list-map-files", os.listdir, "/proc/1/map_files")
attempt("list-init-root", os.listdir, "/proc/1/root/")
try:
    fds = os.listdir("/proc/1/fd")
except OSError:
    fds = []
opened = []
for f in fds:
    try:
        os.close(os.open(f"/proc/1/fd/{f}", os.O_RDONLY))
        opened.append(f)
    except OSError:
        pass
print("init-fds-opened:", opened)
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EACCES", "open-exe-write", "open-exe-rdwr", "open-exe-read", "readlink-exe", "list-map-files", "list-init-root")
				wantLines(t, r, "init-fds-opened: []")
				if got := fileSHA256(t, hutchBin); got != hutchSum {
					t.Errorf("hutch binary sha256 = %s, want %s (unchanged)", got, hutchSum)
				}
			},
		},
		{
			name: "leaked-fds",
			argv: pyArgv(`
import os
for f in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        print(f"fd {f} -> {os.readlink('/proc/self/fd/' + f)}")
    except OSError:
        pass  # the descriptor of the listing itself, closed by now
`),
			check: func(t *testing.T, r result) {
				checkFds(t, r, secretDir)
			},
		},
		{
			name:    "inherited-host-fd",
			flags:   root,
			inherit: secretDirFile,
			argv: pyArgv(`
import os
for f in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        print(f"fd {f} -> {os.readlink('/proc/self/fd/' + f)}")
    except OSError:
        pass
for p in ["/proc/self/fd/10/secret", "/proc/1/fd/10/secret"]:
    try:
        print("READ", p, open(p).read().strip())
    except OSError as e:
        print("DENIED", p, e.strerror)
`),
			check: func(t *testing.T, r result) {
				noSecret(t, r)
				checkFds(t, r, secretDir)
			},
		},
		{
			name:  "root-is-unprivileged-on-host",
			flags: root,
			argv:  []string{"/bin/sh", "-c", "id -u; cat /proc/self/uid_map"},
			check: func(t *testing.T, r result) {
				out := outLines(r.Stdout)
				if len(out) != 2 || out[0] != "0" {
					t.Fatalf("id -u and uid_map as --user root: got %q, want 0 and a map\n%v", out, r)
				}
				if h := uidMapHost(t, out[1]); h < 1048576 {
					t.Errorf("sandbox root maps to host uid %d, want >= 1048576", h)
				}
				// A detached root sandbox's sleep, seen from the host.
				pid := waitHostPid(t, "sleep", rootMark)
				hostUID := uidMapHost(t, readTrim(t, fmt.Sprintf("/proc/%d/uid_map", pid)))
				for _, f := range []string{"Uid", "Gid"} {
					ids := procStatus(t, pid, f)
					for _, s := range ids {
						if n, _ := strconv.Atoi(s); n != hostUID || n < 1048576 {
							t.Errorf("host /proc/%d/status %s = %v, want all %d (>= 1048576, never 0)", pid, f, ids, hostUID)
							break
						}
					}
				}
			},
		},
		{
			name: "sudo-with-no-new-privileges",
			argv: []string{"/bin/sh", "-c", `id -u; sudo -n id -u; echo "sudo rc=$?"; sudo -n cat /etc/shadow; grep NoNewPrivs /proc/self/status`},
			check: func(t *testing.T, r result) {
				var out []string
				for _, l := range outLines(r.Stdout) {
					out = append(out, strings.Join(strings.Fields(l), " "))
				}
				if want := []string{"1000", "sudo rc=1", "NoNewPrivs: 1"}; !slices.Equal(out, want) {
					t.Errorf("got %q, want %q (sudo refused, still uid 1000)\n%v", out, want, r)
				}
				if !strings.Contains(r.Stderr, `"no new privileges" flag is set`) {
					t.Errorf("sudo's refusal does not mention no new privileges:\n%v", r)
				}
				if strings.Contains(r.Stdout, "root:") {
					t.Errorf("/etc/shadow was read:\n%v", r)
				}
			},
		},
		{
			name:  "sudo-without-no-new-privileges",
			flags: []string{"--no-new-privileges=false"},
			argv:  []string{"/bin/sh", "-c", "id -u; sudo -n id -u; sudo -n cat /proc/self/uid_map"},
			check: func(t *testing.T, r result) {
				out := outLines(r.Stdout)
				if len(out) != 3 || out[0] != "1000" || out[1] != "0" {
					t.Fatalf("got %q, want 1000, 0 (sudo works) and a uid map\n%v", out, r)
				}
				if h := uidMapHost(t, out[2]); h < 1048576 {
					t.Errorf("sudo's root maps to host uid %d, want >= 1048576", h)
				}
				// The detached sandbox's `sudo -n sleep`: the sleep runs as the
				// sandbox's root, which the host sees as an unprivileged uid.
				pid := waitHostPid(t, "sleep", sudoMark)
				hostUID := uidMapHost(t, readTrim(t, fmt.Sprintf("/proc/%d/uid_map", pid)))
				if ids := procStatus(t, pid, "Uid"); hostUID < 1048576 || !slices.Equal(ids, []string{strconv.Itoa(hostUID), strconv.Itoa(hostUID), strconv.Itoa(hostUID), strconv.Itoa(hostUID)}) {
					t.Errorf("host uids of sudo's sleep = %v, want all %d (>= 1048576)", ids, hostUID)
				}
			},
		},
		{
			name:  "nested-namespaces",
			flags: root,
			argv: pyArgv(pyPrelude + `
for f in ["-U", "-r", "-m", "-p", "-n", "-i", "-u", "-C", "-T"]:
    r = subprocess.run(["unshare", f, "true"], capture_output=True, text=True)
    print(f"unshare {f}: {r.returncode} {r.stderr.strip()}")
r = subprocess.run(["nsenter", "-t", "1", "-m", "true"], capture_output=True, text=True)
print(f"nsenter: {r.returncode}")
sc("clone-newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
sc("clone-newns", 56, 0x00020000 | 17, 0, 0, 0, 0)
sc("unshare-newuser", 272, 0x10000000)
sc("setns-mnt", 308, os.open("/proc/self/ns/mnt", os.O_RDONLY), 0)
`),
			check: func(t *testing.T, r result) {
				for _, f := range []string{"-U", "-r", "-m", "-p", "-n", "-i", "-u", "-C", "-T"} {
					wantLines(t, r, "unshare "+f+": 1 unshare: unshare failed: Operation not permitted")
				}
				wantLines(t, r, "nsenter: 1")
				wantErrno(t, r, "EPERM", "clone-newuser", "clone-newns", "unshare-newuser", "setns-mnt")
			},
		},
		{
			name:  "denied-syscalls",
			flags: root,
			argv: pyArgv(pyPrelude + `
sc("keyctl", 250, 0, -3, 0)
sc("add_key", 248, b"user", b"k", b"v", 1, -3)
sc("bpf", 321, 0, 0, 0)
sc("perf_event_open", 298, 0, 0, -1, -1, 0)
sc("userfaultfd", 323, 0)
sc("io_uring_setup", 425, 1, 0)
sc("kexec_load", 246, 0, 0, 0, 0)
sc("kexec_file_load", 320, -1, -1, 0, b"", 0)
sc("open_by_handle_at", 304, -1, 0, 0)
sc("swapon", 167, b"/tmp/swap", 0)
sc("acct", 163, b"/tmp/acct")
sc("settimeofday", 164, 0, 0)
sc("clock_settime", 227, 0, 0)
sc("clone3", 435, 0, 0)
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "keyctl", "add_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
					"kexec_load", "kexec_file_load", "open_by_handle_at", "swapon", "acct", "settimeofday", "clock_settime")
				wantErrno(t, r, "ENOSYS", "clone3")
			},
		},
		{
			name: "tiocsti",
			argv: pyArgv(pyPrelude + `
import fcntl, pty, termios, tty
m, s = pty.openpty()
tty.setraw(s)
name = os.ttyname(s)
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(name, os.O_RDWR)  # becomes the controlling terminal
    attempt("tiocsti", fcntl.ioctl, fd, termios.TIOCSTI, b"X")
    attempt("tioclinux", fcntl.ioctl, fd, 0x541C, b"\x02")
    os._exit(0)
os.waitpid(pid, 0)
os.set_blocking(s, False)
try:
    print("injected:", os.read(s, 64))
except BlockingIOError:
    print("injected: nothing")
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "tiocsti", "tioclinux")
				wantLines(t, r, "injected: nothing")
			},
		},
		{
			name:  "hostname",
			flags: append([]string{"--name", hostName}, root...),
			argv: pyArgv(pyPrelude + `
print("before:", socket.gethostname())
attempt("sethostname", socket.sethostname, "pwned")
attempt("write-proc-hostname", lambda: open("/proc/sys/kernel/hostname", "w").write("pwned"))
r = subprocess.run(["hostname", "pwned"], capture_output=True, text=True)
print("hostname(1):", r.stderr.strip())
print("after:", socket.gethostname())
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "sethostname")
				wantErrno(t, r, "EROFS", "write-proc-hostname")
				wantLines(t, r, "before: "+hostName, "after: "+hostName, "hostname(1): hostname: you must be root to change the host name")
				if got, _ := os.Hostname(); got != hostname {
					t.Errorf("host hostname = %q, want %q (unchanged)", got, hostname)
				}
			},
		},
		{
			name:  "reboot",
			flags: root,
			argv: pyArgv(pyPrelude + `
sc("reboot-restart", 169, 0xfee1dead, 672274793, 0x01234567, 0)
sc("reboot-power-off", 169, 0xfee1dead, 672274793, 0x4321fedc, 0)
sc("reboot-cad-off", 169, 0xfee1dead, 672274793, 0, 0)
print("still running")
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "reboot-restart", "reboot-power-off", "reboot-cad-off")
				wantLines(t, r, "still running")
				if r.Code != 0 {
					t.Errorf("exit code %d, want 0 (the sandbox kept running)", r.Code)
				}
				if got := readTrim(t, "/proc/sys/kernel/random/boot_id"); got != bootID {
					t.Errorf("host boot_id = %s, want %s", got, bootID)
				}
			},
		},
		{
			name:  "write-etc",
			flags: root,
			argv: []string{"/bin/sh", "-c", `echo "` + etcMark + `:x:0:0::/:/bin/sh" >> /etc/passwd && echo planted > /etc/` + etcMark + ` &&
grep -c "` + etcMark + `" /etc/passwd && cat /etc/` + etcMark},
			check: func(t *testing.T, r result) {
				if out := outLines(r.Stdout); !slices.Equal(out, []string{"1", "planted"}) {
					t.Fatalf("writes inside the sandbox: got %q, want [1 planted]\n%v", out, r)
				}
				if got := fileSHA256(t, tplPasswd); got != tplPasswdSum {
					t.Errorf("template %s changed: sha256 %s, want %s", tplPasswd, got, tplPasswdSum)
				}
				if _, err := os.Lstat(filepath.Join(tplRoot, "etc", etcMark)); !os.IsNotExist(err) {
					t.Errorf("template has /etc/%s (err %v): the write reached the template", etcMark, err)
				}
				next := sh(t, "grep -c "+etcMark+" /etc/passwd; test -e /etc/"+etcMark+" && echo present || echo absent")
				if out := outLines(next.Stdout); !slices.Equal(out, []string{"0", "absent"}) {
					t.Errorf("a second sandbox sees the first one's writes: got %q, want [0 absent]\n%v", out, next)
				}
			},
		},
		{
			name:  "kill-init",
			flags: root,
			argv:  []string{"/bin/sh", "-c", `kill -9 1; echo "kill rc=$?"; kill -STOP 1; sleep 0.2; echo "pid1: $(tr '\0' ' ' < /proc/1/cmdline)$(awk '{print $3}' /proc/1/stat)"; echo alive`},
			check: func(t *testing.T, r result) {
				wantLines(t, r, "pid1: hutch-init S", "alive")
				if r.Code != 0 {
					t.Errorf("exit code %d, want 0 (the sandbox survived)\n%v", r.Code, r)
				}
			},
		},
		{
			name:  "kill-everything",
			flags: root,
			argv:  []string{"/bin/sh", "-c", `sleep 1000 & bg=$!; kill -9 -1; echo "kill rc=$?"; wait $bg; echo "sandbox sleep: $?"`},
			check: func(t *testing.T, r result) {
				// kill -1 reached the sandbox's own processes (137 = SIGKILL)...
				wantLines(t, r, "kill rc=0", "sandbox sleep: 137")
				// ... and nothing outside.
				if st := processState(hostSleep.Process.Pid); st == "" || st == "Z" {
					t.Errorf("host sleep (pid %d) state %q: killed from inside a sandbox", hostSleep.Process.Pid, st)
				}
				if st, ok := sandboxStatus(t, neighbour); !ok || st.State != "running" {
					t.Errorf("neighbour sandbox %s: got %+v, want running", neighbour, st)
				}
			},
		},
		{
			name: "kernel-log",
			argv: pyArgv(pyPrelude + `
sc("syslog-read-all", 103, 3, 0, 0)
sc("syslog-clear", 103, 5, 0, 0)
attempt("open-proc-kmsg", os.open, "/proc/kmsg", os.O_RDONLY)
print("dev-kmsg:", os.path.exists("/dev/kmsg"))
r = subprocess.run(["dmesg"], capture_output=True, text=True)
print("dmesg:", r.returncode, r.stderr.strip(), len(r.stdout))
`),
			check: func(t *testing.T, r result) {
				wantErrno(t, r, "EPERM", "syslog-read-all", "syslog-clear")
				wantErrno(t, r, "EACCES", "open-proc-kmsg")
				wantLines(t, r, "dev-kmsg: False", "dmesg: 1 dmesg: read kernel buffer failed: Operation not permitted 0")
			},
		},
		{
			name:  "masked-proc",
			flags: root,
			argv: pyArgv(pyPrelude + `
for p in ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/interrupts", "/proc/latency_stats", "/proc/timer_stats"]:
    try:
        print(f"{p}: {len(open(p, 'rb').read())} bytes")
    except OSError as e:
        print(f"{p}: {errno.errorcode[e.errno]}")
for d in ["/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware"]:
    try:
        print(f"{d}: {len(os.listdir(d))} entries")
    except OSError as e:
        print(f"{d}: {errno.errorcode[e.errno]}")
`),
			check: func(t *testing.T, r result) {
				for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/interrupts", "/proc/latency_stats", "/proc/timer_stats"} {
					want := "0 bytes"
					if _, err := os.Stat(p); err != nil {
						want = "ENOENT" // the host's kernel has no such file
					}
					if got := errnoOf(r.Stdout, p); got != want {
						t.Errorf("%s: got %s, want %s", p, got, want)
					}
				}
				for _, d := range []string{"/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware"} {
					want := "0 entries"
					if _, err := os.Stat(d); err != nil {
						want = "ENOENT"
					}
					if got := errnoOf(r.Stdout, d); got != want {
						t.Errorf("%s: got %s, want %s", d, got, want)
					}
				}
				if b, _ := os.ReadFile("/proc/keys"); len(b) == 0 {
					t.Log("note: the host's /proc/keys is empty too")
				}
			},
		},
		{
			name: "dev-nodes",
			argv: pyArgv(`
import os, stat
for d, dirs, files in os.walk("/dev"):
    for f in sorted(dirs + files):
        p = os.path.join(d, f)
        st = os.lstat(p)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            kind = "c" if stat.S_ISCHR(st.st_mode) else "b"
            print(f"{kind} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} {p}")
`),
			check: func(t *testing.T, r result) {
				allowed := map[string]bool{
					"c 1:3 /dev/null": true, "c 1:5 /dev/zero": true, "c 1:7 /dev/full": true,
					"c 1:8 /dev/random": true, "c 1:9 /dev/urandom": true, "c 5:0 /dev/tty": true,
					"c 5:2 /dev/pts/ptmx": true,
				}
				got := outLines(r.Stdout)
				for _, l := range got {
					if !allowed[l] {
						t.Errorf("unexpected device in the sandbox: %s", l)
					}
				}
				if len(got) != len(allowed) {
					t.Errorf("devices: got %q, want the %d of %v", got, len(allowed), allowed)
				}
			},
		},
		{
			// The host's data dir names nothing inside: overlay layers are
			// mounted by relative paths, and no descriptor of a sandbox
			// process is a host file.
			name:  "host-paths",
			flags: root,
			argv: []string{"/bin/sh", "-c", `cat /proc/self/mountinfo /proc/1/mountinfo 2>&1
for f in /proc/[0-9]*/fd/* /proc/[0-9]*/cwd /proc/[0-9]*/root /proc/[0-9]*/exe; do readlink "$f"; done 2>/dev/null
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n'
echo listed`},
			check: func(t *testing.T, r result) {
				wantLines(t, r, "listed")
				for _, host := range []string{dataDir, filepath.Dir(hutchBin), templates} {
					if strings.Contains(r.Stdout, host) {
						t.Errorf("the host path %s is visible inside", host)
					}
				}
				if !strings.Contains(r.Stdout, "lowerdir=lower/0,upperdir=upper,workdir=work") {
					t.Errorf("the root's overlay options are not the relative layer names")
				}
			},
		},
		{
			name:  "boot-id",
			flags: root,
			argv:  []string{"/bin/sh", "-c", "cat /proc/sys/kernel/random/boot_id; echo x > /proc/sys/kernel/random/boot_id"},
			check: func(t *testing.T, r result) {
				got := outLines(r.Stdout)
				if len(got) != 1 || len(got[0]) != 36 || got[0] == bootID {
					t.Errorf("boot_id = %q, want a UUID other than the host's %s", got, bootID)
				}
				if !strings.Contains(r.Stderr, "Read-only file system") {
					t.Errorf("writing boot_id: %q, want read-only", r.Stderr)
				}
				if other := outLines(sh(t, "cat /proc/sys/kernel/random/boot_id").Stdout); len(got) == 1 && slices.Equal(other, got) {
					t.Errorf("two sandboxes share the boot id %v", got)
				}
			},
		},
		{
			name: "ping-as-user",
			argv: []string{"/bin/sh", "-c", "ping -c 1 -W 5 127.0.0.1 >/dev/null; echo rc=$?; cat /proc/sys/net/ipv4/ping_group_range"},
			check: func(t *testing.T, r result) {
				wantLines(t, r, "rc=0", "0\t65535")
			},
		},
		{
			name:  "ping-as-root",
			flags: root,
			argv:  []string{"/bin/sh", "-c", "ping -c 1 -W 5 127.0.0.1 >/dev/null; echo rc=$?"},
			check: func(t *testing.T, r result) {
				wantLines(t, r, "rc=0")
			},
		},
		{
			name:  "capabilities",
			flags: root,
			argv:  []string{"/bin/sh", "-c", "grep -E '^Cap(Eff|Bnd|Amb)' /proc/self/status"},
			check: func(t *testing.T, r result) {
				// Docker's default set less NET_RAW.
				const want = "00000000a80405fb"
				wantLines(t, r, "CapEff:\t"+want, "CapBnd:\t"+want, "CapAmb:\t0000000000000000")
				eff, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(outLines(r.Stdout)[0], "CapEff:")), 16, 64)
				if err != nil {
					t.Fatalf("CapEff: %v\n%v", err, r)
				}
				for name, bit := range map[string]uint{"SYS_ADMIN": 21, "SYS_MODULE": 16, "SYS_PTRACE": 19, "NET_ADMIN": 12, "NET_RAW": 13, "SYS_RAWIO": 17, "DAC_READ_SEARCH": 2, "SYS_BOOT": 22, "SYSLOG": 34} {
					if eff&(1<<bit) != 0 {
						t.Errorf("root in the sandbox has CAP_%s", name)
					}
				}
			},
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var r result
			if tc.inherit != nil {
				r = runInheriting(t, tc.inherit, 10, tc.flags, tc.argv...)
			} else {
				r = runSandbox(t, tc.flags, tc.argv...)
			}
			t.Logf("%v", r)
			tc.check(t, r)
		})
	}
}

// checkFds checks a listing of "fd N -> target" lines: only 0, 1 and 2 may
// be open in the sandbox's first process, each /dev/null or a pipe, and no
// descriptor may name a host path (the data dir, the hutch binary's
// directory, hostDir).
func checkFds(t *testing.T, r result, hostDir string) {
	t.Helper()
	seen := map[string]bool{}
	for _, l := range outLines(r.Stdout) {
		rest, ok := strings.CutPrefix(l, "fd ")
		if !ok {
			continue
		}
		fd, target, ok := strings.Cut(rest, " -> ")
		if !ok {
			t.Errorf("bad fd line %q", l)
			continue
		}
		seen[fd] = true
		switch {
		case fd != "0" && fd != "1" && fd != "2":
			t.Errorf("leaked descriptor %s -> %s in the sandbox's first process", fd, target)
		case target != "/dev/null" && !strings.HasPrefix(target, "pipe:["):
			t.Errorf("fd %s -> %s, want /dev/null or a pipe", fd, target)
		}
		for _, host := range []string{dataDir, filepath.Dir(hutchBin), hostDir} {
			if strings.HasPrefix(target, host) {
				t.Errorf("fd %s names the host path %s", fd, target)
			}
		}
	}
	for _, fd := range []string{"0", "1", "2"} {
		if !seen[fd] {
			t.Errorf("fd %s missing from the listing\n%v", fd, r)
		}
	}
}

// abiClasses are the attempts of testdata/abi: one per class of the
// seccomp deny-list and per argument rule, and getpid as the control.
var abiClasses = []string{
	"getpid", "unshare", "clone-newuser", "setns", "mount", "umount2", "pivot_root",
	"fsopen", "open_tree", "move_mount", "mount_setattr", "statmount", "listmount",
	"open_tree_attr", "listns", "open_by_handle_at", "name_to_handle_at", "bpf",
	"perf_event_open", "add_key", "keyctl", "request_key", "userfaultfd",
	"io_uring_setup", "io_setup", "fanotify_init", "init_module", "finit_module", "delete_module",
	"kexec_load", "reboot-cad-off", "swapon", "syslog", "acct", "settimeofday",
	"clock_settime", "process_vm_readv", "kcmp", "pidfd_getfd", "mbind",
	"set_mempolicy", "personality", "ioctl-tiocsti", "socket-vsock", "socket-alg",
}

// TestEscapeSyscallABIs makes every denied call through each system call
// entry a 64-bit process has: the native one, the i386 one (int $0x80,
// which a filter that checks only x86_64 numbers lets through) and x32's
// (numbers with bit 30 set). As the default user and as the sandbox's
// root: the i386 entry kills the process whatever the call (getpid too),
// x32 answers ENOSYS, and natively each call fails as the policy says.
func TestEscapeSyscallABIs(t *testing.T) {
	if goruntime.GOARCH != "amd64" {
		t.Skip("the i386 and x32 entries are amd64's")
	}
	bin := filepath.Join(t.TempDir(), "abi")
	build := exec.Command("go", "build", "-o", bin, "../internal/abi")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build testdata/abi: %v\n%s", err, out)
	}
	prog, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	script := `cat > /tmp/abi && chmod +x /tmp/abi || exit 1
for c in ` + strings.Join(abiClasses, " ") + `; do
	for abi in i386 x32 native; do
		out=$(/tmp/abi $abi $c 2>/dev/null); echo "$abi $c rc=$? $out"
	done
done
/tmp/abi native tiocsti-high-bits`
	native := func(class string) string {
		switch class {
		case "getpid":
			return "OK"
		case "socket-vsock", "socket-alg":
			return "EAFNOSUPPORT"
		case "io_setup":
			return "ENOSYS"
		}
		return "EPERM"
	}
	for _, user := range []string{"user", "root"} {
		t.Run(user, func(t *testing.T) {
			r := hutch(t, string(prog), "run", "--rm", "-i", "--user", user, "--", "/bin/sh", "-c", script)
			if r.Code != 0 {
				t.Fatalf("the attempts did not run:\n%v", r)
			}
			for _, c := range abiClasses {
				// 159 = 128 + SIGSYS: killed by the filter, before the call.
				want := []string{"i386 " + c + " rc=159 ", "x32 " + c + " rc=0 " + c + ": ENOSYS", "native " + c + " rc=0 " + c + ": " + native(c)}
				for _, w := range want {
					if !hasLine(r.Stdout, strings.TrimSpace(w)) {
						t.Errorf("want %q", w)
					}
				}
			}
			// TIOCSTI with bits above the 32 the kernel reads.
			wantLines(t, r, "tiocsti-high-bits: EPERM", "injected: nothing")
			if t.Failed() {
				t.Logf("%v", r)
			}
		})
	}
}

// TestEscapePtyExhaustion: ptys come from one host-wide pool; a sandbox
// that opens as many as it can stops at its own bound, and another sandbox
// (and the host) can still open one.
func TestEscapePtyExhaustion(t *testing.T) {
	const hog = `
import os, errno, time
held = []
try:
    while len(held) < 100000:
        held.append(os.openpty())
except OSError as e:
    print("held", len(held), errno.errorcode[e.errno], flush=True)
time.sleep(1000)
`
	id := detachSandbox(t, nil, "python3", "-c", hog)
	out := waitOutput(t, id, func(out []byte) bool { return bytes.Contains(out, []byte("held")) })
	var n int
	var errName string
	if _, err := fmt.Sscanf(string(out), "held %d %s", &n, &errName); err != nil {
		t.Fatalf("the hog's output: %q", out)
	}
	t.Logf("one sandbox held %d ptys, then %s", n, errName)
	if n > 256 {
		t.Errorf("one sandbox holds %d ptys, want at most 256", n)
	}
	r := runSandbox(t, nil, "python3", "-c", "import os; os.openpty(); print('openpty: OK')")
	wantLines(t, r, "openpty: OK")
}

// TestEscapeSharedUserBudgets: the kernel's per-user budgets (inotify
// instances, POSIX message queue bytes) are charged to each sandbox's own
// host uid, the owner of its user namespace: a sandbox that uses up its
// own leaves them to other sandboxes and to the host's root.
func TestEscapeSharedUserBudgets(t *testing.T) {
	const hog = `
import ctypes, errno, os, time
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
n = 0
while n < 100000 and libc.inotify_init() >= 0:
    n += 1
print("inotify", n, errno.errorcode[ctypes.get_errno()], flush=True)
rt.mq_open.restype = ctypes.c_int
q = 0
while q < 1000 and rt.mq_open(("/hog%d" % q).encode(), os.O_CREAT | os.O_RDWR, 0o600, None) >= 0:
    q += 1
print("mqueues", q, errno.errorcode[ctypes.get_errno()], flush=True)
time.sleep(1000)
`
	const probe = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
rt = ctypes.CDLL("librt.so.1", use_errno=True)
fd = libc.inotify_init()
print("inotify:", "OK" if fd >= 0 else errno.errorcode[ctypes.get_errno()])
q = rt.mq_open(b"/probe", os.O_CREAT | os.O_RDWR, 0o600, None)
print("mq_open:", "OK" if q >= 0 else errno.errorcode[ctypes.get_errno()])
`
	for _, user := range []string{"user", "root"} {
		t.Run(user, func(t *testing.T) {
			id := detachSandbox(t, []string{"--user", user}, "python3", "-c", hog)
			out := waitOutput(t, id, func(out []byte) bool { return bytes.Contains(out, []byte("mqueues")) })
			t.Logf("the hog: %s", out)
			if !bytes.Contains(out, []byte("inotify ")) || !bytes.Contains(out, []byte("mqueues ")) {
				t.Fatalf("the hog did not run: %q", out)
			}
			// Another sandbox, as the same user inside.
			r := runSandbox(t, []string{"--user", user}, "python3", "-c", probe)
			wantLines(t, r, "inotify: OK", "mq_open: OK")
			// The host's root.
			fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
			if err != nil {
				t.Errorf("the host's root cannot make an inotify instance while a sandbox holds its own: %v", err)
			} else {
				syscall.Close(fd)
			}
		})
	}
}

// TestEscapeNeighbourDisks: a sandbox's disk is a loop device whose
// backing file names the host's data dir and the sandbox's id; nothing of
// it may be readable from another sandbox (the review listed every
// neighbour's id through /sys/block/loop*/loop/backing_file), nor the
// host's kernel command line; nor what the kernel counts per disk and per
// ext4 file system (review 10 watched a neighbour's writes in
// /sys/fs/ext4/loop*/lifetime_write_kbytes and /proc/diskstats).
func TestEscapeNeighbourDisks(t *testing.T) {
	neighbour := detachSandbox(t, []string{"--disk", "64M"}, "sleep", "1000")
	dirs := []string{"/sys/block", "/sys/class/block", "/sys/dev/block", "/sys/devices/virtual/block",
		"/sys/fs/ext4", "/proc/fs/ext4", "/proc/fs/jbd2", "/sys/class/bdi", "/sys/devices/virtual/bdi"}
	r := runSandbox(t, []string{"--user", "root", "--disk", "64M"}, "/bin/sh", "-c", `
for d in `+strings.Join(dirs, " ")+`; do if [ -e $d ]; then echo "$d: $(ls -A $d 2>&1 | tr '\n' ' ')"; else echo "$d:"; fi; done
cat /sys/block/*/loop/backing_file /sys/devices/virtual/block/*/loop/backing_file 2>/dev/null
grep -rs loop /proc/self/mountinfo
echo "diskstats: $(wc -c < /proc/diskstats)"
echo "partitions: $(wc -c < /proc/partitions)"
echo "cmdline: $(wc -c < /proc/cmdline)"
echo end`)
	wantLines(t, r, "end", "cmdline: 0", "diskstats: 0", "partitions: 0")
	for _, d := range dirs {
		wantLines(t, r, d+":")
	}
	for _, secret := range []string{neighbour, dataDir, "disk.img"} {
		if strings.Contains(r.Stdout+r.Stderr, secret) {
			t.Errorf("%q is visible from another sandbox:\n%v", secret, r)
		}
	}
}
