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
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// browserScript is a browser script of this suite (js/console.mjs,
// firefox/firefox.mjs) run by node, and the Go side of it: the script
// asks for what only the Go SDK should do — make a sandbox, check one is
// gone, run a command as an agent would, remember a template to remove —
// with "@@go <verb> <arg>" lines on its standard output, and reads one
// answer line each on its standard input.
type browserScript struct {
	cfg       sdk.Config // key A's
	suite     string     // the metadata of the sandboxes it makes
	made      []*sdk.Sandbox
	templates []string
}

// newBrowserScript is a script's Go side for key A's cfg; what the script
// made goes when the test ends.
func newBrowserScript(t *testing.T, cfg sdk.Config, suite string) *browserScript {
	s := &browserScript{cfg: cfg, suite: suite}
	t.Cleanup(func() {
		for _, sb := range s.made {
			sb.Kill(context.Background())
		}
		// A template build is in the machine's template store, which the
		// suites share: it goes.
		for _, name := range s.templates {
			req, _ := http.NewRequest("DELETE", cfg.APIURL+"/templates/"+name, nil)
			req.Header.Set("X-API-KEY", cfg.APIKey)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
	return s
}

// answer answers one request of the script.
func (s *browserScript) answer(ctx context.Context, verb, arg string) string {
	switch verb {
	case "create":
		sb, err := sdk.Create(ctx, sdk.CreateOptions{Config: s.cfg, Metadata: map[string]string{"suite": s.suite}})
		if err != nil {
			return "error " + err.Error()
		}
		s.made = append(s.made, sb)
		return sb.ID
	case "gone":
		c, err := sdk.NewClient(s.cfg)
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
		for _, sb := range s.made {
			if sb.ID != id {
				continue
			}
			res, err := sb.Commands.Run(ctx, line, nil)
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
		s.templates = append(s.templates, arg)
		return "ok"
	}
	return "error unknown request " + verb
}

// run runs `node script` in dir with env added, answering its requests,
// for at most timeout; the test fails when the script does. node and the
// browser it starts share a process group, which goes whole when the run
// times out or ends: no browser is left behind.
func (s *browserScript) run(t *testing.T, dir, script string, timeout time.Duration, env ...string) {
	t.Helper()
	ctx := t.Context()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
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
	stderr := hutchtest.LogWriter(t, script+" stderr: ")
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		t.Log(script + ": " + line)
		if req, ok := strings.CutPrefix(line, "@@go "); ok {
			verb, arg, _ := strings.Cut(req, " ")
			io.WriteString(stdin, s.answer(ctx, verb, arg)+"\n")
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v", script, err)
	}
}

// artifactsDir is where a test's screenshots go: name under
// $HUTCH_ARTIFACTS (else /var/tmp/hutch-artifacts), emptied first.
func artifactsDir(t *testing.T, name string) string {
	dir := os.Getenv("HUTCH_ARTIFACTS")
	if dir == "" {
		dir = "/var/tmp/hutch-artifacts"
	}
	dir = filepath.Join(dir, name)
	os.RemoveAll(dir) // this run's screenshots only
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
