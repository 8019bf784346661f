// Package envdtest runs a real envd inside a real sandbox for tests: a
// sandbox made by the native runtime from the base template, whose first
// process is the test binary itself running envd (so a test package's
// TestMain must call Main). Tests reach it over the host socket, as the
// control plane does.
package envdtest

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envd"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/syncbuf"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// Main is the TestMain of a package using Start: the test binary is also
// the sandbox's init and its envd.
func Main(m *testing.M) {
	if native.IsInit() {
		native.Init()
	}
	if len(os.Args) > 1 && os.Args[1] == "envd" {
		// The flags of `hutch envd` that matter here: the sandbox manager
		// passes an API socket too.
		api := -1
		for i, a := range os.Args {
			if a == "--api-fd" && i+1 < len(os.Args) {
				api, _ = strconv.Atoi(os.Args[i+1])
			}
		}
		if err := envd.Run(context.Background(), envd.Options{DefaultUser: "user", Logger: envd.NewLogger(os.Stderr)}, 3, api, "0.0.0.0:49983"); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Sandbox is a running sandbox with envd in it.
type Sandbox struct {
	// URL is the base URL to use with Client ("http://envd").
	URL string
	// Client reaches the sandbox's envd through its host socket.
	Client *http.Client
	// ID is the sandbox's id.
	ID string
	// SocketPath is the host unix socket Client dials.
	SocketPath string

	log *syncbuf.Buffer
}

// Log returns what envd has written so far.
func (s *Sandbox) Log() string { return s.log.String() }

// Start makes a sandbox running envd, removed when the test ends. It
// needs root (testenv.RequireRoot) and fails the test when the base
// template is missing.
func Start(t testing.TB) *Sandbox {
	t.Helper()
	testenv.RequireRoot(t, "namespaces, cgroups and mounts")
	templates := testenv.TemplatesDir()
	data := t.TempDir()
	os.Chmod(filepath.Dir(data), 0o711)
	rt, err := native.New(native.Options{DataDir: data, Templates: template.Open(templates)})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(data, "envd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox's envd serves this socket; ours only hands it over, and
	// closing it must not unlink the path.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	f, err := ln.(*net.UnixListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := &syncbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Process: runtime.Process{
		Args: []string{runtime.SelfExe, "envd"}, User: "root",
		ExtraFiles: []*os.File{f}, Stdout: log, Stderr: log,
	}})
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() { sbx.Delete(context.Background()) })
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	s := &Sandbox{URL: "http://envd", Client: client, ID: sbx.ID(), SocketPath: sock, log: log}
	for {
		resp, err := client.Get(s.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return s
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("envd never became healthy: %v\nlog: %s", err, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
