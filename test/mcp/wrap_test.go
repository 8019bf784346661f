package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// `hutch mcp wrap -- CMD` is a local stdio MCP server whose real server,
// CMD, runs in a fresh sandbox; these tests drive it with the TypeScript
// SDK client (test/mcp/js/wrap.mjs) and the MCP Inspector CLI.
//
// The wrapped server is @modelcontextprotocol/server-memory, pinned in
// test/mcp/js/package.json. The sandboxes of the test servers have no
// network (and wrap runs them with --no-internet too), so it cannot be
// installed there with npm: memoryPrefix lays it out here as an npm
// global prefix, holding exactly the packages it needs, and wrap uploads
// that tree (--file DIR:/home/user/.local). The base template's
// ~/.profile puts ~/.local/bin on the PATH of bash -l, so the command is
// literally `hutch mcp wrap -- mcp-server-memory`.

// memoryPrefix lays out server-memory as `npm install -g --prefix P`
// would: P/lib/node_modules holds the package and its dependency closure,
// each at the path package-lock.json resolves it to under
// test/mcp/js/node_modules, so node resolves them the same way;
// P/bin/mcp-server-memory links to its bin. It returns P.
func (f *fixture) memoryPrefix(t *testing.T) string {
	t.Helper()
	const pkg = "node_modules/@modelcontextprotocol/server-memory"
	closure := lockClosure(t, filepath.Join(f.js, "package-lock.json"), pkg)
	prefix := t.TempDir()
	lib := filepath.Join(prefix, "lib")
	for _, p := range closure {
		if err := copyTree(filepath.Join(f.js, filepath.FromSlash(p)), filepath.Join(lib, filepath.FromSlash(p))); err != nil {
			t.Fatalf("copy %s: %v", p, err)
		}
	}
	bin := filepath.Join(prefix, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../lib/"+pkg+"/dist/index.js", filepath.Join(bin, "mcp-server-memory")); err != nil {
		t.Fatal(err)
	}
	t.Logf("server-memory and %d packages it needs, laid out in %s", len(closure)-1, prefix)
	return prefix
}

