package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Restart backoff of a crashed server: it doubles from minBackoff up to
// maxBackoff, and starts over once the server has stayed up a while.
const (
	minBackoff = 200 * time.Millisecond
	maxBackoff = 10 * time.Second
	stableUp   = 30 * time.Second
)

// upstream is one server's process and the client session to it. Every
// downstream client shares it: one process per server per gateway, its
// stdio stream used by one client session that multiplexes requests.
type upstream struct {
	srv       *Server
	workspace string
	log       *slog.Logger
	stderr    io.Writer

	mu       sync.Mutex
	session  *mcp.ClientSession // nil while down
	restarts int
	lastErr  error
	// registered: its tools are served (it started at least once).
	registered bool
}

// start runs the server's install command, if any, and starts it.
func (u *upstream) start(ctx context.Context) (*mcp.ClientSession, error) {
	if err := u.install(ctx); err != nil {
		return nil, err
	}
	return u.connect(ctx)
}

// baseEnv is what every server's environment starts from: nothing of the
// gateway's own (its token) nor another server's secrets.
func baseEnv(workspace string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{"PATH=" + path, "HOME=/root", "LANG=C.UTF-8", "PWD=" + workspace}
}

// connect starts the server (or, for a hosted one, connects to it) and
// opens a session to it.
func (u *upstream) connect(ctx context.Context) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "hutch-mcp-gateway", Version: "1"}, &mcp.ClientOptions{})
	// Servers that ask for roots (server-filesystem) get the workspace.
	client.AddRoots(&mcp.Root{URI: "file://" + u.workspace, Name: "workspace"})
	if u.srv.Remote != nil {
		cs, err := client.Connect(ctx, remoteTransport(u.srv.Remote), nil)
		if err != nil {
			return nil, fmt.Errorf("connect to %s (%s): %w", u.srv.Name, u.srv.Remote.URL, err)
		}
		return cs, nil
	}
	var cmd *exec.Cmd
	if u.srv.Root != "" {
		var err error
		if cmd, err = imageCommand(u.srv); err != nil {
			return nil, err
		}
	} else {
		cmd = exec.Command(u.srv.Command, u.srv.Args...)
		env := baseEnv(u.workspace)
		for _, k := range sortedKeys(u.srv.Env) {
			env = append(env, k+"="+u.srv.Env[k])
		}
		cmd.Env = env
		cmd.Dir = u.srv.Dir
		if cmd.Dir == "" {
			cmd.Dir = u.workspace
		}
		if _, err := os.Stat(cmd.Dir); err != nil {
			cmd.Dir = "/"
		}
	}
	cmd.Stderr = &prefixWriter{w: u.stderr, prefix: u.srv.Name + ": "}
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil)
	if err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", u.srv.Name, strings.Join(cmd.Args, " "), err)
	}
	return cs, nil
}

// install runs the server's install command, if any.
func (u *upstream) install(ctx context.Context) error {
	if u.srv.Install == "" {
		return nil
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", u.srv.Install)
	cmd.Env = baseEnv(u.workspace)
	for _, k := range sortedKeys(u.srv.Env) {
		cmd.Env = append(cmd.Env, k+"="+u.srv.Env[k])
	}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("install %s: %w\n%s", u.srv.Name, err, lastLines(string(out), 20))
	}
	return nil
}

// keep restarts the server whenever its session ends, until ctx ends.
func (u *upstream) keep(ctx context.Context, cs *mcp.ClientSession) {
	backoff := minBackoff
	for {
		started := time.Now()
		err := cs.Wait()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("it exited")
		}
		u.mu.Lock()
		u.session, u.lastErr = nil, err
		u.restarts++
		n := u.restarts
		u.mu.Unlock()
		if time.Since(started) > stableUp {
			backoff = minBackoff
		}
		u.log.Warn("MCP server ended; restarting", "server", u.srv.Name, "err", err, "restarts", n, "in", backoff)
		restarted := retry(ctx, &backoff, func() bool {
			next, err := u.connect(ctx)
			if err == nil {
				cs = next
				u.mu.Lock()
				u.session = cs
				u.mu.Unlock()
				u.log.Info("MCP server restarted", "server", u.srv.Name, "restarts", n)
				return true
			}
			u.mu.Lock()
			u.lastErr = err
			u.mu.Unlock()
			u.log.Warn("MCP server failed to restart", "server", u.srv.Name, "err", err, "in", backoff)
			return false
		})
		if !restarted {
			return
		}
	}
}

// retry calls try after each wait, the wait doubling from *backoff up to
// maxBackoff, until try succeeds (true) or ctx ends (false).
func retry(ctx context.Context, backoff *time.Duration, try func() bool) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(*backoff):
		}
		*backoff = min(*backoff*2, maxBackoff)
		if try() {
			return true
		}
	}
}

// get returns the live session, or why there is none.
func (u *upstream) get() (*mcp.ClientSession, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.session == nil {
		return nil, fmt.Errorf("MCP server %s crashed and is being restarted (%d restarts so far; last: %v); try again shortly", u.srv.Name, u.restarts, u.lastErr)
	}
	return u.session, nil
}

// status describes the upstream for /health.
func (u *upstream) status() ServerStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	st := ServerStatus{Name: u.srv.Name, Running: u.session != nil, Restarts: u.restarts}
	if u.lastErr != nil {
		st.LastError = u.lastErr.Error()
	}
	return st
}

func (u *upstream) close() {
	u.mu.Lock()
	cs := u.session
	u.session = nil
	u.mu.Unlock()
	if cs != nil {
		cs.Close()
	}
}

// prefixWriter writes each line with a prefix, for servers' stderr.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	part   []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.part = append(p.part, b...)
	for {
		i := strings.IndexByte(string(p.part), '\n')
		if i < 0 {
			break
		}
		fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.part[:i])
		p.part = p.part[i+1:]
	}
	return len(b), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
