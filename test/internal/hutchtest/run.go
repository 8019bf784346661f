package hutchtest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Result is what a finished command did.
type Result struct {
	Stdout, Stderr string
	// Code is the exit status: 0 for success, -1 when a signal ended it.
	Code int
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %q\nstderr: %q", r.Code, r.Stdout, r.Stderr)
}

// Run runs cmd to its end and returns what it did, its standard output and
// error collected. Whatever the exit status, a command that ran fails
// nothing: the caller judges it; one that could not start fails the test.
func Run(t testing.TB, cmd *exec.Cmd) Result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return Finished(t, cmd, cmd.Run(), out.String(), errb.String())
}

// Finished is Run's Result for a command the caller started and waited
// for itself: err is what Wait (or Run) returned, stdout and stderr what
// it wrote.
func Finished(t testing.TB, cmd *exec.Cmd, err error, stdout, stderr string) Result {
	t.Helper()
	r := Result{Stdout: stdout, Stderr: stderr}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("%s %v: %v", cmd.Path, cmd.Args[1:], err)
	}
	return r
}

// CleanEnv is this process's environment without any HUTCH_* or E2B_*
// variable, plus extra: a command run with it is configured only by what
// the test gives it.
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HUTCH_") && !strings.HasPrefix(kv, "E2B_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
