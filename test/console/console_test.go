// Package console_test drives Hutch's web console end to end: a real
// `hutch serve` built from this checkout, a real headless Chromium
// (Debian's chromium package) driven by playwright-core (js/console.mjs),
// sandboxes made and checked through the Go SDK. Screenshots of each step
// are kept in $HUTCH_ARTIFACTS/console (else /var/tmp/hutch-artifacts/console).
package console_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

// chromium is Debian's chromium, which scripts/setup.sh installs.
const chromium = "/usr/bin/chromium"

func TestMain(m *testing.M) {
	testenv.RequireRootMain("hutch serve runs sandboxes: namespaces, cgroups and mounts")
	code := m.Run()
	hutchBin.Remove()
	os.Exit(code)
}

// createKey makes an API key with `hutch keys create` on the server's
// data dir and returns it.
func createKey(t *testing.T, srv *hutchtest.Server, name string) string {
	t.Helper()
	cmd := exec.Command(srv.Bin, "keys", "create", "--name", name)
	cmd.Env = srv.Env
	res := hutchtest.Run(t, cmd)
	key := strings.TrimSpace(res.Stdout)
	if res.Code != 0 || !strings.HasPrefix(key, "e2b_") {
		t.Fatalf("hutch keys create: %s", res)
	}
	return key
}

func TestConsole(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("Debian's chromium is needed (scripts/setup.sh installs it): %v", err)
	}
	js := hutchtest.JSPackage(t, "console/js")
	srv := hutchtest.StartServe(t, hutchBin.Path(t), "--warm", "0")
	ctx := t.Context()
	keyB := createKey(t, srv, "console-b")
	cfgA := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
	cfgB := sdk.Config{APIKey: keyB, APIURL: srv.URL()}

	// Key B's sandbox, which key A's console must not list.
	b, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfgB, Metadata: map[string]string{"suite": "console"}})
	if err != nil {
		t.Fatalf("create B's sandbox: %v", err)
	}
	t.Cleanup(func() { b.Kill(context.Background()) })
	script := newBrowserScript(t, cfgA, "console")

	script.run(t, js, "console.mjs", 8*time.Minute, "HUTCH_URL="+srv.URL(), "KEY_A="+hutchtest.TestKey, "KEY_B="+keyB,
		"SANDBOX_B="+b.ID, "ARTIFACTS="+artifactsDir(t, "console"), "CHROMIUM="+chromium, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
}
