package console_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// firefox is Debian's firefox-esr, which scripts/setup.sh installs.
const firefox = "/usr/bin/firefox-esr"

// TestConsoleFirefox is a smoke run of the console in Debian's
// firefox-esr, driven by puppeteer-core over WebDriver BiDi
// (firefox/firefox.mjs): a wrong key is refused, key A signs in, a
// sandbox made through the Go SDK appears, its terminal runs echo, a file
// uploads, the console kills it, and no console error or page error
// happens on the way. Screenshots go to $HUTCH_ARTIFACTS/console-firefox
// (else /var/tmp/hutch-artifacts/console-firefox).
func TestConsoleFirefox(t *testing.T) {
	if _, err := os.Stat(firefox); err != nil {
		t.Fatalf("Debian's firefox-esr is needed (scripts/setup.sh installs it): %v", err)
	}
	js := hutchtest.JSPackage(t, "console/firefox")
	srv := hutchtest.StartServe(t, hutchBin.Path(t), "--warm", "0")
	ctx := t.Context()
	cfgA := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
	var made []*sdk.Sandbox
	t.Cleanup(func() {
		for _, s := range made {
			s.Kill(context.Background())
		}
	})

	runCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, "node", "firefox.mjs")
	cmd.Dir = js
	// TMPDIR: puppeteer's Firefox profile goes in the test's temporary
	// directory, which goes even when node does not get to remove it.
	cmd.Env = append(os.Environ(), "HUTCH_URL="+srv.URL(), "KEY_A="+hutchtest.TestKey,
		"ARTIFACTS="+firefoxArtifactsDir(t), "FIREFOX="+firefox, "PUPPETEER_SKIP_DOWNLOAD=1", "TMPDIR="+t.TempDir())
	// node and the Firefox it starts share a process group, which goes
	// whole when the run times out or the test ends: no Firefox is left.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := hutchtest.LogWriter(t, "firefox.mjs stderr: ")
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	// The script's requests, answered one line each.
	answer := func(verb, arg string) string {
		switch verb {
		case "create":
			s, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfgA, Metadata: map[string]string{"suite": "console-firefox"}})
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
		}
		return "error unknown request " + verb
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		t.Log("firefox.mjs: " + line)
		if req, ok := strings.CutPrefix(line, "@@go "); ok {
			verb, arg, _ := strings.Cut(req, " ")
			io.WriteString(stdin, answer(verb, arg)+"\n")
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("firefox.mjs: %v", err)
	}
}

// firefoxArtifactsDir is where TestConsoleFirefox's screenshots go:
// console-firefox beside artifactsDir's console, emptied first.
func firefoxArtifactsDir(t *testing.T) string {
	dir := os.Getenv("HUTCH_ARTIFACTS")
	if dir == "" {
		dir = "/var/tmp/hutch-artifacts"
	}
	dir = filepath.Join(dir, "console-firefox")
	os.RemoveAll(dir) // this run's screenshots only
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
