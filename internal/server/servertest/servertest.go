// Package servertest runs a real control plane — SQLite store, sandbox
// manager, native runtime, the E2B API, assembled by internal/serve as
// hutch serve is — inside a test process, on an httptest listener, for
// tests of the clients built on it (the MCP tools, hutch mcp wrap). The
// test binary must be the sandboxes' envd: its TestMain calls
// envdtest.Main.
package servertest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/serve"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// ControlPlane is a running control plane.
type ControlPlane struct {
	// URL is the API's (and the sandboxes' routing) base URL.
	URL string
	// Keys are API keys the control plane accepts, each its own tenant.
	Keys []string
}

// Start starts a control plane with keys API keys (at least one) and
// stops it, killing its sandboxes, when the test ends. It needs root
// (testenv.RequireRoot).
func Start(t testing.TB, keys int) *ControlPlane {
	t.Helper()
	return StartWith(t, keys, Options{})
}

// Options tune a control plane beyond Start's defaults.
type Options struct {
	// MaxPerKey caps each key's running sandboxes (0: no cap): a fuzz
	// target that may create sandboxes at every input stays within it.
	MaxPerKey int
	// Templates is the template store; "" is testenv.TemplatesDir().
	Templates string
	// Logger receives the control plane's log; nil discards it.
	Logger *slog.Logger
}

// StartWith is Start with opts.
func StartWith(t testing.TB, keys int, opts Options) *ControlPlane {
	t.Helper()
	testenv.RequireRoot(t, "namespaces, cgroups and mounts")
	dir := t.TempDir()
	// Sandboxes' uids must traverse to their layers.
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	templates := opts.Templates
	if templates == "" {
		templates = testenv.TemplatesDir()
	}
	ctx := context.Background()
	s, err := serve.Open(ctx, serve.Config{DataDir: dir, Templates: templates,
		Resources: runtime.Resources{MemoryBytes: 256 << 20, CPUs: 1, Pids: 256}, MaxPerKey: opts.MaxPerKey, Logger: opts.Logger,
		// The test binary is the sandboxes' init and envd (envdtest), not
		// gVisor's shim: a sandbox asking for gvisor is refused (400), as
		// on a server without it, not started on a shim that is not one.
		Runtimes: []string{"native"}})
	if err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{}
	for i := range max(keys, 1) {
		key, _, err := s.Store.CreateKey(ctx, fmt.Sprintf("test-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		cp.Keys = append(cp.Keys, key)
	}
	srv := httptest.NewServer(s.Handler)
	t.Cleanup(func() {
		srv.Close()
		all, _ := s.Store.AllSandboxes(context.Background())
		for _, sb := range all {
			s.Manager.Kill(context.Background(), "", sb.ID)
		}
		s.Close()
	})
	cp.URL = srv.URL
	return cp
}
