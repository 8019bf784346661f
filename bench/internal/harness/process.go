package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Process is a server a harness started (hutch serve, nginx), its output
// in a log file.
type Process struct {
	// Name names it in errors.
	Name string
	// Log is the file its output goes to.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Launch starts argv with env added to this process's, its output
// in the file logPath.
func Launch(name, logPath string, env []string, argv ...string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is its process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process (SIGTERM, SIGKILL after grace) and waits for it.
// hutch serve's sandboxes outlive it by design.
func (p *Process) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// LogTail is the end of its output, for errors.
func (p *Process) LogTail() string {
	b, _ := os.ReadFile(p.Log)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// servingAddr finds the address in hutch serve's "serving" log line.
var servingAddr = regexp.MustCompile(`msg=serving addr=([0-9.:]+)`)

// WaitServing waits (30 s at most) for a hutch serve process's "serving"
// log line and then for its GET /health to answer 200, and returns its
// URL (http://host:port). name says which server in errors.
func (p *Process) WaitServing(ctx context.Context, name string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	var last error = errors.New("no serving line in the log yet")
	url := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p.Exited() {
			return "", fmt.Errorf("hutch serve (%s) exited: %s", name, p.LogTail())
		}
		if url == "" {
			if b, err := os.ReadFile(p.Log); err == nil {
				if m := servingAddr.FindSubmatch(b); m != nil {
					url = "http://" + string(m[1])
				}
			}
		}
		if url != "" {
			resp, err := http.Get(url + "/health")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return url, nil
				}
				err = errors.New(resp.Status)
			}
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return "", ctx.Err()
	}
	return "", fmt.Errorf("hutch serve (%s) did not answer GET /health within 30 s (%v): %s", name, last, p.LogTail())
}
