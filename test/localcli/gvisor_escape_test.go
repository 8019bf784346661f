package localcli

// TestGvisorEscape makes escape attempts from inside sandboxes of the
// gvisor runtime (`--runtime gvisor`, runsc with systrap and hostinet in a
// network namespace of the shim's), one subtest each, and checks the
// evidence: the errno of the refused operation, host content that must not
// appear, host files and processes that must be unchanged. Each subtest
// fails if the escape works.
//
// The CLI's sandboxes (`hutch run`) cover what every gvisor sandbox has:
// its first process's output, PID 1's descriptors, the sandbox binary and
// the template under the root, the i386 and x32 entries, the host's
// network and processes, the pids and disk limits. A `hutch serve` on the
// gvisor runtime covers what only sandboxes with envd have: the link on
// PID 1's standard input (the host-only control channel and envd's access
// token travel over it), the sandbox's shim at its other end, and the
// mounts the backend builds under the sandbox's state directory (a volume,
// the layer of mount points), which no other host user may reach.

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// gv are the flags of a gvisor sandbox.
var gv = []string{"--runtime", "gvisor"}

// gvFlags is gv and more.
func gvFlags(more ...string) []string { return append(append([]string(nil), gv...), more...) }

// gvSandboxDir is a gvisor sandbox's state directory on the host.
func gvSandboxDir(id string) string { return filepath.Join(dataDir, "gvisor", "sandboxes", id) }

// gvOutputSizes returns the sizes of the host files a detached gvisor
// sandbox's output goes to (output.log, output.1.log, ...).
func gvOutputSizes(t testing.TB, id string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	ms, _ := filepath.Glob(filepath.Join(gvSandboxDir(id), "output*.log"))
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil {
			out[filepath.Base(m)] = fi.Size()
		}
	}
	return out
}

// gvOutputTail returns the last 64 KiB of each output file of a detached
// gvisor sandbox (never the whole file: the sandbox may have grown it).
func gvOutputTail(id string) []byte {
	var all []byte
	ms, _ := filepath.Glob(filepath.Join(gvSandboxDir(id), "output*.log"))
	for _, m := range ms {
		f, err := os.Open(m)
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err == nil {
			off := max(fi.Size()-64<<10, 0)
			b := make([]byte, fi.Size()-off)
			n, _ := f.ReadAt(b, off)
			all = append(all, b[:n]...)
		}
		f.Close()
	}
	return all
}

// gvWaitOutput waits (up to 20 s) for want in the output of a detached
// gvisor sandbox and returns what its files end with then.
func gvWaitOutput(t testing.TB, id, want string) string {
	t.Helper()
	var out []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out = gvOutputTail(id); bytes.Contains(out, []byte(want)) {
			break
		}
	}
	return string(bytes.ReplaceAll(out, []byte{0}, nil))
}

// gvPrelude defines, for the Python attempts: sc(nr, *args), a raw system
// call returning the result or -errno; name(r), "OK" or the errno's name;
// attempt(label, fn, *args), which prints "label: OK" or "label: ERRNO".
const gvPrelude = `
import ctypes, errno, os, signal, socket, stat, struct, sys, time, select
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return r if r >= 0 else -ctypes.get_errno()
def name(r):
    return "OK" if r >= 0 else errno.errorcode.get(-r, str(-r))
def attempt(label, fn, *args):
    try:
        fn(*args)
        print(f"{label}: OK", flush=True)
    except OSError as e:
        print(f"{label}: {errno.errorcode.get(e.errno, str(e.errno))}", flush=True)
def kind(fd):
    m = os.fstat(fd).st_mode
    return "socket" if stat.S_ISSOCK(m) else "regular" if stat.S_ISREG(m) else "pipe" if stat.S_ISFIFO(m) else "other"
def getfd(pid, fd):
    p = sc(434, pid, 0)  # pidfd_open
    if p < 0:
        return p
    r = sc(438, p, fd, 0)  # pidfd_getfd
    os.close(p)
    return r
`

