package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where a gateway keeps its files in a sandbox. E2B's SDK reads the token
// from TokenPath (getMcpToken).
const (
	TokenPath  = "/etc/mcp-gateway/.token"
	ConfigPath = "/etc/mcp-gateway/config.json"
	LogPath    = "/var/log/mcp-gateway.log"
)

// LaunchOptions configure Launch.
type LaunchOptions struct {
	// Config is the --config JSON.
	Config []byte
	// Token is the bearer token clients must send.
	Token string
	// Command runs the serving gateway (this binary with the arguments
	// that make it serve ConfigPath); it gets the token in the
	// GATEWAY_ACCESS_TOKEN environment variable, never in its arguments.
	Command []string
	// Timeout bounds the wait for the gateway to serve; the SDK's own
	// command timeout is 60 s.
	Timeout time.Duration
}

// ReadyFD is the descriptor of the serving gateway on which Launch waits
// for "ready" (ExtraFiles[0]); ReadyEnv, set to "1" in its environment,
// says it has one.
const (
	ReadyFD  = 3
	ReadyEnv = "HUTCH_GATEWAY_READY_FD"
)

// Launch validates the configuration, writes it and the token (readable by
// root only), starts the serving gateway in a session of its own with its
// output in LogPath, and returns once it serves — or, if it exits first or
// does not serve in time, an error that ends with its log. E2B's SDK runs
// this as a foreground command and waits for it: the gateway outlives it.
//
// The serving gateway says it serves on a pipe (ReadyFD), never through
// its port: a server of the gateway's (untrusted code) that took the port
// would get a readiness probe, and its token, otherwise (review 31, round
// 2, F1). It holds the port before it starts any server (Serve).
func Launch(ctx context.Context, opts LaunchOptions) error {
	if _, err := ParseConfig(opts.Config); err != nil {
		return err
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(Port), time.Second); err == nil {
		c.Close()
		return fmt.Errorf("port %d is taken: an MCP gateway already runs in this sandbox", Port)
	}
	for path, data := range map[string][]byte{ConfigPath: opts.Config, TokenPath: []byte(opts.Token)} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	logf, err := os.OpenFile(LogPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("gateway log: %w", err)
	}
	defer logf.Close()
	ready, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer ready.Close()
	cmd := exec.Command(opts.Command[0], opts.Command[1:]...)
	cmd.Env = append(os.Environ(), "GATEWAY_ACCESS_TOKEN="+opts.Token, ReadyEnv+"=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start the gateway: %w", err)
	}
	said := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(ready, 64))
		said <- string(b)
	}()
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 50 * time.Second
	}
	select {
	case msg := <-said:
		if msg == readyMsg {
			cmd.Process.Release()
			return nil
		}
		// It closed the pipe without serving: it exited, or is exiting.
		err := cmd.Wait()
		return fmt.Errorf("the MCP gateway exited (%v):\n%s", err, tail(LogPath))
	case <-time.After(timeout):
		cmd.Process.Kill()
		return fmt.Errorf("the MCP gateway did not serve within %v:\n%s", timeout, tail(LogPath))
	case <-ctx.Done():
		cmd.Process.Kill()
		return ctx.Err()
	}
}

// readyMsg is what the serving gateway writes on ReadyFD once it serves.
const readyMsg = "ready\n"

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	return lastLines(string(b), 30)
}

// Serve runs a gateway of the configuration at ConfigPath on addr until
// ctx ends: what Launch starts. It listens before it starts any server,
// so no server can take the port, and then says "ready" on ReadyFD when
// that is a pipe from Launch.
func Serve(ctx context.Context, addr, token string, opts Options) error {
	if token == "" {
		return errors.New("GATEWAY_ACCESS_TOKEN is empty")
	}
	// The servers it starts inherit no_new_privs: a setuid program an
	// image ships or a bind shows (sudo) raises no server to root, nor
	// does a file capability (review 31, F2). The gateway needs neither.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	raw, err := os.ReadFile(ConfigPath)
	if err != nil {
		return err
	}
	servers, err := ParseConfig(raw)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	g, err := New(ctx, servers, opts)
	if err != nil {
		return err
	}
	defer g.Close()
	srv := &http.Server{Handler: g.Handler(token), ReadHeaderTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if opts.Logger != nil {
		opts.Logger.Info("MCP gateway serving", "addr", ln.Addr().String(), "tools", len(g.Tools(ctx)))
	}
	if opts.Ready != nil {
		opts.Ready.Write([]byte(readyMsg))
		opts.Ready.Close()
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
