// Package escape makes escape attempts from inside sandboxes of a real
// `hutch serve`, the way an agent's untrusted code would, on every runtime
// backend the server has: native (namespaces, cgroups, seccomp) and gvisor
// (runsc). Each attempt is one subtest that runs once per backend and
// checks what a user would check after it: the host's files, processes,
// kernel settings and binaries unchanged, the neighbour sandbox untouched,
// the sandbox's own daemon still answering, the refusal the sandbox saw.
// Where the backends refuse differently (a seccomp EPERM natively, gVisor's
// own kernel answering ENOSYS or doing the call inside its sandbox), the
// attempt says what each does and checks that.
//
// The server runs in a network namespace of its own with networking on,
// so the network attempts meet the firewall a real deployment has.
// docs/security.md lists the attempts by class.
package escape

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) {
	testenv.RequireRootMain("sandboxes need namespaces, cgroups and mounts")
	hutchtest.Main(m, hutchBin)
}

// suite is the server the attempts run against and what the host holds
// for them to find: a secret file, a process, a listener.
type suite struct {
	srv    *hutchtest.Server
	ns     *hutchtest.NetNS
	cfg    sdk.Config
	client *sdk.Client
	// abi is test/internal/abi, built for amd64: raw system calls through
	// each entry point.
	abi []byte
	// secret is in the host file secretPath, in a directory every user
	// may read: no sandbox may print it.
	secret, secretPath string
	// hostPid runs `sleep hostMark` on the host.
	hostPid  int
	hostMark string
	// registry is an OCI registry on loopback (host:port), made when an
	// attempt first needs it.
	registryOnce sync.Once
	registry     string
	// top is the test the suite belongs to: what it starts lives as long.
	top *testing.T
	// templates is the server's template store, the suite's own.
	templates string
}

