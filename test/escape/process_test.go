package escape

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// sees runs the visibility scan for marker in sbx.
func sees(t *testing.T, sbx *sdk.Sandbox, marker string) string {
	t.Helper()
	ctl := fmt.Sprintf("86398.%d", time.Now().UnixNano()%1e9)
	return py(t, sbx, "root", "os.environ['M'] = "+strconv.Quote(marker)+"; os.environ['C'] = "+strconv.Quote(ctl)+"\n"+hutchtest.ProcessScan)
}

// neighbour starts a sandbox of backend b running `sleep <marker>`.
func (s *suite) neighbour(t *testing.T, b string) (*sdk.Sandbox, string) {
	t.Helper()
	n := s.sandbox(t, b, sdk.CreateOptions{})
	mark := fmt.Sprintf("86397.%d", time.Now().UnixNano()%1e9)
	if _, err := n.Commands.Start(t.Context(), "sleep "+mark, &sdk.RunOptions{Timeout: sdk.NoTimeout}); err != nil {
		t.Fatal(err)
	}
	// Until it runs.
	for i := 0; ; i++ {
		if out := run(t, n, "user", "pgrep -f 'sleep "+mark+"' >/dev/null && echo up"); out == "up\n" {
			break
		}
		if i > 100 {
			t.Fatal("the neighbour's sleep never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return n, mark
}

// stillSleeps fails t unless the neighbour's sleep runs.
func stillSleeps(t *testing.T, n *sdk.Sandbox, mark string) {
	t.Helper()
	if out := run(t, n, "user", "pgrep -f 'sleep "+mark+"' >/dev/null && echo up"); out != "up\n" {
		t.Errorf("the neighbour's process is gone: %q", out)
	}
}

// processAttempts go for processes: the host's, the neighbours', the
// sandbox's own init and its daemon, and the privileges of root inside.
var processAttempts = []attempt{
	{"host-processes-invisible", "processes", func(t *testing.T, s *suite, b string) {
		out := sees(t, s.sandbox(t, b, sdk.CreateOptions{}), s.hostMark)
		want(t, out, "control-seen: True", "marker-in-proc: []", "marker-in-ps: False")
	}},
	{"neighbour-processes-invisible", "processes", func(t *testing.T, s *suite, b string) {
		_, mark := s.neighbour(t, b)
		out := sees(t, s.sandbox(t, b, sdk.CreateOptions{}), mark)
		want(t, out, "control-seen: True", "marker-in-proc: []", "marker-in-ps: False")
	}},
	{"kill-everything", "processes", func(t *testing.T, s *suite, b string) {
		n, mark := s.neighbour(t, b)
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		// Everything it may signal, envd and the command itself among
		// them: the sandbox's daemon must come back or never go.
		sbx.Commands.Start(t.Context(), "kill -STOP -1; kill -9 -1", &sdk.RunOptions{User: "root", Timeout: sdk.NoTimeout})
		time.Sleep(time.Second)
		s.hostAlive(t)
		stillSleeps(t, n, mark)
		aliveOrGone(t, sbx)
	}},
	{"signal-host-pid", "processes", func(t *testing.T, s *suite, b string) {
		// The host process's number, known: signals, pidfds, kcmp and
		// reads of its memory by that number reach nothing.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", fmt.Sprintf(`
hp = %d
attempt("kill-stop", os.kill, hp, 19)
sc("pidfd_open", 434, hp, 0)
sc("kcmp", 312, hp, os.getpid(), 0, 0, 0)
local = (ctypes.c_char * 64)()
iov = (ctypes.c_void_p * 2)(ctypes.cast(local, ctypes.c_void_p), 64)
sc("process_vm_readv", 310, hp, ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0)
sc("process_vm_writev", 311, hp, ctypes.byref(iov), 1, ctypes.byref(iov), 1, 0)
attempt("open-mem", lambda: os.close(os.open(f"/proc/{hp}/mem", os.O_RDONLY)))
`, s.hostPid))
		refused(t, b, out, "kill-stop", "pidfd_open", "kcmp", "process_vm_readv", "process_vm_writev", "open-mem")
		s.hostAlive(t)
	}},
	{"ptrace-host-pids", "processes", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", fmt.Sprintf(`
got = []
for pid in [%d] + list(range(1, 2000)):
    if pid in (os.getpid(),):
        continue
    ctypes.set_errno(0)
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            argv = "?"
        got.append(f"{pid}={argv}")
        libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
print("attached:", " ".join(got) or "none")
`, s.hostPid))
		// Only the sandbox's own processes may be traced: none run as
		// root here but the init and envd, which refuse it.
		want(t, out, "attached: none")
		s.hostAlive(t)
	}},
	{"init-kill-and-ptrace", "the sandbox's init and daemon", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", `
ctypes.set_errno(0)
r = libc.ptrace(16, 1, 0, 0)
print("ptrace-init:", "OK" if r == 0 else errno.errorcode[ctypes.get_errno()])
attempt("init-mem", lambda: os.close(os.open("/proc/1/mem", os.O_RDWR)))
`)
		refused(t, b, out, "ptrace-init", "init-mem")
		// Signals to the init: natively it ignores them (it is the PID
		// namespace's init); on gVisor the init's end ends the sandbox,
		// which is then reported gone.
		h := startPy(t, sbx, "root", `
attempt("stop-init", os.kill, 1, 19)
attempt("kill-init", os.kill, 1, 9)
`)
		h.Wait(t.Context())
		if gone := aliveOrGone(t, sbx); gone && b == "native" {
			t.Errorf("killing the init from inside ended a native sandbox")
		}
	}},
	{"envd-ptrace-and-memory", "the sandbox's init and daemon", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", `
e = envd_pid()
print("envd-found:", e > 1)
ctypes.set_errno(0)
r = libc.ptrace(16, e, 0, 0)
print("ptrace-envd:", "OK" if r == 0 else errno.errorcode[ctypes.get_errno()])
ctypes.set_errno(0)
r = libc.ptrace(0x4206, e, 0, 0)  # PTRACE_SEIZE
print("seize-envd:", "OK" if r == 0 else errno.errorcode[ctypes.get_errno()])
attempt("envd-mem", lambda: os.close(os.open(f"/proc/{e}/mem", os.O_RDWR)))
attempt("envd-fd", lambda: os.readlink(f"/proc/{e}/fd/0"))
sc("pidfd_getfd", 438, sc("pidfd_open-envd", 434, e, 0), 3, 0)
`)
		want(t, out, "envd-found: True")
		refused(t, b, out, "ptrace-envd", "seize-envd", "envd-mem", "envd-fd", "pidfd_getfd")
		alive(t, sbx)
	}},
	{"envd-kill", "the sandbox's init and daemon", func(t *testing.T, s *suite, b string) {
		// Root inside kills or stops the daemon: the sandbox answers
		// again (envd comes back) or the kill is refused.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		h := startPy(t, sbx, "root", `
e = envd_pid()
print("envd-found:", e > 1)
attempt("stop-envd", os.kill, e, 19)
attempt("kill-envd", os.kill, e, 9)
`)
		h.Wait(t.Context())
		t.Logf("%s", h.Stdout())
		aliveOrGone(t, sbx)
	}},
	{"envd-impersonation", "the sandbox's init and daemon", func(t *testing.T, s *suite, b string) {
		// Root inside kills envd and takes its port at once, to be sent
		// the server's next calls with envd's access token in them.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		startPy(t, sbx, "root", `
e = envd_pid()
srvs = []
for host in ("0.0.0.0", "::"):
    x = socket.socket(socket.AF_INET6 if host == "::" else socket.AF_INET)
    x.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srvs.append((x, host))
os.kill(e, 9)
for x, host in srvs:
    for _ in range(2000):
        try:
            x.bind((host, 49983)); x.listen(); break
        except OSError:
            time.sleep(0.001)
import select, threading
def serve(x):
    while True:
        c, _ = x.accept()
        c.settimeout(2)
        try:
            data = c.recv(65536)
        except OSError:
            data = b""
        open("/tmp/captured", "ab").write(data)
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        c.close()
for x, _ in srvs:
    threading.Thread(target=serve, args=(x,), daemon=True).start()
time.sleep(120)
`)
		time.Sleep(time.Second)
		for range 5 {
			sbx.Files.Read(t.Context(), "/etc/hostname", nil)
			sbx.Commands.Run(t.Context(), "true", &sdk.RunOptions{Timeout: 5 * time.Second})
		}
		if gone := aliveOrGone(t, sbx); !gone {
			// Still running: envd came back, and what the squatter took
			// holds no token.
			b, _ := sbx.Files.Read(t.Context(), "/tmp/captured", &sdk.FileOptions{User: "root"})
			absent(t, string(b), sbx.EnvdAccessToken)
		}
	}},
	{"envd-token-from-proc", "the sandbox's init and daemon", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		if sbx.EnvdAccessToken == "" {
			t.Fatal("the sandbox has no envd access token")
		}
		out := run(t, sbx, "root", `for p in /proc/[0-9]*; do cat $p/environ $p/cmdline; cat $p/fdinfo/* ; done 2>/dev/null | tr '\0' '\n'
cat /proc/1/root/proc/*/environ 2>/dev/null; env; grep -rsa -m1 . /run /tmp /var/run /etc/hutch* 2>/dev/null | head -c 100000; echo searched`)
		want(t, out, "searched")
		absent(t, out, sbx.EnvdAccessToken)
	}},
	{"envd-port-squat", "the sandbox's init and daemon", func(t *testing.T, s *suite, b string) {
		// Root inside binds envd's port first, on every address, with
		// SO_REUSEPORT: the server's calls still reach envd.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", `
held = []
for host in ("0.0.0.0", "127.0.0.1", "::"):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    x = socket.socket(fam, socket.SOCK_STREAM)
    x.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    x.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        x.bind((host, 49983)); x.listen(); held.append(x)
        print(f"bind-{host}: OK")
    except OSError as e:
        print(f"bind-{host}: {errno.errorcode[e.errno]}")
`)
		t.Logf("%s", out)
		// Whatever the binds did, the server's calls reach envd: the
		// squatter never answers them.
		for range 5 {
			alive(t, sbx)
		}
	}},
	{"root-is-unprivileged", "privileges", func(t *testing.T, s *suite, b string) {
		// Root inside is no one on the host: natively an unprivileged
		// uid (the uid map); on gvisor a user of gVisor's kernel, whose
		// processes are not the host's at all.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		mark := fmt.Sprintf("86396.%d", time.Now().UnixNano()%1e9)
		if _, err := sbx.Commands.Start(t.Context(), "sleep "+mark, &sdk.RunOptions{User: "root", Timeout: sdk.NoTimeout}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		uids := hostUIDsOf(mark)
		switch b {
		case "native":
			if len(uids) == 0 {
				t.Fatal("the sandbox's process is not found on the host")
			}
			for _, u := range uids {
				if u == "0" {
					t.Errorf("root inside runs as host uid 0")
				}
			}
		case "gvisor":
			if len(uids) != 0 {
				t.Errorf("a gvisor sandbox's process is a host process (uids %v)", uids)
			}
		}
	}},
}

// hostUIDsOf is the host uids of host processes with argv element mark.
func hostUIDsOf(mark string) []string {
	var uids []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), "\x00"+mark) {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
				uids = append(uids, f[1:]...)
			}
		}
	}
	return uids
}
