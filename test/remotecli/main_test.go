// Package remotecli tests the hutch CLI's remote commands end to end: it
// builds cmd/hutch, starts a real `hutch serve`, and runs the built binary
// against it as a user would (sandbox, exec, shell through a real
// terminal, cp, logs, completion), checking output, files and exit
// statuses. The local commands (run, exec on the runtime) are
// test/localcli's.
package remotecli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// bin is cmd/hutch built from this checkout.
var bin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, bin) }

// fixture is a running server and the environment to run the CLI in.
type fixture struct {
	bin string
	srv *hutchtest.Server
	// env is the CLI's environment: this process's, without any HUTCH_ or
	// E2B_ variable, and with a data dir holding no api-key file.
	env []string
	// dataDir is the CLI's empty HUTCH_DATA_DIR.
	dataDir string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	b := bin.Path(t)
	f := &fixture{bin: b, srv: hutchtest.StartServe(t, b), dataDir: t.TempDir()}
	f.env = hutchtest.CleanEnv("HUTCH_DATA_DIR=" + f.dataDir)
	return f
}

// result is what a hutch command did.
type result = hutchtest.Result

// flags point the CLI at the fixture's server.
func (f *fixture) flags() []string {
	return []string{"--api-url", f.srv.URL(), "--api-key", hutchtest.TestKey}
}

// hutch runs the CLI with the server's URL and key as flags, stdin as
// its standard input.
func (f *fixture) hutch(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return f.hutchEnv(t, f.env, stdin, append(f.flags(), args...)...)
}

// hutchEnv runs the CLI with exactly env and args.
func (f *fixture) hutchEnv(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, args...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	return hutchtest.Run(t, cmd)
}

// hutchBounded runs the CLI as hutch does, but kills it and fails the
// test as soon as its resident memory passes maxRSS bytes: a command that
// lets a sandbox grow its memory must not take the machine's.
func (f *fixture) hutchBounded(t *testing.T, maxRSS int64, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, append(f.flags(), args...)...)
	cmd.Env = f.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(50 * time.Millisecond):
			if rss := residentBytes(cmd.Process.Pid); rss > maxRSS {
				cmd.Process.Kill()
				<-done
				t.Fatalf("hutch %v: resident memory %d MiB, past %d MiB: killed", args, rss>>20, maxRSS>>20)
			}
		}
	}
	r := hutchtest.Finished(t, cmd, err, out.String(), errb.String())
	if rss := int64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) << 10; rss > maxRSS {
		t.Fatalf("hutch %v: peak resident memory %d MiB, past %d MiB", args, rss>>20, maxRSS>>20)
	}
	return r
}

// residentBytes is process pid's resident memory, 0 if unknown.
func residentBytes(pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ok runs the CLI and fails the test unless it exits 0; it returns
// standard output.
func (f *fixture) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := f.hutch(t, "", args...)
	if r.Code != 0 {
		t.Fatalf("hutch %s: %s", strings.Join(args, " "), r)
	}
	return r.Stdout
}

// wantFailure checks that r exited with code and said exactly one line on
// standard error, "hutch: " and something containing want.
func wantFailure(t *testing.T, r result, code int, want string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("exit %d, want %d\n%s", r.Code, code, r)
	}
	if !strings.HasPrefix(r.Stderr, "hutch: ") || !strings.HasSuffix(r.Stderr, "\n") || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("stderr %q is not one line starting with \"hutch: \"", r.Stderr)
	}
	if !strings.Contains(r.Stderr, want) {
		t.Errorf("stderr %q does not mention %q", r.Stderr, want)
	}
}

// createSandbox creates a sandbox with the CLI and returns its id; it is
// killed when the test ends (sandboxes outlive `hutch serve`).
func (f *fixture) createSandbox(t *testing.T, args ...string) string {
	t.Helper()
	id := strings.TrimSpace(f.ok(t, append([]string{"sandbox", "create"}, args...)...))
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("sandbox create printed %q, want an id", id)
	}
	t.Cleanup(func() { f.hutchEnv(t, f.env, "", append(f.flags(), "sandbox", "kill", id)...) })
	return id
}