// lockClosure returns the packages (package-lock.json paths, such as
// node_modules/a/node_modules/b) that root needs at run time: its
// dependencies, optional dependencies and installed peer dependencies,
// recursively, each resolved as node does: the nearest node_modules up
// from the dependent.
func lockClosure(t *testing.T, lockFile, root string) []string {
	t.Helper()
	b, err := os.ReadFile(lockFile)
	if err != nil {
		t.Fatal(err)
	}
	var lock struct {
		Packages map[string]struct {
			Dependencies         map[string]string `json:"dependencies"`
			OptionalDependencies map[string]string `json:"optionalDependencies"`
			PeerDependencies     map[string]string `json:"peerDependencies"`
			PeerDependenciesMeta map[string]struct {
				Optional bool `json:"optional"`
			} `json:"peerDependenciesMeta"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &lock); err != nil {
		t.Fatalf("%s: %v", lockFile, err)
	}
	resolve := func(from, name string) string {
		for dir := from; ; {
			if p := path.Join(dir, "node_modules", name); hasPackage(lock.Packages, p) {
				return p
			}
			if dir == "" {
				return ""
			}
			i := strings.LastIndex(dir, "/node_modules/")
			if i < 0 {
				dir = ""
			} else {
				dir = dir[:i]
			}
		}
	}
	seen := map[string]bool{}
	var walk func(p string)
	walk = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		e := lock.Packages[p]
		for _, deps := range []map[string]string{e.Dependencies, e.OptionalDependencies, e.PeerDependencies} {
			for name := range deps {
				r := resolve(p, name)
				_, isPeer := e.PeerDependencies[name]
				_, isOpt := e.OptionalDependencies[name]
				switch {
				case r != "":
					walk(r)
				case isOpt || (isPeer && e.PeerDependenciesMeta[name].Optional):
				default:
					t.Fatalf("package-lock.json: %s needs %s, which is not installed", p, name)
				}
			}
		}
	}
	if !hasPackage(lock.Packages, root) {
		t.Fatalf("package-lock.json has no %s: run npm install in test/mcp/js", root)
	}
	walk(root)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func hasPackage[V any](m map[string]V, p string) bool {
	_, ok := m[p]
	return ok
}

// copyTree copies directory src to dst: directories, regular files (with
// their permission bits) and symlinks.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case info.Mode().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		}
		return nil
	})
}

// wrapCommand is the command line that runs `hutch mcp wrap FLAGS -- CMD`
// against the fixture's server.
func (f *fixture) wrapCommand(flags []string, cmd ...string) []string {
	argv := []string{f.bin, "--api-url", f.srv.URL(), "--api-key", hutchtest.TestKey, "mcp", "wrap"}
	argv = append(append(argv, flags...), "--")
	return append(argv, cmd...)
}

// memoryWrap is the wrap command line of server-memory, uploaded from
// prefix, in a sandbox without internet.
func (f *fixture) memoryWrap(prefix string, flags ...string) []string {
	return f.wrapCommand(append([]string{"--no-internet", "--file", prefix + ":/home/user/.local"}, flags...), "mcp-server-memory")
}

// wrapEnv points wrap.mjs at the fixture's server (to list sandboxes).
func (f *fixture) wrapEnv(extra ...string) []string {
	return append([]string{"WRAP_API_URL=" + f.srv.URL(), "WRAP_API_KEY=" + hutchtest.TestKey}, extra...)
}

// wrapSandboxes lists the sandboxes wrap made (metadata hutch.mcp=wrap).
func (f *fixture) wrapSandboxes(t *testing.T) []sdk.SandboxInfo {
	t.Helper()
	c, err := sdk.NewClient(sdk.Config{APIURL: f.srv.URL(), APIKey: hutchtest.TestKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []sdk.SandboxInfo
	for info, err := range c.List(sdk.ListOptions{Metadata: map[string]string{"hutch.mcp": "wrap"}}).All(ctx) {
		if err != nil {
			t.Fatalf("list sandboxes: %v", err)
		}
		out = append(out, info)
	}
	return out
}

// waitNoWrapSandboxes fails the test unless the sandboxes wrap made are
// gone within d.
func (f *fixture) waitNoWrapSandboxes(t *testing.T, d time.Duration, after string) {
	t.Helper()
	start := time.Now()
	for {
		left := f.wrapSandboxes(t)
		if len(left) == 0 {
			t.Logf("no wrap sandbox %v after %s", time.Since(start).Round(time.Millisecond), after)
			return
		}
		if time.Since(start) > d {
			t.Fatalf("%v after %s, wrap's sandboxes are still there: %+v", d, after, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWrapTSClient: the TypeScript SDK client spawns `hutch mcp wrap --
// mcp-server-memory` over stdio: the tools are listed, state is kept
// across calls, the server's stderr reaches the client's, and when the
// client closes, wrap exits 0 by itself and the sandbox is gone
// (wrap.mjs memory).
func TestWrapTSClient(t *testing.T) {
	f := newFixture(t)
	prefix := f.memoryPrefix(t)
	f.script(t, f.wrapEnv(), append([]string{"wrap.mjs", "memory", "--"}, f.memoryWrap(prefix)...)...)
	f.waitNoWrapSandboxes(t, 0, "the client closed")
}

// TestWrapInspector: the MCP Inspector's CLI lists the tools of the
// wrapped server-memory, and calls one; no sandbox outlives its runs.
func TestWrapInspector(t *testing.T) {
	f := newFixture(t)
	prefix := f.memoryPrefix(t)
	var list struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	raw := f.inspectorOK(t, append([]string{"--method", "tools/list", "--format", "json"}, f.memoryWrap(prefix)...)...)
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatalf("tools/list: %v\n%s", err, raw)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"create_entities", "read_graph", "search_nodes"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list through wrap lacks %s: %v", want, names)
		}
	}
	t.Logf("tools/list through wrap: %v", names)
	f.waitNoWrapSandboxes(t, 5*time.Second, "the Inspector's tools/list")

	res := decodeToolResult(t, f.inspectorOK(t, append([]string{"--method", "tools/call", "--tool-name", "create_entities",
		"--tool-args-json", `{"entities":[{"name":"inspector","entityType":"test","observations":["via wrap"]}]}`, "--format", "json"}, f.memoryWrap(prefix)...)...))
	if !strings.Contains(res.Content[0].Text, "inspector") {
		t.Errorf("create_entities through wrap: %+v", res)
	}
	f.waitNoWrapSandboxes(t, 5*time.Second, "the Inspector's tools/call")
}

// pyServer is a stdio MCP server in Python without dependencies: tools
// read_file(path) and get_env(name). It says on stderr that it serves.
const pyServer = `import json, os, sys

TOOLS = [
    {"name": "read_file", "description": "Read a text file of the server's machine",
     "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "get_env", "description": "An environment variable of the server",
     "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
]

def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()

def call(name, args):
    if name == "read_file":
        try:
            with open(args["path"]) as f:
                return {"content": [{"type": "text", "text": f.read()}]}
        except OSError as e:
            return {"content": [{"type": "text", "text": "%s: %s" % (type(e).__name__, e)}], "isError": True}
    if name == "get_env":
        return {"content": [{"type": "text", "text": os.environ.get(args["name"], "<unset>")}]}
    return {"content": [{"type": "text", "text": "no tool " + name}], "isError": True}

sys.stderr.write("py-mcp: serving on stdio\n")
sys.stderr.flush()
while True:
    line = sys.stdin.readline()
    if not line:
        break
    if not line.strip():
        continue
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        result = {"protocolVersion": params.get("protocolVersion", "2025-11-25"), "capabilities": {"tools": {}},
                  "serverInfo": {"name": "py-mcp", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        result = call(params["name"], params.get("arguments") or {})
    elif method == "ping":
        result = {}
    else:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no method " + str(method)}})
        continue
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
`

// TestWrapHostIsolation: the wrapped server (a read_file tool) cannot
// read a file of this machine, but reads one uploaded with --file; it
// sees this machine's environment only as -e passes it (wrap.mjs
// hostfile).
func TestWrapHostIsolation(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	server := filepath.Join(dir, "server.py")
	inside := filepath.Join(dir, "inside.txt")
	// The marker is in /tmp: a path that exists in the sandbox too.
	marker, err := os.CreateTemp("", "hutch-wrap-marker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker.Name()) })
	hostText := fmt.Sprintf("host-only marker %d", time.Now().UnixNano())
	marker.WriteString(hostText)
	marker.Close()
	insideText := "uploaded with --file\n"
	if err := os.WriteFile(server, []byte(pyServer), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inside, []byte(insideText), 0o644); err != nil {
		t.Fatal(err)
	}
	argv := f.wrapCommand([]string{"--no-internet", "-e", "WRAP_PASSED",
		"--file", server + ":/home/user/mcp/server.py", "--file", inside + ":/home/user/data/"},
		"python3", "/home/user/mcp/server.py")
	f.script(t, f.wrapEnv("HOST_FILE="+marker.Name(), "HOST_TEXT="+hostText, "INSIDE_PATH=/home/user/data/inside.txt", "INSIDE_TEXT="+insideText),
		append([]string{"wrap.mjs", "hostfile", "--"}, argv...)...)
	f.waitNoWrapSandboxes(t, 0, "the client closed")
}

// holder is a running `node wrap.mjs hold`: a client connected through
// wrap, waiting.
type holder struct {
	cmd *exec.Cmd
	// wrapPID is the pid of `hutch mcp wrap`, the client's child.
	wrapPID int
	lines   chan string
	done    chan error
}

// hold starts `node wrap.mjs hold -- ARGV` and waits until it is
// connected.
func (f *fixture) hold(t *testing.T, argv []string) *holder {
	t.Helper()
	cmd := exec.Command("node", append([]string{"wrap.mjs", "hold", "--"}, argv...)...)
	cmd.Dir = f.js
	cmd.Env = append(append([]string{}, f.env...), f.wrapEnv()...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logw := hutchtest.LogWriter(t, "client: ")
	cmd.Stderr = logw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			t.Logf("client: %s", sc.Text())
			h.lines <- sc.Text()
		}
		close(h.lines)
		h.done <- cmd.Wait()
		logw.Close()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if h.wrapPID > 0 {
			syscall.Kill(h.wrapPID, syscall.SIGKILL)
		}
	})
	ready := regexp.MustCompile(`^READY pid=(\d+)$`)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("the client ended before it was connected: %v", <-h.done)
			}
			if m := ready.FindStringSubmatch(line); m != nil {
				h.wrapPID, _ = strconv.Atoi(m[1])
				return h
			}
		case <-timeout:
			t.Fatal("the client did not connect within 30s")
		}
	}
}

