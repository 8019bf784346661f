// Package mcp tests `hutch mcp`, Hutch's MCP server, with real clients:
// the official TypeScript MCP SDK client (over stdio and streamable HTTP),
// the MCP Inspector CLI and the official conformance suite, all installed
// from test/mcp/js (pinned, with its package-lock.json) and run against
// the hutch binary built from this checkout and a real `hutch serve`.
// Everything listens on and talks to loopback only.
package mcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// bin is cmd/hutch built from this checkout, once.
var bin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, bin) }

// jsDir holds package.json, package-lock.json and the client scripts
// (under test/).
const jsDir = "mcp/js"

// nodeTimeout bounds one node run (a client scenario, the Inspector CLI,
// the conformance suite).
const nodeTimeout = 90 * time.Second

// fixture is a real `hutch serve` and the installed JS packages.
type fixture struct {
	bin string
	srv *hutchtest.Server
	// js is test/mcp/js (absolute), its packages installed.
	js string
	// env is this process's environment without HUTCH_* and E2B_*
	// variables: what `hutch mcp` and the clients run with, so that only
	// the flags (or variables) a test gives configure them.
	env []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	// Before the packages are installed: the server needs root.
	testenv.RequireRoot(t, "hutch serve runs sandboxes: namespaces, cgroups and mounts")
	js := hutchtest.JSPackage(t, jsDir)
	b := bin.Path(t)
	return &fixture{bin: b, srv: hutchtest.StartServe(t, b), js: js, env: hutchtest.CleanEnv()}
}

// stdioCommand is the `hutch mcp` command line a stdio client spawns,
// pointed at the fixture's server with flags.
func (f *fixture) stdioCommand(key string) []string {
	return []string{f.bin, "mcp", "--transport", "stdio", "--api-url", f.srv.URL(), "--api-key", key}
}

// newKey creates another API key of the fixture's server with `hutch
// keys create` on its data dir, and returns it and its id.
func (f *fixture) newKey(t *testing.T, name string) (key, id string) {
	t.Helper()
	stdout, stderr := f.keys(t, "create", "--name", name)
	key = strings.TrimSpace(stdout)
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
		t.Fatalf("hutch keys create printed %q, want an e2b_ key", key)
	}
	m := regexp.MustCompile(`created key (\S+)`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("hutch keys create said %q, want the key's id", stderr)
	}
	return key, m[1]
}

