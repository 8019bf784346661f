package faults

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// env is a `hutch serve` of a test, on a data dir and the package's
// template store, stopped and started again as the test needs.
type env struct {
	srv    *hutchtest.Server
	base   []string // the server's environment, no fault armed
	client *sdk.Client
}

// newEnv makes a server (not started) on backend ("native", "gvisor")
// with the flags given after the tests' own: no network, no warm pool.
func newEnv(t *testing.T, backend string, args ...string) *env {
	t.Helper()
	if backend == "gvisor" {
		hutchtest.RequireRunsc(t)
	}
	// Short: envd's sockets are under it, and a unix socket's path has
	// at most 107 bytes.
	tmp, err := os.MkdirTemp(filepath.Dir(templates), "d")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(tmp, 0o711)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	return newEnvIn(t, filepath.Join(tmp, "data"), templates, backend, args...)
}

// newEnvIn is newEnv on data dir data and template store tpl.
func newEnvIn(t *testing.T, data, tpl, backend string, args ...string) *env {
	t.Helper()
	srv := hutchtest.NewServer(t, hutchBin.Path(t), data)
	srv.Env = append(srv.Env, "HUTCH_TEMPLATES="+tpl)
	srv.Args = append([]string{"--domain", hutchtest.TestDomain, "--network=false", "--warm", "0", "--runtime", backend}, args...)
	c, err := sdk.NewClient(sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL(), RequestTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, base: srv.Env, client: c}
}

// start starts the server with the fault points of armed ("" for none).
func (e *env) start(armed string) {
	e.srv.Env = e.base
	if armed != "" {
		e.srv.Env = append(slices.Clip(e.base), fault.Env+"="+armed)
	}
	e.srv.Start()
}

// waitDead waits for the server to have killed itself, failing the test
// if it still runs: the armed point was never reached.
func (e *env) waitDead(t *testing.T, step string) {
	t.Helper()
	pid := e.srv.Pid()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pid == 0 || syscall.Kill(pid, 0) != nil {
			break
		}
		if time.Now().After(deadline) {
			e.srv.Stop(syscall.SIGKILL)
			t.Fatalf("the server never reached %s", step)
		}
	}
	e.srv.Stop(syscall.SIGKILL) // reaps it
}

// sandbox creates a sandbox holding the file /home/user/kept ("kept").
func (e *env) sandbox(t *testing.T) *sdk.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := e.client.Create(ctx, sdk.CreateOptions{Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := sb.Files.Write(ctx, "/home/user/kept", []byte("kept"), nil); err != nil {
		t.Fatalf("write: %v", err)
	}
	return sb
}

// list is every sandbox the API reports, by id.
func (e *env) list(t *testing.T) map[string]sdk.SandboxInfo {
	t.Helper()
	out := map[string]sdk.SandboxInfo{}
	for sb, err := range e.client.List(sdk.ListOptions{}).All(context.Background()) {
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		out[sb.SandboxID] = sb
	}
	return out
}

// works checks that sandbox id answers: a paused one is resumed first; a
// sandbox made by the test (kept) still has its file.
func (e *env) works(t *testing.T, id string, kept bool) {
	t.Helper()
	ctx := context.Background()
	sb, err := e.client.Connect(ctx, id, sdk.ConnectOptions{Timeout: 5 * time.Minute})
	if err != nil {
		t.Errorf("sandbox %s is listed, and connect (resume) fails: %v", id, err)
		return
	}
	res, err := sb.Commands.Run(ctx, "cat /home/user/kept 2>/dev/null; echo :ok", &sdk.RunOptions{Timeout: time.Minute})
	if err != nil {
		t.Errorf("sandbox %s is listed, and runs no command: %v", id, err)
		return
	}
	if !strings.HasSuffix(res.Stdout, ":ok\n") || (kept && res.Stdout != "kept:ok\n") {
		t.Errorf("sandbox %s: %q; want its file kept (%v) and :ok", id, res.Stdout, kept)
	}
}

// cut checks the error a client saw for a request the server died in: an
// error (not a silent success), of the transport (the connection ended),
// not an answer of the server. A build runs after its requests were
// answered: its client, polling, may find the server gone (refused).
func cut(t *testing.T, what string, err error) {
	t.Helper()
	var se *sdk.Error
	switch {
	case err == nil:
		t.Errorf("%s: succeeded, though the server died in it", what)
	case !errors.As(err, &se) || se.StatusCode != 0 || se.Err == nil:
		t.Errorf("%s: %v (%#v); want the connection's end", what, err, se)
	case !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "connection reset") &&
		(what != opBuild || !strings.Contains(err.Error(), "connection refused")):
		t.Errorf("%s: %v; want EOF or a connection reset", what, err)
	}
}

// onDisk are the ids of the runtime sandboxes whose state the data dir
// holds (native and gvisor), whether or not anything runs.
func onDisk(data string) []string {
	var ids []string
	for _, d := range []string{filepath.Join(data, "sandboxes"), filepath.Join(data, "gvisor", "sandboxes")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// leftovers are what is left on the host of sandbox id, which is gone: its
// state, mounts, cgroups and processes.
func leftovers(data, id string) []string {
	var out []string
	for _, d := range []string{filepath.Join(data, "sandboxes", id), filepath.Join(data, "gvisor", "sandboxes", id)} {
		if _, err := os.Lstat(d); err == nil {
			out = append(out, d)
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], id) {
				out = append(out, "mount "+f[4])
			}
		}
	}
	for _, pattern := range []string{"/sys/fs/cgroup/*/hutch/" + id, "/sys/fs/cgroup/hutch/" + id, "/sys/fs/cgroup/*/hutch-gvisor/*/" + id, "/sys/fs/cgroup/hutch-gvisor/*/" + id} {
		m, _ := filepath.Glob(pattern)
		for _, p := range m {
			out = append(out, "cgroup "+p)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), id) {
			out = append(out, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// consistent checks the restarted server against the runtime: every
// sandbox the runtime has is listed, every one listed running runs and
// works, every one listed paused resumes and works (never half); acked
// are sandboxes the API acknowledged (made, or paused) that must still be
// there; known are every id the data dir had at the kill, each either
// listed or gone without a trace. It returns the listed sandboxes.
func (e *env) consistent(t *testing.T, acked, known []string) map[string]sdk.SandboxInfo {
	t.Helper()
	listed := e.list(t)
	rts := e.srv.RuntimeSandboxes()
	inRuntime := map[string]string{}
	for _, st := range rts {
		inRuntime[st.ID] = st.State
		if _, ok := listed[st.ID]; !ok {
			t.Errorf("the runtime has sandbox %s (%s), the API does not list it", st.ID, st.State)
		}
	}
	for id, sb := range listed {
		if sb.State == "running" && inRuntime[id] != "running" {
			t.Errorf("the API lists sandbox %s running, the runtime has it %q", id, inRuntime[id])
		}
	}
	for _, id := range acked {
		if _, ok := listed[id]; !ok {
			t.Errorf("sandbox %s, acknowledged before the kill, is not listed", id)
		}
	}
	for _, id := range known {
		if _, ok := listed[id]; ok {
			continue
		}
		if l := leftovers(e.srv.DataDir, id); len(l) > 0 {
			t.Errorf("sandbox %s is gone, and left %v", id, l)
		}
	}
	for id := range listed {
		e.works(t, id, slices.Contains(acked, id))
	}
	return listed
}