// waitExited waits until process pid has exited (gone, or a zombie).
func waitExited(t *testing.T, pid int, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && strings.Contains(string(st), ") Z ")) {
			t.Logf("hutch mcp wrap exited %v after %s", time.Since(start).Round(time.Millisecond), what)
			return
		}
		if time.Since(start) > d {
			t.Fatalf("hutch mcp wrap (pid %d) still runs %v after %s", pid, d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWrapEnds: whichever way the session ends, the sandbox goes with it:
// the client killed with SIGKILL (wrap's stdin closes), SIGTERM to wrap
// itself; with --keep the sandbox stays, its server stopped.
func TestWrapEnds(t *testing.T) {
	f := newFixture(t)
	prefix := f.memoryPrefix(t)

	t.Run("client SIGKILL", func(t *testing.T) {
		h := f.hold(t, f.memoryWrap(prefix))
		if n := len(f.wrapSandboxes(t)); n != 1 {
			t.Fatalf("%d wrap sandboxes during the session, want 1", n)
		}
		h.cmd.Process.Kill()
		waitExited(t, h.wrapPID, 10*time.Second, "its client was killed")
		f.waitNoWrapSandboxes(t, 2*time.Second, "wrap exited")
	})

	t.Run("wrap SIGTERM", func(t *testing.T) {
		h := f.hold(t, f.memoryWrap(prefix))
		syscall.Kill(h.wrapPID, syscall.SIGTERM)
		select {
		case line := <-h.lines:
			if line != "EXIT code=143 signal=null" {
				t.Errorf("wrap after SIGTERM: %q, want exit 143", line)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("wrap did not exit within 10s of SIGTERM")
		}
		f.waitNoWrapSandboxes(t, 2*time.Second, "wrap exited")
	})

	t.Run("keep", func(t *testing.T) {
		h := f.hold(t, f.memoryWrap(prefix, "--keep"))
		h.cmd.Process.Kill()
		waitExited(t, h.wrapPID, 10*time.Second, "its client was killed")
		time.Sleep(time.Second)
		kept := f.wrapSandboxes(t)
		if len(kept) != 1 {
			t.Fatalf("--keep: %d wrap sandboxes after the session, want 1", len(kept))
		}
		c, err := sdk.NewClient(sdk.Config{APIURL: f.srv.URL(), APIKey: hutchtest.TestKey})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		defer c.Kill(ctx, kept[0].SandboxID)
		sbx, err := c.Connect(ctx, kept[0].SandboxID, sdk.ConnectOptions{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		procs, err := sbx.Commands.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.Tag == "hutch-mcp-wrap" {
				t.Errorf("--keep: the server still runs in the kept sandbox: %+v", p)
			}
		}
		t.Logf("--keep: sandbox %s kept, %d processes of envd running", kept[0].SandboxID, len(procs))
	})
}

// TestWrapBrokenPipes: a client gone from under wrap's pipes. With its
// standard error closed, wrap is not killed by SIGPIPE when it writes
// there (it passes on the server's status); with its standard output
// closed, the server's next output ends the session: exit 141, the
// sandbox killed.
func TestWrapBrokenPipes(t *testing.T) {
	f := newFixture(t)
	run := func(t *testing.T, closeStdout bool, cmd string) (int, string) {
		t.Helper()
		c := exec.Command(f.bin, "--api-url", f.srv.URL(), "--api-key", hutchtest.TestKey, "mcp", "wrap", "--", cmd)
		c.Env = f.env
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close()
		defer w.Close()
		// Standard input stays open: only the broken pipe can end this.
		stdin, err := c.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		var other strings.Builder
		if closeStdout {
			c.Stdout, c.Stderr = w, &other
		} else {
			c.Stdout, c.Stderr = &other, w
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			t.Fatal("hutch mcp wrap did not exit within 20s")
		}
		st := c.ProcessState.Sys().(syscall.WaitStatus)
		if st.Signaled() {
			t.Fatalf("hutch mcp wrap was killed by %v", st.Signal())
		}
		return st.ExitStatus(), other.String()
	}
	t.Run("stderr", func(t *testing.T) {
		code, out := run(t, false, "sleep 0.5; echo to-stderr >&2; exit 3")
		if code != 3 || out != "" {
			t.Errorf("exit %d, stdout %q; want 3 and nothing", code, out)
		}
		f.waitNoWrapSandboxes(t, 0, "wrap exited")
	})
	t.Run("stdout", func(t *testing.T) {
		code, stderr := run(t, true, "sleep 0.5; echo '{}'; sleep 600")
		if code != 141 || !strings.Contains(stderr, "hutch mcp wrap: standard output is closed (the client went away") {
			t.Errorf("exit %d, stderr %q; want 141 and a line saying the client went away", code, stderr)
		}
		f.waitNoWrapSandboxes(t, 0, "wrap exited")
	})
}
