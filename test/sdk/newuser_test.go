package sdk_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// What a new user runs into first, done the way they would do it.

// TestDataDirFromMktemp: `hutch serve --data-dir $(mktemp -d)` works. The
// directory mktemp makes is 0700, which sandboxes' unprivileged uids could
// not pass through to their layers: every create failed with 503 "attach
// template: permission denied".
func TestDataDirFromMktemp(t *testing.T) {
	data, err := os.MkdirTemp("", "hutch-mktemp-") // what mktemp -d makes: 0700 in /tmp
	must(t, err, "MkdirTemp")
	t.Cleanup(func() { os.RemoveAll(data) })
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the data dir is %v (%v), want mode 0700 as mktemp -d makes it", fi.Mode(), err)
	}
	srv := hutchtest.StartServeIn(t, hutchBin.Path(t), data, "--warm", "0")
	cfg := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
	sbx, err := sdk.Create(t.Context(), sdk.CreateOptions{Config: cfg})
	must(t, err, "Create in a data dir of mode 0700")
	killAtEnd(t, sbx)
	if out := run(t, sbx, "echo works", nil).Stdout; out != "works\n" {
		t.Errorf("echo works printed %q", out)
	}
	// Opened for passing through only: nobody else may list it.
	if fi, err := os.Stat(data); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("the data dir is now %v (%v), want 0711", fi.Mode(), err)
	}
}

// TestDataDirUnderClosedParent: a data dir below a directory Hutch does not
// own and sandboxes cannot pass through (a home directory of mode 0700,
// say) makes `hutch serve` refuse to start, saying which directory is in
// the way and what to do, rather than serve and fail every create.
func TestDataDirUnderClosedParent(t *testing.T) {
	parent, err := os.MkdirTemp("", "hutch-closed-") // 0700
	must(t, err, "MkdirTemp")
	t.Cleanup(func() { os.RemoveAll(parent) })
	data := filepath.Join(parent, "data")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, hutchBin.Path(t), "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--network=false")
	cmd.Env = append(os.Environ(), "HUTCH_API_KEY="+hutchtest.TestKey)
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("hutch serve under a closed directory: %v (%v), want a refusal at once\n%s", err, ctx.Err(), out)
	}
	for _, want := range []string{parent + " (mode 0700) is closed to other users", "chmod o+x " + parent} {
		if !strings.Contains(string(out), want) {
			t.Errorf("hutch serve said %q; want it to contain %q", out, want)
		}
	}
	// The refusal changed nothing above the data dir.
	if fi, err := os.Stat(parent); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the parent directory is now %v (%v), want it left at 0700", fi.Mode(), err)
	}
}

// TestBasePython: the base template answers to python and pip, as E2B's
// base image (python:3.11) does; with only python3 in it, `python -m
// http.server` failed with 127. pip installs, as there: Debian's mark of
// a Python that apt manages (PEP 668) would refuse every install. Run it
// against a store rebuilt from this checkout's recipe (HUTCH_TEMPLATES):
// a base built from an older one is the old template.
func TestBasePython(t *testing.T) {
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{})
	for _, tc := range []struct{ cmd, want string }{
		{"python --version", "Python 3.11."},
		{"pip --version", "(python 3.11)"},
		{"pip3 --version", "(python 3.11)"},
		{"python -m http.server --help", "usage:"},
		{"python -m venv /tmp/venv && /tmp/venv/bin/python -c 'import sys; print(sys.prefix)'", "/tmp/venv"},
	} {
		res, err := sbx.Commands.Run(t.Context(), tc.cmd, nil)
		if err != nil {
			t.Errorf("%s: %v (stderr %q)", tc.cmd, err, errText(res))
			continue
		}
		if !strings.Contains(res.Stdout, tc.want) {
			t.Errorf("%s printed %q, want %q in it", tc.cmd, res.Stdout, tc.want)
		}
	}
	// Offline (--no-index: nowhere to look), so it fails either way; what
	// matters is why.
	res, err := sbx.Commands.Run(t.Context(), "pip install --no-index no-such-package", nil)
	if err == nil || strings.Contains(errText(res), "externally-managed-environment") || !strings.Contains(errText(res), "No matching distribution found") {
		t.Errorf("pip install: %v, stderr %q; want it to look for the package, not refuse to install", err, errText(res))
	}
}

// errText is a command's standard error, "" when there is no result.
func errText(res *sdk.CommandResult) string {
	if res == nil {
		return ""
	}
	return res.Stderr
}
