package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	// Command runs the gateway's supervisor (this binary with the
	// arguments that make it Supervise); it gets the token in the
	// GATEWAY_ACCESS_TOKEN environment variable, never in its arguments.
	Command []string
	// Timeout bounds the wait for the gateway to serve; the SDK's own
	// command timeout is 60 s.
	Timeout time.Duration
}

// The descriptors Launch hands down: ReadyFD, on which the first serving
// gateway says "ready" (ReadyEnv set to "1" says it is there), and
// ListenerFD, the gateway's listening socket on Port (ListenerEnv).
const (
	ReadyFD     = 3
	ReadyEnv    = "HUTCH_GATEWAY_READY_FD"
	ListenerFD  = 4
	ListenerEnv = "HUTCH_GATEWAY_LISTENER_FD"
)

// Launch validates the configuration, writes it and the token (readable by
// root only), starts the serving gateway in a session of its own with its
// output in LogPath, and returns once it serves — or, if it exits first or
// does not serve in time, an error that ends with its log. E2B's SDK runs
// this as a foreground command and waits for it: the gateway outlives it.
//
// The port is root's for the rest of the sandbox's life: Launch binds it
// before anything else runs, and hands the socket to a supervisor (root,
// small) that keeps it and starts the serving gateway with it, again
// whenever it exits (Supervise). So no server of the gateway's (untrusted
// code, other uids) can take the port, even after killing the gateway
// (review 31, rounds 3 and 4: by the OOM killer). The serving gateway
// says it serves on a pipe (ReadyFD), never through its port (round 2).
func Launch(ctx context.Context, opts LaunchOptions) error {
	if _, err := ParseConfig(opts.Config); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "0.0.0.0:"+strconv.Itoa(Port))
	if err != nil {
		return fmt.Errorf("port %d is taken: an MCP gateway already runs in this sandbox (%w)", Port, err)
	}
	lnFile, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		return err
	}
	defer lnFile.Close()
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
	cmd.Env = append(os.Environ(), "GATEWAY_ACCESS_TOKEN="+opts.Token, ReadyEnv+"=1", ListenerEnv+"=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{readyW, lnFile}
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
		// It closed the pipe without serving: it exited, or is exiting;
		// its supervisor would only start it again.
		cmd.Process.Kill()
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
	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", addr); err != nil {
			return err
		}
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

// SuperviseOptions configure Supervise.
type SuperviseOptions struct {
	// Command runs the serving gateway (this binary with the arguments
	// that make it Serve); Listener is the socket it serves on, handed to
	// it as ListenerFD.
	Command  []string
	Listener *os.File
	// Ready, if set, goes to the first serving gateway as ReadyFD.
	Ready  *os.File
	Logger *slog.Logger
}

// Supervise keeps a serving gateway running on the listener until ctx
// ends: it starts it, and starts it again (after a backoff doubling from
// minBackoff to maxBackoff) whenever it exits. It holds the listener all
// along, so the port is never free for another process to take while the
// gateway is down. It makes itself the last the OOM killer picks that it
// may (oom_score_adj 0; the sandbox has no right to go lower).
func Supervise(ctx context.Context, opts SuperviseOptions) error {
	os.WriteFile("/proc/self/oom_score_adj", []byte("0"), 0)
	backoff := minBackoff
	for first := true; ; first = false {
		cmd := exec.Command(opts.Command[0], opts.Command[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), ListenerEnv+"=1")
		cmd.ExtraFiles = []*os.File{nil, opts.Listener}
		if first && opts.Ready != nil {
			cmd.Env = append(cmd.Env, ReadyEnv+"=1")
			cmd.ExtraFiles[0] = opts.Ready
		}
		started := time.Now()
		err := cmd.Start()
		if first && opts.Ready != nil {
			opts.Ready.Close() // the gateway's now, or nobody's: Launch sees either
		}
		if err == nil {
			stop := context.AfterFunc(ctx, func() { cmd.Process.Signal(syscall.SIGTERM) })
			err = cmd.Wait()
			stop()
		}
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > stableUp {
			backoff = minBackoff
		}
		if opts.Logger != nil {
			opts.Logger.Warn("MCP gateway exited; starting it again", "err", err, "in", backoff)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}
