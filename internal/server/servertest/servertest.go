// Package servertest runs a real control plane — SQLite store, sandbox
// manager, native runtime, the E2B API — inside a test process, on an
// httptest listener, for tests of the clients built on it (the MCP tools,
// hutch mcp wrap). The test binary must be the sandboxes' envd: its
// TestMain calls envdtest.Main.
package servertest

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/server"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// ControlPlane is a running control plane.
type ControlPlane struct {
	// URL is the API's (and the sandboxes' routing) base URL.
	URL string
	// Keys are API keys the control plane accepts, each its own tenant.
	Keys []string
}

// Start starts a control plane with keys API keys (at least one) and
// stops it, killing its sandboxes, when the test ends. It skips the test
// unless it runs as root.
func Start(t *testing.T, keys int) *ControlPlane {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: namespaces, cgroups and mounts")
	}
	dir := t.TempDir()
	// Sandboxes' uids must traverse to their layers.
	os.Chmod(filepath.Dir(dir), 0o711)
	os.Chmod(dir, 0o711)
	templates := os.Getenv("HUTCH_TEMPLATES")
	if templates == "" {
		templates = template.DefaultDir
	}
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "hutch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cp := &ControlPlane{}
	for i := range max(keys, 1) {
		key, _, err := st.CreateKey(ctx, fmt.Sprintf("test-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		cp.Keys = append(cp.Keys, key)
	}
	tpl := template.Open(templates)
	rt, err := native.New(native.Options{DataDir: dir, Templates: tpl})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := sandbox.New(sandbox.Options{Runtime: rt, Store: st, Templates: tpl, DataDir: dir,
		Resources: runtime.Resources{MemoryBytes: 256 << 20, CPUs: 1, Pids: 256}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(server.Options{Manager: mgr, Store: st}))
	t.Cleanup(func() {
		srv.Close()
		all, _ := st.AllSandboxes(context.Background())
		for _, s := range all {
			mgr.Kill(context.Background(), "", s.ID)
		}
		mgr.Close()
	})
	cp.URL = srv.URL
	return cp
}
