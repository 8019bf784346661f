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
