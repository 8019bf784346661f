package sdk

import (
	"context"
	"io"
	"maps"
	"time"

	"github.com/hutch-sandbox/hutch/api/gen/process"
)

// Pty runs interactive terminals in a sandbox: `/bin/bash -i -l` on a
// pseudo-terminal made inside the sandbox.
type Pty struct {
	envd *envdClient
}

// PtySize is a terminal's size in character cells.
type PtySize struct {
	Cols, Rows uint32
}

// PtyOptions configure a terminal.
type PtyOptions struct {
	// Size is the initial size; zero means 80x24.
	Size PtySize
	// Envs are added to the environment (after TERM=xterm-256color and
	// LANG=C.UTF-8, which they may override).
	Envs map[string]string
	// Cwd is the working directory; empty means the user's home.
	Cwd string
	// User runs the shell as this user of the sandbox.
	User string
	// Timeout ends the terminal after this long; 0 means
	// DefaultCommandTimeout and NoTimeout means none.
	Timeout time.Duration
	// Output receives everything the terminal prints.
	Output io.Writer
	// OnData is called with each chunk the terminal prints.
	OnData func(data []byte)
}

// Create starts a terminal. Write to it with SendInput, follow it with the
// returned handle (Wait, Kill, Disconnect).
func (p *Pty) Create(ctx context.Context, opts PtyOptions) (*CommandHandle, error) {
	if opts.Size.Cols == 0 || opts.Size.Rows == 0 {
		opts.Size = PtySize{Cols: 80, Rows: 24}
	}
	envs := map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	maps.Copy(envs, opts.Envs)
	cfg := &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Envs: envs}
	if opts.Cwd != "" {
		cfg.Cwd = &opts.Cwd
	}
	msg := &process.StartRequest{Process: cfg, Pty: &process.PTY{Size: &process.PTY_Size{Cols: opts.Size.Cols, Rows: opts.Size.Rows}}}
	return startStream(ctx, p.envd, "create terminal", opts.Timeout, true, true, outputSinks{pty: ptyOutput(opts)},
		func(sctx context.Context) (processStream, error) {
			s, err := p.envd.proc.Start(sctx, streamRequest(msg, opts.User))
			return startEvents{s}, err
		})
}

// SendInput types data into terminal pid.
func (p *Pty) SendInput(ctx context.Context, pid uint32, data []byte) error {
	_, err := unary(ctx, p.envd, "send terminal input", p.envd.proc.SendInput, &process.SendInputRequest{
		Process: selector(pid), Input: &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: data}},
	}, "")
	return err
}

// Resize changes terminal pid's size; the shell gets SIGWINCH.
func (p *Pty) Resize(ctx context.Context, pid uint32, size PtySize) error {
	_, err := unary(ctx, p.envd, "resize terminal", p.envd.proc.Update, &process.UpdateRequest{
		Process: selector(pid), Pty: &process.PTY{Size: &process.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
	}, "")
	return err
}

// Kill kills terminal pid (SIGKILL); ErrNotFound if it is not running.
func (p *Pty) Kill(ctx context.Context, pid uint32) error {
	return p.envd.signal(ctx, pid, process.Signal_SIGNAL_SIGKILL)
}

// Connect follows a running terminal by pid (one made by Create, perhaps
// by another client): output goes to opts.Output and opts.OnData from now
// on; Size, Envs, Cwd and User are not used.
func (p *Pty) Connect(ctx context.Context, pid uint32, opts PtyOptions) (*CommandHandle, error) {
	c := &Commands{envd: p.envd}
	return c.Connect(ctx, pid, &ProcessConnectOptions{Timeout: opts.Timeout, OnPty: ptyOutput(opts)})
}

// ptyOutput is where a terminal's output goes.
func ptyOutput(opts PtyOptions) func([]byte) {
	switch {
	case opts.Output != nil && opts.OnData != nil:
		return func(b []byte) { opts.Output.Write(b); opts.OnData(b) }
	case opts.Output != nil:
		return func(b []byte) { opts.Output.Write(b) }
	}
	return opts.OnData
}