// keys runs `hutch keys ARGS` on the fixture server's data dir.
func (f *fixture) keys(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(f.bin, append([]string{"keys"}, args...)...)
	cmd.Env = f.srv.Env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("hutch keys %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String()
}

// mcpHTTP is a running `hutch mcp --transport http`.
type mcpHTTP struct {
	// URL is its endpoint, http://127.0.0.1:PORT/mcp.
	URL string
}

// startHTTP starts `hutch mcp --transport http` on a free loopback port,
// pointed at the fixture's server, with the extra flags given; it is
// stopped when the test ends.
func (f *fixture) startHTTP(t *testing.T, args ...string) *mcpHTTP {
	t.Helper()
	addr := hutchtest.FreeAddr(t)
	argv := append([]string{"mcp", "--transport", "http", "--listen", addr, "--api-url", f.srv.URL()}, args...)
	cmd := exec.Command(f.bin, argv...)
	cmd.Env = f.env
	out := hutchtest.LogWriter(t, "mcp: ")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { err := cmd.Wait(); out.Close(); done <- err }()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				if err != nil {
					t.Logf("hutch mcp exited after SIGTERM: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("hutch mcp did not exit within 10s of SIGTERM; killing it")
				cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stop)
	m := &mcpHTTP{URL: "http://" + addr + "/mcp"}
	// Ready when it answers HTTP at all (401 without a key).
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(25 * time.Millisecond) {
		resp, err := client.Get(m.URL)
		if err == nil {
			resp.Body.Close()
			return m
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("hutch mcp %s exited before it listened: %v", strings.Join(argv, " "), err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("hutch mcp never listened on %s: %v", addr, err)
		}
	}
}

// nodeRun is one finished run of a node program.
type nodeRun struct {
	Stdout, Stderr string
	Code           int
	Took           time.Duration
}

func (r nodeRun) String() string {
	return fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", r.Code, r.Took.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// node runs `node ARGS` (nodeBin may name another node) in the JS
// package with env (on top of f.env); it fails the test only when node
// cannot run or times out.
func (f *fixture) node(t *testing.T, nodeBin string, env []string, args ...string) nodeRun {
	t.Helper()
	if nodeBin == "" {
		var err error
		if nodeBin, err = exec.LookPath("node"); err != nil {
			t.Fatalf("node is required: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, args...)
	cmd.Dir = f.js
	cmd.Env = append(append(append([]string{}, f.env...), "NO_COLOR=1", "FORCE_COLOR=0"), env...)
	// Clients spawn `hutch mcp` (stdio): kill the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := nodeRun{Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(start)}
	if cmd.Process != nil {
		// Stray children must not outlive the run.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("node %s timed out after %v\n%s", strings.Join(args, " "), nodeTimeout, r)
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("node %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("node %s: exit %d in %v", filepath.Base(args[0]), r.Code, r.Took.Round(time.Millisecond))
	return r
}

// script runs one of test/mcp/js's scripts and fails the test (with its
// output) unless it exits 0; its output is logged either way.
func (f *fixture) script(t *testing.T, env []string, args ...string) nodeRun {
	t.Helper()
	r := f.node(t, "", env, args...)
	if r.Code != 0 {
		t.Fatalf("node %s failed: %s", strings.Join(args, " "), r)
	}
	t.Logf("node %s:\n%s%s", args[0], r.Stdout, r.Stderr)
	return r
}

// TestTSClientStdio: the TypeScript SDK's client spawns `hutch mcp
// --transport stdio` (configured by flags) with StdioClientTransport and
// runs the scenario (scenario.mjs).
func TestTSClientStdio(t *testing.T) {
	f := newFixture(t)
	f.script(t, nil, append([]string{"scenario.mjs", "stdio", "--"}, f.stdioCommand(hutchtest.TestKey)...)...)
}

// TestTSClientHTTP: the same scenario over streamable HTTP, with the API
// key as a bearer token.
func TestTSClientHTTP(t *testing.T) {
	f := newFixture(t)
	m := f.startHTTP(t)
	f.script(t, []string{"MCP_API_KEY=" + hutchtest.TestKey}, "scenario.mjs", "http", m.URL)
}

// TestHTTPAuthAndKeyScoping: over HTTP, requests without a valid bearer
// API key (none, a wrong one, a revoked one, not as a bearer token) get
// 401, cross-origin ones 403, and each key sees and touches only its own
// sandboxes (auth.mjs).
func TestHTTPAuthAndKeyScoping(t *testing.T) {
	f := newFixture(t)
	other, _ := f.newKey(t, "mcp-tenant-b")
	revoked, id := f.newKey(t, "mcp-revoked")
	f.keys(t, "revoke", id)
	m := f.startHTTP(t)
	f.script(t, []string{"KEY_A=" + hutchtest.TestKey, "KEY_B=" + other, "KEY_REVOKED=" + revoked}, "auth.mjs", m.URL)
}

// TestTSClientAllTools: every tool at least once through the TypeScript
// SDK client over HTTP, with what each returns checked (tools.mjs): the
// sandbox lifetime tools, a web server in the sandbox reached through
// sandbox_get_endpoint, background commands, output and time bounds, and
// the file tools.
func TestTSClientAllTools(t *testing.T) {
	f := newFixture(t)
	m := f.startHTTP(t)
	f.script(t, []string{"MCP_API_KEY=" + hutchtest.TestKey}, "tools.mjs", "http", m.URL)
}

// TestTSClientCancel: a tool call the TypeScript SDK client aborts stops
// the command it ran, over stdio and over HTTP (cancel.mjs).
func TestTSClientCancel(t *testing.T) {
	f := newFixture(t)
	t.Run("stdio", func(t *testing.T) {
		f.script(t, nil, append([]string{"cancel.mjs", "stdio", "--"}, f.stdioCommand(hutchtest.TestKey)...)...)
	})
	t.Run("http", func(t *testing.T) {
		m := f.startHTTP(t)
		f.script(t, []string{"MCP_API_KEY=" + hutchtest.TestKey}, "cancel.mjs", "http", m.URL)
	})
}

// TestIdleTimeout: with --idle-timeout, sandboxes made through MCP live
// that long after the last tool call on them (idle.mjs).
func TestIdleTimeout(t *testing.T) {
	f := newFixture(t)
	m := f.startHTTP(t, "--idle-timeout", "2m")
	f.script(t, []string{"MCP_API_KEY=" + hutchtest.TestKey, "IDLE_SECONDS=120"}, "idle.mjs", "http", m.URL)
}