// startSuite starts the server and the host's bait.
func startSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{top: t}
	s.ns = hutchtest.NewNetNS(t)
	tmp := t.TempDir()
	// Sandboxes' uids must traverse to their layers under the data dir.
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, 0o711)
	s.srv = hutchtest.NewServer(t, hutchBin.Path(t), filepath.Join(tmp, "data"))
	// A store of the suite's own: the attempts build, snapshot and fork,
	// and the machine's store is every other suite's.
	s.templates = testenv.PrivateTemplates(t)
	for i, e := range s.srv.Env {
		if strings.HasPrefix(e, "HUTCH_TEMPLATES=") {
			s.srv.Env[i] = "HUTCH_TEMPLATES=" + s.templates
		}
	}
	s.srv.Wrap = s.ns.Wrap()
	s.srv.Client = &http.Client{Transport: &http.Transport{DialContext: s.ns.DialContext}}
	s.srv.Args = []string{"--domain", hutchtest.TestDomain,
		// One warm sandbox: the leftovers attempts check what a
		// sandbox from the pool sees of the one before it.
		"--warm", "1",
		"--disk", "512M", "--volume-size", "64M", "--max-conns", "64",
		"--registry-allow", "127.0.0.1"}
	s.srv.Start()
	s.cfg = sdk.Config{APIKey: hutchtest.TestKey, APIURL: s.srv.URL(), HTTPClient: s.srv.Client}
	c, err := sdk.NewClient(s.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.client = c

	dir, err := os.MkdirTemp("/var/tmp", "hutch-escape-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	s.secret = unique("host-secret")
	s.secretPath = filepath.Join(dir, "secret")
	if err := os.WriteFile(s.secretPath, []byte(s.secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	s.hostMark = fmt.Sprintf("86399.%d", time.Now().UnixNano()%1e9)
	sleep := exec.Command("sleep", s.hostMark)
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	s.hostPid = sleep.Process.Pid

	if goruntime.GOARCH == "amd64" {
		bin := filepath.Join(t.TempDir(), "abi")
		build := exec.Command("go", "build", "-o", bin, "../internal/abi")
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOARCH=amd64")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build test/internal/abi: %v\n%s", err, out)
		}
		if s.abi, err = os.ReadFile(bin); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// backends are the runtime backends every attempt runs on.
var backends = []string{"native", "gvisor"}

// sandbox creates a sandbox on backend b, killed when the test ends.
func (s *suite) sandbox(t *testing.T, b string, opts sdk.CreateOptions) *sdk.Sandbox {
	t.Helper()
	opts.Config = s.cfg
	opts.Runtime = b
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Minute
	}
	sbx, err := sdk.Create(t.Context(), opts)
	if err != nil {
		t.Fatalf("create a %s sandbox: %v", b, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sbx.Kill(ctx); err != nil && !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("kill sandbox %s: %v", sbx.ID, err)
		}
	})
	return sbx
}

// run runs script with sh as user ("root" or "user") and returns its
// standard output and error together; a failed command is not an error
// (the attempts expect refusals), a sandbox that does not answer is.
func run(t *testing.T, sbx *sdk.Sandbox, user, script string) string {
	t.Helper()
	res, err := sbx.Commands.Run(t.Context(), script, &sdk.RunOptions{User: user, Timeout: 3 * time.Minute, MaxOutput: 4 << 20})
	if res == nil {
		t.Fatalf("run in %s: %v", sbx.ID, err)
	}
	return res.Stdout + res.Stderr
}

// pyPrelude defines the Python attempts' helpers: sc(name, nr, *args)
// makes raw system call nr and prints "name: OK" or "name: ERRNO";
// attempt(name, fn, *args) does the same for a call that raises OSError.
const pyPrelude = `
import ctypes, errno, os, socket, stat, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def _arg(a):
    if isinstance(a, bytes):
        return ctypes.c_char_p(a)
    if isinstance(a, int):
        return ctypes.c_long(a)
    return a  # a ctypes object or byref(): passed as it is
def sc(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    e = ctypes.get_errno()
    print(f"{name}: {'OK' if r != -1 else errno.errorcode.get(e, str(e))}", flush=True)
    return r
def attempt(name, fn, *args):
    try:
        fn(*args)
        print(f"{name}: OK", flush=True)
    except OSError as e:
        print(f"{name}: {errno.errorcode.get(e.errno, str(e.errno))}", flush=True)
    except ValueError as e:  # what Python refuses before the call
        print(f"{name}: refused ({e})", flush=True)
def envd_pid():
    for p in sorted((p for p in os.listdir("/proc") if p.isdigit()), key=int):
        try:
            if open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[1:2] == [b"envd"]:
                return int(p)
        except OSError:
            pass
    return 0
`

// py runs a Python program (after pyPrelude) as user.
func py(t *testing.T, sbx *sdk.Sandbox, user, prog string) string {
	t.Helper()
	path := "/tmp/attempt-" + unique("py") + ".py"
	if _, err := sbx.Files.Write(t.Context(), path, []byte(pyPrelude+prog), &sdk.WriteOptions{User: user}); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return run(t, sbx, user, "python3 "+path)
}

// startPy starts a Python program (after pyPrelude) as user, in the
// background, and returns its handle.
func startPy(t *testing.T, sbx *sdk.Sandbox, user, prog string) *sdk.CommandHandle {
	t.Helper()
	path := "/tmp/attempt-" + unique("py") + ".py"
	if _, err := sbx.Files.Write(t.Context(), path, []byte(pyPrelude+prog), &sdk.WriteOptions{User: user}); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	h, err := sbx.Commands.Start(t.Context(), "python3 -u "+path, &sdk.RunOptions{User: user, Timeout: sdk.NoTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Kill(context.Background()) })
	return h
}

// withABI puts test/internal/abi at /tmp/abi in sbx.
func (s *suite) withABI(t *testing.T, sbx *sdk.Sandbox) {
	t.Helper()
	if s.abi == nil {
		t.Skip("the raw system call probe is amd64's")
	}
	if _, err := sbx.Files.Write(t.Context(), "/tmp/abi", s.abi, &sdk.WriteOptions{User: "root"}); err != nil {
		t.Fatal(err)
	}
	run(t, sbx, "root", "chmod 755 /tmp/abi")
}

// results are the "name: value" lines of out.
func results(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return m
}

// refused fails t unless every name has a line in out and none says OK,
// but for calls that gVisor's own kernel serves (gvisorServes) on backend
// gvisor: there they may succeed, on the sandbox's own kernel objects,
// and what they could change of the host's is checked by TestEscape's
// before-and-after of the host (hostState).
func refused(t *testing.T, backend, out string, names ...string) {
	t.Helper()
	r := results(out)
	for _, n := range names {
		v, ok := r[n]
		switch {
		case !ok:
			t.Errorf("%s: the attempt did not report", n)
		case v == "OK" && backend == "gvisor" && gvisorServes(n) != "":
			t.Logf("%s: done by gVisor's kernel, inside the sandbox: %s", n, gvisorServes(n))
		case v == "OK":
			t.Errorf("%s: the call succeeded", n)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// gvisorServes says why a call seccomp refuses natively is gVisor's own
// on the gvisor backend: its kernel, in user space, implements it for the
// sandbox alone. "" for the rest.
func gvisorServes(name string) string {
	switch name {
	case "clone-newuser", "clone3-newuser", "clone3-newns":
		return "namespaces of gVisor's kernel, nested in the sandbox's"
	case "keyctl-join":
		return "a session keyring of gVisor's kernel (the host's /proc/keys is checked)"
	case "syslog-read-all":
		return "gVisor's own boot log"
	case "open-sysrq-trigger", "create-sysrq-trigger":
		return "gVisor's /proc/sysrq-trigger, which does nothing"
	case "write-overcommit_memory", "write-ip_forward":
		return "gVisor's /proc/sys (the host's values are checked)"
	case "mbind", "set_mempolicy":
		return "memory policy of gVisor's memory manager"
	}
	return ""
}

// want fails t unless out has each line, whole.
func want(t *testing.T, out string, lines ...string) {
	t.Helper()
	have := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		have[strings.TrimSpace(l)] = true
	}
	for _, l := range lines {
		if !have[l] {
			t.Errorf("want the line %q", l)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// absent fails t if out holds any of the strings.
func absent(t *testing.T, out string, what ...string) {
	t.Helper()
	for _, w := range what {
		if w != "" && strings.Contains(out, w) {
			t.Errorf("%q was seen inside the sandbox:\n%s", w, out)
		}
	}
}

// alive fails t unless sbx still runs commands (its daemon answers).
func alive(t *testing.T, sbx *sdk.Sandbox) {
	t.Helper()
	// A daemon that was killed may take a moment to come back.
	var res *sdk.CommandResult
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		res, err = sbx.Commands.Run(t.Context(), "echo alive", &sdk.RunOptions{Timeout: time.Minute})
		if err == nil && res.Stdout == "alive\n" {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Errorf("the sandbox no longer answers: %+v, %v", res, err)
}

// aliveOrGone fails t unless sbx either answers or is gone from the API:
// a sandbox whose daemon its own root killed ends (and is reported so at
// once); it is never listed as running while nothing answers.
func aliveOrGone(t *testing.T, sbx *sdk.Sandbox) (gone bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		res, err := sbx.Commands.Run(t.Context(), "echo alive", &sdk.RunOptions{Timeout: 20 * time.Second})
		if err == nil && res.Stdout == "alive\n" {
			return false
		}
		if running, err := sbx.IsRunning(t.Context()); err == nil && !running {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("the sandbox is listed as running but does not answer: %+v, %v", res, err)
			return false
		}
	}
}

// hostAlive fails t unless the host's bait process runs, not stopped.
func (s *suite) hostAlive(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.hostPid))
	if err != nil {
		t.Fatalf("the host's process is gone: %v", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 3 || (f[2] != "S" && f[2] != "R") {
		t.Errorf("the host's process is in state %v, want sleeping", f[2:3])
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.hostPid)); err == nil && !strings.Contains(string(b), "TracerPid:\t0\n") {
		t.Errorf("the host's process is traced:\n%s", b)
	}
}

// reg is the suite's OCI registry, started once.
func (s *suite) reg(t *testing.T) string {
	// In the server's network namespace, where its loopback is.
	s.registryOnce.Do(func() {
		s.ns.Do(func() error { s.registry = ocitest.StartRegistry(s.top); return nil })
	})
	if s.registry == "" {
		t.Fatal("the registry did not start")
	}
	return s.registry
}

// push pushes img to ref on the suite's registry (reg).
func (s *suite) push(t *testing.T, ref string, img v1.Image) {
	t.Helper()
	ocitest.Push(t, ref, img, remote.WithTransport(&http.Transport{DialContext: s.ns.DialContext}))
}

// unique returns a name no other test uses.
func unique(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// sha is a host file's content, for before-and-after comparisons.
func sha(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