// pid1Script tries to take PID 1's descriptors, as the sandbox's root: first
// it lifts Yama's ptrace restriction (gVisor lets the sandbox's root write
// it), then pidfd_getfd and /proc/1/fd reopen each of PID 1's standard
// descriptors (on a gvisor sandbox with envd, 0 is the link to the host's
// shim, 1 and 2 the host's output log), and /proc/1/mem.
const pid1Script = gvPrelude + `
try:
    open("/proc/sys/kernel/yama/ptrace_scope", "w").write("0")
    print("ptrace_scope: written", flush=True)
except OSError as e:
    print("ptrace_scope:", errno.errorcode[e.errno], flush=True)
for fd in (0, 1, 2):
    r = getfd(1, fd)
    print(f"pidfd_getfd 1 {fd}: {name(r)}" + (f" {kind(r)}" if r >= 0 else ""), flush=True)
    try:
        g = os.open(f"/proc/1/fd/{fd}", os.O_WRONLY)
        print(f"reopen 1 {fd}: OK {kind(g)}", flush=True)
    except OSError as e:
        print(f"reopen 1 {fd}: {errno.errorcode[e.errno]}", flush=True)
attempt("mem 1", os.open, "/proc/1/mem", os.O_RDONLY)
print("end", flush=True)
`

