package hutchtest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NodeCommand is node run with args in dir (a JSPackage, for its
// node_modules), under wrap (nsenter into a network namespace, or nothing),
// with this process's environment plus env; its context ends after
// timeout, and then its whole process group is killed (node --test runs
// each file in a child process).
func NodeCommand(t testing.TB, dir string, wrap []string, timeout time.Duration, env []string, args ...string) (*exec.Cmd, context.CancelFunc) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	argv := append(append(append([]string{}, wrap...), node), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd, cancel
}

// NodeScript runs an ES module (script, its arguments args) with node in
// dir, under wrap, with env added, for at most two minutes, and returns
// its standard output, trimmed; it fails the test if the script fails.
func NodeScript(t testing.TB, dir string, wrap, env []string, script string, args ...string) string {
	t.Helper()
	cmd, cancel := NodeCommand(t, dir, wrap, 2*time.Minute, env, append([]string{"--input-type=module", "-e", script, "--"}, args...)...)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("node script: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// NodeTests runs node's test runner (files, or every *.test.mjs when
// none) in dir under wrap, with env added, for at most timeout, logging
// its output to the test; it returns the runner's failure.
func NodeTests(t testing.TB, dir string, wrap []string, timeout time.Duration, env []string, files ...string) error {
	t.Helper()
	cmd, cancel := NodeCommand(t, dir, wrap, timeout, env, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	defer cancel()
	out := LogWriter(t, "node: ")
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err := cmd.Run()
	out.Close()
	if cmd.Process != nil {
		// Stray children of a failed run must not outlive the test.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("node --test took %v", time.Since(start).Round(time.Millisecond))
	if err != nil && time.Since(start) >= timeout {
		err = errors.Join(err, context.DeadlineExceeded)
	}
	return err
}
