// Package e2bpy runs the official E2B Python SDK (pinned in
// requirements.txt, in a venv hutchtest.PythonVenv makes once) against a
// real `hutch serve`, as a user points it at one: a pytest suite (tests/)
// covering the JS suite's ground with the sync and async APIs. The same
// pytest files run in each mode; only the environment differs (see
// tests/conftest.py).
package e2bpy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, hutchBin) }

// pytestTimeout bounds one pytest run.
const pytestTimeout = 4 * time.Minute

// TestE2BPythonSDK runs the suite over plain HTTP: E2B_API_URL and
// E2B_SANDBOX_URL at hutch serve's one listener.
func TestE2BPythonSDK(t *testing.T) {
	python := venv(t)
	s := hutchtest.StartServe(t, hutchBin.Path(t))
	runPytest(t, exec.Command, python, "http", s.SDKEnv())
}

// venv is the suite's python (every test here runs sandboxes, so it checks
// for root first).
func venv(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t, "sandboxes: namespaces, cgroups and mounts")
	return hutchtest.PythonVenv(t, "requirements.txt")
}

// summary is pytest's last line ("== 40 passed in 12.3s ==").
var summary = regexp.MustCompile(`(?m)^=+ (.*) in [0-9.]+s.* =+$`)

// runPytest runs `python -m pytest` made into a command by command
// (exec.Command, or one that runs it in the server's network namespace)
// in this directory with env added, and fails the test with pytest's output unless every test passed in
// the mode named (conftest.py prints "hutch e2b mode: <mode>"): a skip
// fails too, since nothing here may be left out on a machine that runs
// the suite.
func runPytest(t *testing.T, command func(name string, args ...string) *exec.Cmd, python, mode string, env []string) {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-m", "pytest", "-v", "-rA", "--color=no", "-p", "no:cacheprovider"}
	// E2BPY_TESTS (pytest's own selection: files, -k EXPR) runs only those.
	if sel := os.Getenv("E2BPY_TESTS"); sel != "" {
		args = append(args, regexp.MustCompile(`\s+`).Split(sel, -1)...)
	}
	run := command(python, args...)
	run.Dir = dir
	// Bytecode stays out of the clone; nothing configures the SDK but env.
	run.Env = append(hutchtest.CleanEnv("PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "NO_COLOR=1"), env...)
	// Its own process group, killed whole at the deadline and after.
	if run.SysProcAttr == nil {
		run.SysProcAttr = &syscall.SysProcAttr{}
	}
	run.SysProcAttr.Setpgid = true
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	start := time.Now()
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	var timedOut atomic.Bool
	timer := time.AfterFunc(pytestTimeout, func() {
		timedOut.Store(true)
		syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
	})
	err = run.Wait()
	timer.Stop()
	syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
	if timedOut.Load() {
		err = errors.Join(err, fmt.Errorf("pytest ran longer than %v", pytestTimeout))
	}
	t.Logf("pytest (%s) took %v", mode, time.Since(start).Round(time.Millisecond))
	last := ""
	if m := summary.FindAllStringSubmatch(out.String(), -1); len(m) > 0 {
		last = m[len(m)-1][1]
	}
	switch {
	case err != nil:
		t.Errorf("pytest in mode %s failed: %v\n%s", mode, err, out.String())
	case !bytes.Contains(out.Bytes(), []byte("hutch e2b mode: "+mode+"\n")):
		t.Errorf("pytest did not report mode %s:\n%s", mode, out.String())
	case !regexp.MustCompile(`^\d+ passed(, \d+ deselected)?$`).MatchString(last):
		t.Errorf("pytest in mode %s: %q, want only passes:\n%s", mode, last, out.String())
	default:
		t.Logf("pytest (%s): %s\n%s", mode, last, out.String())
	}
}
