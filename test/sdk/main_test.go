// Package sdk_test tests Hutch's Go SDK (package sdk) against a real
// `hutch serve` built from this checkout: no mocks. It covers the same
// behaviours as the official JS SDK's suite in test/e2bjs — lifecycle,
// commands, terminals, files, watches, signed URLs and ports — written the
// way a Go user of the SDK would check them.
//
// Each top-level test starts its own server (cheap) and as few sandboxes
// as it can; every sandbox is killed when its test ends.
package sdk_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) {
	// Every test runs hutch serve, some change the host before it starts.
	testenv.RequireRootMain("hutch serve runs sandboxes: namespaces, cgroups and mounts")
	code := m.Run()
	hutchBin.Remove()
	os.Exit(code)
}

// home is the default user's home directory in the base template.
const home = "/home/user"

// serverRuntime is the runtime backend the servers run sandboxes on:
// HUTCH_RUNTIME, which hutch serve reads too (CI runs a chosen part of
// the suite again on gvisor, scripts/test.sh).
func serverRuntime() string {
	if r := os.Getenv("HUTCH_RUNTIME"); r != "" {
		return r
	}
	return "native"
}

// onGvisor reports whether the servers run sandboxes on gvisor.
func onGvisor() bool { return serverRuntime() == "gvisor" }

// env is a running `hutch serve` and an SDK client for it.
type env struct {
	srv    *hutchtest.Server
	cfg    sdk.Config
	client *sdk.Client
}

// startServer starts `hutch serve` with extra flags; it stops when the
// test ends. No sandboxes are kept warm unless the flags ask for it: the
// machine is small and every test makes only a few.
func startServer(t *testing.T, args ...string) *env {
	t.Helper()
	srv := hutchtest.StartServe(t, hutchBin.Path(t), append([]string{"--warm", "0"}, args...)...)
	cfg := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
	c, err := sdk.NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return &env{srv: srv, cfg: cfg, client: c}
}

// sandbox creates a sandbox (with opts; opts.Config is filled in) that is
// killed when the test ends.
func (e *env) sandbox(t *testing.T, opts sdk.CreateOptions) *sdk.Sandbox {
	t.Helper()
	opts.Config = e.cfg
	sbx, err := sdk.Create(t.Context(), opts)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	killAtEnd(t, sbx)
	return sbx
}

// killAtEnd kills sbx when the test ends, unless it is gone already.
func killAtEnd(t *testing.T, sbx *sdk.Sandbox) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sbx.Kill(ctx); err != nil && !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("kill sandbox %s: %v", sbx.ID, err)
		}
	})
}

// unique returns a name no other test uses.
func unique(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// waitFor polls cond every 50 ms until it is true, failing the test when
// timeout passes first. what describes the condition; it is called only
// on failure, so it can show the state at that time.
func waitFor(t *testing.T, timeout time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// is fails the test unless errors.Is(err, want).
func is(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v (%T), want one matching %q", what, err, err, want)
	}
}

// must fails the test on err.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// run runs cmd in sbx and fails the test unless it exits 0.
func run(t *testing.T, sbx *sdk.Sandbox, cmd string, opts *sdk.RunOptions) *sdk.CommandResult {
	t.Helper()
	res, err := sbx.Commands.Run(t.Context(), cmd, opts)
	if err != nil {
		out := ""
		if res != nil {
			out = fmt.Sprintf("\nstdout: %q\nstderr: %q", res.Stdout, res.Stderr)
		}
		t.Fatalf("run %q: %v%s", cmd, err, out)
	}
	return res
}

// collector gathers output or events from a callback, safely for the
// test goroutine to read while the SDK's goroutine appends.
type collector[T any] struct {
	mu    sync.Mutex
	items []T
}

func (c *collector[T]) add(v T) {
	c.mu.Lock()
	c.items = append(c.items, v)
	c.mu.Unlock()
}

func (c *collector[T]) all() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]T(nil), c.items...)
}

// text is a collector of strings, joined.
type text struct{ collector[string] }

func (x *text) String() string { return strings.Join(x.all(), "") }

// processRunning reports whether a process whose arguments contain marker
// is in sbx's process list.
func processRunning(t *testing.T, sbx *sdk.Sandbox, marker string) bool {
	t.Helper()
	procs, err := sbx.Commands.List(t.Context())
	must(t, err, "Commands.List")
	for _, p := range procs {
		if strings.Contains(strings.Join(p.Args, " "), marker) {
			return true
		}
	}
	return false
}

// pidListed reports whether pid is in sbx's process list.
func pidListed(t *testing.T, sbx *sdk.Sandbox, pid uint32) bool {
	t.Helper()
	procs, err := sbx.Commands.List(t.Context())
	must(t, err, "Commands.List")
	for _, p := range procs {
		if p.PID == pid {
			return true
		}
	}
	return false
}