func TestGvisorEscape(t *testing.T) {
	hutchtest.RequireRunsc(t)

	// A detached sandbox's output goes to its host state directory. A host
	// file as its stdout can be grown past any disk limit (fallocate,
	// ftruncate to a sparse terabyte that every logs call then reads): the
	// native runtime gives it a pipe and keeps a bounded ring (2 x 8 MiB).
	t.Run("OutputLogIsNotAHostFile", func(t *testing.T) {
		const script = `
import os, errno, stat, time
print("stdout:", "regular" if stat.S_ISREG(os.fstat(1).st_mode) else "not-a-file", flush=True)
try:
    os.posix_fallocate(1, 0, 256 << 20)
    print("fallocate: OK", flush=True)
except OSError as e:
    print("fallocate:", errno.errorcode[e.errno], flush=True)
print("done", flush=True)
time.sleep(1000)
`
		id := detachSandbox(t, gvFlags("--disk", "64M"), "python3", "-c", script)
		out := gvWaitOutput(t, id, "done")
		if !strings.Contains(out, "done") {
			t.Fatalf("the attempt did not finish: %q", out)
		}
		if strings.Contains(out, "stdout: regular") {
			t.Errorf("the detached first process's stdout is a host regular file")
		}
		if strings.Contains(out, "fallocate: OK") {
			t.Errorf("fallocate of 256 MiB on stdout worked")
		}
		for name, size := range gvOutputSizes(t, id) {
			if size > 32<<20 {
				t.Errorf("host file %s grew to %d MiB (the sandbox's disk limit is 64 MiB; the native ring keeps at most 8 MiB a file)", name, size>>20)
			}
		}
	})

	// PID 1 (GuestInit) runs as the first process's user, dumpable, and
	// holds its standard descriptors: the sandbox's root must not be able
	// to take them (envd sets itself non-dumpable for the same reason).
	t.Run("Pid1DescriptorsAsRoot", func(t *testing.T) {
		r := runSandbox(t, gvFlags("--user", "root"), "python3", "-c", pid1Script)
		wantLines(t, r, "end")
		for fd := range 3 {
			for _, p := range []string{"pidfd_getfd 1 ", "reopen 1 "} {
				if l := lineWith(r.Stdout, p+strconv.Itoa(fd)+":"); l == "" || strings.Contains(l, ": OK") {
					t.Errorf("the sandbox's root took PID 1's descriptor %d: %q", fd, l)
				}
			}
		}
		if l := lineWith(r.Stdout, "mem 1:"); !strings.HasSuffix(l, "EACCES") && !strings.HasSuffix(l, "EPERM") {
			t.Errorf("/proc/1/mem: %q, want EACCES or EPERM", l)
		}
		if t.Failed() {
			t.Logf("%v", r)
		}
	})

	// The sandbox binary (here the host's hutch itself) is bound in
	// read-only: neither its path nor /proc/1/exe lets the sandbox's root
	// write it (CVE-2019-5736's shape).
	t.Run("SandboxBinaryReadOnly", func(t *testing.T) {
		before := fileSHA256(t, hutchBin)
		r := runSandbox(t, gvFlags("--user", "root"), "python3", "-c", gvPrelude+`
def wr(p, flags):
    fd = os.open(p, flags)
    try:
        os.write(fd, b"PWNED")
    finally:
        os.close(fd)
attempt("write binary", wr, "/.hutch/hutch-sandbox", os.O_WRONLY)
attempt("truncate binary", os.truncate, "/.hutch/hutch-sandbox", 0)
attempt("chmod binary", os.chmod, "/.hutch/hutch-sandbox", 0o4777)
attempt("write exe", wr, "/proc/1/exe", os.O_WRONLY)
attempt("rdwr exe", wr, "/proc/1/exe", os.O_RDWR)
`)
		wantLines(t, r, "write binary: EROFS", "truncate binary: EROFS", "chmod binary: EROFS")
		// Through PID 1: EACCES, as it is not dumpable (EROFS were it).
		for _, p := range []string{"write exe:", "rdwr exe:"} {
			if l := lineWith(r.Stdout, p); !strings.HasSuffix(l, "EACCES") && !strings.HasSuffix(l, "EROFS") {
				t.Errorf("%s %q, want EACCES or EROFS", p, l)
			}
		}
		if after := fileSHA256(t, hutchBin); after != before {
			t.Errorf("the hutch binary changed: %s -> %s", before, after)
		}
	})

	// The template's layers are idmapped read-only lowers: whatever the
	// sandbox's root does to its root file system stays in its own layer.
	t.Run("TemplateUnchanged", func(t *testing.T) {
		tpl, err := template.Open(templates).Get("base")
		if err != nil {
			t.Fatal(err)
		}
		find := func(rel string) string {
			dirs := tpl.LowerDirs()
			for i := len(dirs) - 1; i >= 0; i-- {
				if _, err := os.Lstat(filepath.Join(dirs[i], rel)); err == nil {
					return filepath.Join(dirs[i], rel)
				}
			}
			t.Fatalf("the base template has no %s", rel)
			return ""
		}
		passwd, ls := find("etc/passwd"), find("usr/bin/ls")
		sum := fileSHA256(t, passwd)
		lsInfo, err := os.Stat(ls)
		if err != nil {
			t.Fatal(err)
		}
		r := runSandbox(t, gvFlags("--user", "root"), "python3", "-c", gvPrelude+`
attempt("append passwd", lambda: open("/etc/passwd", "a").write("pwn:x:0:0::/:/bin/sh\n"))
attempt("chmod ls", os.chmod, "/usr/bin/ls", 0o4777)
attempt("chown ls", os.chown, "/usr/bin/ls", 1000, 1000)
attempt("unlink ls", os.unlink, "/usr/bin/ls")
`)
		wantLines(t, r, "append passwd: OK", "unlink ls: OK")
		if got := fileSHA256(t, passwd); got != sum {
			t.Errorf("the template's /etc/passwd changed on the host")
		}
		fi, err := os.Stat(ls)
		if err != nil {
			t.Fatalf("the template's /usr/bin/ls is gone from the host: %v", err)
		}
		if fi.Mode() != lsInfo.Mode() || fi.Sys().(*syscall.Stat_t).Uid != lsInfo.Sys().(*syscall.Stat_t).Uid {
			t.Errorf("the template's /usr/bin/ls changed on the host: %v -> %v", lsInfo.Mode(), fi.Mode())
		}
	})

	// The i386 (int $0x80) and x32 entries reach no host kernel: the
	// sentry answers ENOSYS (or the process is killed); io_uring is not
	// there either.
	t.Run("SyscallABIs", func(t *testing.T) {
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
	for abi in i386 x32; do
		out=$(/tmp/abi $abi $c 2>/dev/null); echo "$abi $c rc=$? $out"
	done
done
echo "native $(/tmp/abi native io_uring_setup)"`
		r := hutch(t, string(prog), append(append([]string{"run", "--rm", "-i", "--user", "root"}, gv...), "--", "/bin/sh", "-c", script)...)
		if r.Code != 0 {
			t.Fatalf("the attempts did not run:\n%v", r)
		}
		for _, c := range abiClasses {
			for _, abi := range []string{"i386", "x32"} {
				l := lineWith(r.Stdout, abi+" "+c+" rc=")
				if !strings.Contains(l, "rc=159") && !strings.HasSuffix(l, ": ENOSYS") {
					t.Errorf("%s %s: %q, want ENOSYS or SIGSYS", abi, c, l)
				}
			}
		}
		wantLines(t, r, "native io_uring_setup: ENOSYS")
	})

	// The sandbox's network namespace is its shim's: the test's loopback
	// (where hutch serve's API listens) and its abstract unix sockets are
	// not reachable, raw and packet sockets and netlink changes are
	// refused to the sandbox's root.
	t.Run("HostNetworkUnreachable", func(t *testing.T) {
		tcp, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer tcp.Close()
		abstract := "@hutch-gv-escape-" + randHex(t)
		ux, err := net.Listen("unix", abstract)
		if err != nil {
			t.Fatal(err)
		}
		defer ux.Close()
		port := tcp.Addr().(*net.TCPAddr).Port
		got := make(chan string, 2)
		for _, l := range []net.Listener{tcp, ux} {
			go func() {
				if c, err := l.Accept(); err == nil {
					got <- c.RemoteAddr().String()
					c.Close()
				}
			}()
		}
		r := runSandbox(t, gvFlags("--user", "root"), "python3", "-c", gvPrelude+fmt.Sprintf(`
def tcp():
    s = socket.socket(); s.settimeout(2); s.connect(("127.0.0.1", %d))
def ux():
    s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect("\0%s")
attempt("tcp host loopback", tcp)
attempt("abstract unix", ux)
attempt("raw socket", socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
attempt("packet socket", socket.socket, socket.AF_PACKET, socket.SOCK_RAW, 0x0300)
print("links:", " ".join(sorted(os.listdir("/sys/class/net"))) if os.path.isdir("/sys/class/net") else open("/proc/net/dev").read().count(":"), flush=True)
import subprocess
for cmd in ["ip link add dummy0 type dummy", "ip addr add 10.99.0.1/32 dev lo", "ip link set lo down"]:
    p = subprocess.run(cmd.split(), capture_output=True, text=True)
    print(f"{cmd}: rc={p.returncode}", flush=True)
`, port, strings.TrimPrefix(abstract, "@")))
		wantLines(t, r, "tcp host loopback: ECONNREFUSED", "abstract unix: ECONNREFUSED", "raw socket: EPERM", "packet socket: EPERM")
		for _, cmd := range []string{"ip link add dummy0 type dummy", "ip addr add 10.99.0.1/32 dev lo", "ip link set lo down"} {
			if l := lineWith(r.Stdout, cmd+":"); l == "" || strings.HasSuffix(l, "rc=0") {
				t.Errorf("%q from the sandbox's root: %q", cmd, l)
			}
		}
		select {
		case from := <-got:
			t.Errorf("a host listener accepted a connection from the sandbox (%s)", from)
		case <-time.After(100 * time.Millisecond):
		}
		if t.Failed() {
			t.Logf("%v", r)
		}
	})

	// Host processes are invisible, and the sandbox's root killing every
	// process it can see leaves them running.
	t.Run("HostProcessesInvisible", func(t *testing.T) {
		cmd, arg := startHostSleep(t)
		r := runSandbox(t, gvFlags("--user", "root", "--env", "M="+arg), "python3", "-c", gvPrelude+`
m = os.environ["M"]
seen, n = [], 0
for d in os.listdir("/proc"):
    if d.isdigit():
        n += 1
        try:
            if m in open(f"/proc/{d}/cmdline", "rb").read().decode():
                seen.append(d)
        except OSError:
            pass
print("seen:", seen, flush=True)
print("few:", n < 20, flush=True)
attempt("kill -1", os.kill, -1, 9)
`)
		wantLines(t, r, "seen: []", "few: True")
		if st := processState(cmd.Process.Pid); st == "" || st == "Z" {
			t.Errorf("the host's sleep %s is %q after the sandbox's kill -9 -1", arg, st)
		}
	})

	// RLIMIT_NPROC bounds the sandbox's processes whatever uid they run
	// as: its root forks children that become other users.
	t.Run("PidsLimitAsRoot", func(t *testing.T) {
		r := runSandbox(t, gvFlags("--user", "root", "--pids", "64"), "python3", "-c", `
import os
r, w = os.pipe()
kids = []
for i in range(300):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.setuid(20000 + i)
        os.close(w); os.read(r, 1); os._exit(0)
    kids.append(pid)
print("forked", len(kids), flush=True)
os.close(w)
for k in kids:
    os.waitpid(k, 0)
`)
		var n int
		if _, err := fmt.Sscanf(lineWith(r.Stdout, "forked "), "forked %d", &n); err != nil {
			t.Fatalf("no count: %v", r)
		}
		if n >= 64 {
			t.Errorf("the sandbox's root had %d processes at once with --pids 64", n+1)
		}
	})

	// The writable layer is bounded by the disk limit: /tmp too (it is in
	// the root's overlay, not a tmpfs of runsc's).
	t.Run("DiskLimit", func(t *testing.T) {
		r := runSandbox(t, gvFlags("--disk", "64M"), "python3", "-c", `
import errno, os
n = 0
try:
    with open("/tmp/fill", "wb") as f:
        while n < 128:
            f.write(b"x" * (1 << 20)); f.flush(); n += 1
    print("wrote all 128 MiB", flush=True)
except OSError as e:
    print("write:", errno.errorcode[e.errno], flush=True)
print("size MiB:", os.path.getsize("/tmp/fill") >> 20, flush=True)
`)
		wantLines(t, r, "write: ENOSPC")
		var mib int
		fmt.Sscanf(lineWith(r.Stdout, "size MiB:"), "size MiB: %d", &mib)
		if mib > 64 {
			t.Errorf("wrote %d MiB with a 64 MiB disk limit", mib)
		}
	})

	t.Run("Server", testGvisorServer)
}

// lineWith returns the first line of out that starts with prefix, trimmed;
// "" if none.
func lineWith(out, prefix string) string {
	for _, l := range outLines(out) {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// linkAttack runs detached as the sandbox's root: it takes the link from
// PID 1 (as pid1Script does), stops envd so that it is the link's only
// reader, and then either reads what the host sends for a while
// ("sniff": the lines with an access token or a request line are written
// to /tmp/gv-attack.out) or writes yamux pings to the shim without reading
// its answers ("flood N": each ping makes the host's yamux start a
// goroutine that waits up to 10 s to answer). envd is continued at the end;
// "done" is the last line of /tmp/gv-attack.out.
const linkAttack = gvPrelude + `
import re
mode = sys.argv[1]
out = open("/tmp/gv-attack.out", "w", buffering=1)
def log(*a):
    print(*a, file=out, flush=True)
try:
    open("/proc/sys/kernel/yama/ptrace_scope", "w").write("0")
except OSError:
    pass
time.sleep(0.5)
fd = getfd(1, 0)
if fd < 0:
    log("no link:", name(fd))
    log("done")
    sys.exit(0)
log("link:", kind(fd))
envd = None
for d in os.listdir("/proc"):
    if d.isdigit() and d != "1":
        try:
            cl = open(f"/proc/{d}/cmdline", "rb").read()
            ppid = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        if ppid == "1" and b"envd" in cl:
            envd = int(d)
os.kill(envd, signal.SIGSTOP)
try:
    if mode == "sniff":
        data, end = b"", time.time() + float(sys.argv[2])
        while time.time() < end:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    data += os.read(fd, 65536)
                except BlockingIOError:
                    pass
        log("sniffed", len(data))
        for m in re.findall(rb"(?i)x-access-token: *[0-9a-f]+|(?:POST|GET|CONNECT) [^ \r\n]+", data):
            log("seen", m.decode(errors="replace"))
    else:
        n, sent, end = int(sys.argv[2]), 0, time.time() + 5
        batch = b"".join(struct.pack(">BBHII", 0, 2, 1, 0, i) for i in range(1000))
        while sent < n and time.time() < end:
            select.select([], [fd], [], 1)
            try:
                k = os.write(fd, batch)
            except BlockingIOError:
                continue
            rest = batch[k:]
            while rest and time.time() < end:
                select.select([], [fd], [], 1)
                try:
                    rest = rest[os.write(fd, rest):]
                except BlockingIOError:
                    pass
            sent += 1000
        log("pings", sent)
        time.sleep(1)
finally:
    os.kill(envd, signal.SIGCONT)
log("done")
`

// testGvisorServer runs `hutch serve --runtime gvisor` (loopback only) and
// attacks the link between envd and its shim from inside a sandbox.
func testGvisorServer(t *testing.T) {
	srv := hutchtest.StartServe(t, hutchBin, "--runtime", "gvisor", "--warm", "0")
	client, err := sdk.NewClient(sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	newSandbox := func(t *testing.T) *sdk.Sandbox {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		sbx, err := client.Create(ctx, sdk.CreateOptions{Timeout: 5 * time.Minute})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() { sbx.Kill(context.Background()) })
		if sbx.EnvdAccessToken == "" {
			t.Fatal("a v2 sandbox without an envd access token")
		}
		return sbx
	}
	run := func(t *testing.T, sbx *sdk.Sandbox, user, cmd string, timeout time.Duration) (*sdk.CommandResult, error) {
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		return sbx.Commands.Run(ctx, cmd, &sdk.RunOptions{User: user, Timeout: timeout})
	}
	mustRun := func(t *testing.T, sbx *sdk.Sandbox, user, cmd string) string {
		t.Helper()
		res, err := run(t, sbx, user, cmd, 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return res.Stdout
	}
	put := func(t *testing.T, sbx *sdk.Sandbox, path, content string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		if _, err := sbx.Files.Write(ctx, path, []byte(content), &sdk.WriteOptions{User: "root"}); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
	}
	// waitAttack waits for linkAttack's last line, retrying while the
	// link comes back.
	waitAttack := func(t *testing.T, sbx *sdk.Sandbox) string {
		t.Helper()
		var out string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			res, err := run(t, sbx, "root", "cat /tmp/gv-attack.out", 5*time.Second)
			if err == nil {
				if out = res.Stdout; hasLine(out, "done") {
					return out
				}
			}
		}
		t.Fatalf("the attack did not finish: %q", out)
		return ""
	}

	// As with the CLI, from a sandbox with envd: PID 1's standard input is
	// the link, which carries the host-only control channel (POST /init,
	// CONNECT tunnels) and every request with envd's access token; its
	// stdout and stderr are the host's output log. envd itself is not
	// dumpable and must stay out of reach.
	t.Run("LinkOutOfReach", func(t *testing.T) {
		sbx := newSandbox(t)
		put(t, sbx, "/tmp/pid1.py", pid1Script+`
envd = [int(d) for d in os.listdir("/proc") if d.isdigit() and d != "1" and b"envd" in open(f"/proc/{d}/cmdline", "rb").read() and open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1] == "1"][0]
for fd in (0, 1, 2):
    print(f"pidfd_getfd envd {fd}: {name(getfd(envd, fd))}", flush=True)
attempt("mem envd", os.open, f"/proc/{envd}/mem", os.O_RDONLY)
`)
		out := mustRun(t, sbx, "root", "python3 /tmp/pid1.py")
		if !hasLine(out, "end") {
			t.Fatalf("the attempt did not run: %q", out)
		}
		for fd := range 3 {
			for _, p := range []string{"pidfd_getfd 1 ", "reopen 1 ", "pidfd_getfd envd "} {
				if l := lineWith(out, p+strconv.Itoa(fd)+":"); l == "" || strings.Contains(l, ": OK") {
					t.Errorf("the sandbox's root took a descriptor of PID 1 or envd: %q", l)
				}
			}
		}
		if l := lineWith(out, "mem envd:"); !strings.HasSuffix(l, "EACCES") && !strings.HasSuffix(l, "EPERM") {
			t.Errorf("/proc/<envd>/mem: %q", l)
		}
		if t.Failed() {
			t.Logf("%s", out)
		}
	})

	// With the link, the sandbox's root reads the host's requests: the
	// access token of the next command must not be among them.
	t.Run("AccessTokenNotSniffed", func(t *testing.T) {
		sbx := newSandbox(t)
		put(t, sbx, "/tmp/attack.py", linkAttack)
		mustRun(t, sbx, "root", "nohup setsid python3 /tmp/attack.py sniff 2 >/tmp/gv-attack.err 2>&1 &")
		time.Sleep(1500 * time.Millisecond)
		// Swallowed while envd is stopped, if the attack works.
		run(t, sbx, "user", "echo hello", 3*time.Second)
		out := waitAttack(t, sbx)
		if strings.Contains(out, sbx.EnvdAccessToken) {
			t.Errorf("the sandbox's root read envd's access token off the link:\n%s", out)
		}
		if strings.Contains(out, "link: socket") {
			t.Errorf("the sandbox's root holds the link to its shim:\n%s", out)
		}
	})

	// The shim is a host process outside the sandbox's cgroup: what the
	// guest end of the link sends must not grow it. 40 000 pings (480 KB)
	// grew it by about 130 MiB when tried; unbounded, a few seconds of
	// pings take the host's memory.
	t.Run("ShimMemoryBounded", func(t *testing.T) {
		sbx := newSandbox(t)
		var shim int
		for _, s := range srv.RuntimeSandboxes() {
			if s.ID == sbx.ID {
				shim = s.Pid
			}
		}
		if shim <= 0 || !strings.HasPrefix(strings.Join(hostCmdline(shim), " "), "hutch-gvisor-shim ") {
			t.Fatalf("no shim for sandbox %s (pid %d: %q)", sbx.ID, shim, hostCmdline(shim))
		}
		before := vmHWM(t, shim)
		put(t, sbx, "/tmp/attack.py", linkAttack)
		mustRun(t, sbx, "root", "nohup setsid python3 /tmp/attack.py flood 40000 >/tmp/gv-attack.err 2>&1 &")
		out := waitAttack(t, sbx)
		after := vmHWM(t, shim)
		t.Logf("shim %d peak RSS %d KiB -> %d KiB; attack: %q", shim, before, after, out)
		if after-before > 32<<10 {
			t.Errorf("the shim's peak RSS grew by %d MiB from the guest's pings", (after-before)>>10)
		}
		// The attacker's own sandbox may die of it (its shim bounded);
		// the server must not.
		if res, err := run(t, sbx, "user", "echo still-here", 20*time.Second); err != nil || !strings.Contains(res.Stdout, "still-here") {
			t.Logf("the attacking sandbox no longer answers: %v", err)
		}
		resp, err := http.Get(srv.URL() + "/health")
		if err != nil {
			t.Fatalf("the server no longer answers after the attack: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the server's health after the attack: %s", resp.Status)
		}
	})

	// The backend builds a sandbox's mounts in the host's mount namespace,
	// under its state directory: a volume (DataDir/volumes is 0700, "no
	// host user but root reaches them") and the layer of mount points.
	// Neither may be reachable by another host user through them.
	t.Run("MountsNotReachableByHostUsers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		vol, err := client.CreateVolume(ctx, "gv-"+randHex(t))
		if err != nil {
			t.Fatalf("create volume: %v", err)
		}
		t.Cleanup(func() { client.DestroyVolume(context.Background(), vol.ID) })
		sbx, err := client.Create(ctx, sdk.CreateOptions{Timeout: 5 * time.Minute, Volumes: []sdk.VolumeMount{{Name: vol.Name, Path: "/data"}}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		t.Cleanup(func() { sbx.Kill(context.Background()) })
		secret := "volume-secret-" + randHex(t)
		mustRun(t, sbx, "user", "echo "+secret+" > /data/secret.txt && chmod 644 /data/secret.txt")
		dir := filepath.Join(srv.DataDir, "gvisor", "sandboxes", sbx.ID)
		asNobody := func(argv ...string) (string, error) {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		// The control: the volume itself is closed to other users.
		direct := filepath.Join(srv.DataDir, "volumes", vol.ID, "secret.txt")
		if out, err := asNobody("cat", direct); err == nil || strings.Contains(out, secret) {
			t.Fatalf("the control failed: nobody reads %s: %q", direct, out)
		}
		through := filepath.Join(dir, "vol", "0", "secret.txt")
		if out, err := asNobody("cat", through); err == nil || strings.Contains(out, secret) {
			t.Errorf("a host user (nobody) reads the volume's file through the sandbox's mount %s: %q", through, out)
		}
		planted := filepath.Join(dir, "points", "tmp", "planted-"+randHex(t))
		if out, err := asNobody("touch", planted); err == nil {
			os.Remove(planted)
			t.Errorf("a host user (nobody) creates %s, a file in a layer of the sandbox's root: %q", planted, out)
		}
	})

	// runsc's gofer and Sentry run as the sandbox's root's host uid: a
	// Sentry or gofer escape lands there, and must get no further. The
	// sandbox's state directory holds what the server (root) trusts: its
	// record (state.json: the id it removes, the shim pid it kills, the
	// layers and volumes a resume mounts), its output log (which a logs
	// call reads as root). Owned by that uid, it lets the uid rename any
	// of them and put its own in their place: here, output.log becomes a
	// symlink to a root-only host file, which the logs API then returns.
	t.Run("StateDirNotTheSandboxUIDs", func(t *testing.T) {
		sbx := newSandbox(t)
		dir := filepath.Join(srv.DataDir, "gvisor", "sandboxes", sbx.ID)
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "upper"), &st); err != nil {
			t.Fatal(err)
		}
		uid := st.Uid // upper/ is the sandbox's root's, by design
		secretDir := t.TempDir()
		secret := "host-root-secret-" + randHex(t)
		secretFile := filepath.Join(secretDir, "secret")
		if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		asSandboxUID := func(script string) (string, error) {
			cmd := exec.Command("sh", "-c", script)
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		// The control: the uid cannot read the secret itself.
		if out, err := asSandboxUID("cat " + secretFile); err == nil || strings.Contains(out, secret) {
			t.Fatalf("the control failed: uid %d reads %s: %q", uid, secretFile, out)
		}
		for _, f := range []string{"state.json", "output.log"} {
			p := filepath.Join(dir, f)
			if out, err := asSandboxUID("mv " + p + " " + p + ".moved"); err == nil {
				t.Errorf("uid %d (the sandbox's gofer and Sentry) renamed %s, a file the server trusts: %q", uid, p, out)
				os.Rename(p+".moved", p)
			}
		}
		log := filepath.Join(dir, "output.log")
		if out, err := asSandboxUID("mv " + log + " " + log + ".orig && ln -s " + secretFile + " " + log); err == nil {
			t.Errorf("uid %d replaced %s with a symlink to %s: %q", uid, log, secretFile, out)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			entries, err := sbx.Logs(ctx, sdk.LogsOptions{})
			for _, e := range entries {
				if strings.Contains(e.Message, secret) {
					t.Errorf("the logs API returned the root-only host file %s: %q", secretFile, e.Message)
				}
			}
			t.Logf("logs: %d entries, %v", len(entries), err)
			os.Remove(log)
			os.Rename(log+".orig", log)
		}
	})
}

// vmHWM is a host process's peak resident set, in KiB.
func vmHWM(t testing.TB, pid int) int {
	t.Helper()
	f := procStatus(t, pid, "VmHWM")
	if len(f) < 1 {
		t.Fatalf("no VmHWM for %d", pid)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
