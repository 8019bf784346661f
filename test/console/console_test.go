// Package console_test drives Hutch's web console end to end: a real
// `hutch serve` built from this checkout, a real headless Chromium
// (Debian's chromium package) driven by playwright-core (js/console.mjs),
// sandboxes made and checked through the Go SDK. Screenshots of each step
// are kept in $HUTCH_ARTIFACTS/console (else /var/tmp/hutch-artifacts/console).
package console_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// artifactsDir is where the screenshots go.
func artifactsDir(t *testing.T) string {
	dir := os.Getenv("HUTCH_ARTIFACTS")
	if dir == "" {
		dir = "/var/tmp/hutch-artifacts"
	}
	dir = filepath.Join(dir, "console")
	os.RemoveAll(dir) // this run's screenshots only
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
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
	var made []*sdk.Sandbox
	t.Cleanup(func() {
		for _, s := range made {
			s.Kill(context.Background())
		}
	})
	var templates []string
	t.Cleanup(func() {
		// The test's template build is in the machine's template store,
		// which the suites share: it goes.
		for _, name := range templates {
			req, _ := http.NewRequest("DELETE", srv.URL()+"/templates/"+name, nil)
			req.Header.Set("X-API-KEY", hutchtest.TestKey)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})

	runCtx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, "node", "console.mjs")
	cmd.Dir = js
	cmd.Env = append(os.Environ(), "HUTCH_URL="+srv.URL(), "KEY_A="+hutchtest.TestKey, "KEY_B="+keyB,
		"SANDBOX_B="+b.ID, "ARTIFACTS="+artifactsDir(t), "CHROMIUM="+chromium, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := hutchtest.LogWriter(t, "console.mjs stderr: ")
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The script's requests, answered one line each.
	answer := func(verb, arg string) string {
		switch verb {
		case "create":
			s, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfgA, Metadata: map[string]string{"suite": "console"}})
			if err != nil {
				return "error " + err.Error()
			}
			made = append(made, s)
			return s.ID
		case "gone":
			c, err := sdk.NewClient(cfgA)
			if err != nil {
				return "error " + err.Error()
			}
			_, err = c.GetInfo(ctx, arg)
			if errors.Is(err, sdk.ErrNotFound) {
				return "gone"
			}
			return fmt.Sprintf("error the SDK still finds %s: %v", arg, err)
		case "run":
			// run <sandbox> <command>: a command through the SDK, as an
			// agent runs one, for the console's activity to show.
			id, line, _ := strings.Cut(arg, " ")
			for _, s := range made {
				if s.ID != id {
					continue
				}
				res, err := s.Commands.Run(ctx, line, nil)
				var exit *sdk.CommandExitError
				if err != nil && !errors.As(err, &exit) {
					return "error " + err.Error()
				}
				if res == nil {
					res = &exit.CommandResult
				}
				return fmt.Sprintf("exit %d", res.ExitCode)
			}
			return "error no sandbox " + id + " made for the script"
		case "template":
			templates = append(templates, arg)
			return "ok"
		}
		return "error unknown request " + verb
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		t.Log("console.mjs: " + line)
		if req, ok := strings.CutPrefix(line, "@@go "); ok {
			verb, arg, _ := strings.Cut(req, " ")
			io.WriteString(stdin, answer(verb, arg)+"\n")
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("console.mjs: %v", err)
	}
}
