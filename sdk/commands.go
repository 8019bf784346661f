package sdk

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/api/gen/process"
)

// Command timeouts.
const (
	// DefaultCommandTimeout is how long a command, terminal or watch may
	// run when its Timeout is 0, as in E2B's SDKs. The sandbox kills the
	// process when it passes.
	DefaultCommandTimeout = 60 * time.Second
	// NoTimeout, as a Timeout, lets a command run as long as the sandbox.
	NoTimeout time.Duration = -1
)

// Commands runs processes in a sandbox: `/bin/bash -l -c CMD` as the
// sandbox's default user unless told otherwise, or, with [Commands.Exec],
// a program directly.
type Commands struct {
	envd *envdClient
}

// RunOptions configure a command.
type RunOptions struct {
	// Envs are added to the sandbox's environment for this command.
	Envs map[string]string
	// Cwd is the working directory; empty means the user's home.
	Cwd string
	// User runs the command as this user of the sandbox ("root", "user").
	User string
	// Timeout ends the command (the sandbox kills it) after this long; 0
	// means DefaultCommandTimeout and NoTimeout means none.
	Timeout time.Duration
	// Stdin keeps the command's standard input open for SendStdin;
	// otherwise it reads nothing.
	Stdin bool
	// Tag names the process in [Commands.List].
	Tag string

	// Stdout and Stderr receive the output as it arrives. A stream with a
	// writer is not kept in the result.
	Stdout, Stderr io.Writer
	// MaxOutput, if positive, caps the output kept in the result (and in
	// CommandHandle.Stdout and Stderr): the bytes of Stdout and Stderr
	// together; what goes to a writer or a callback is not counted. The
	// first output past it is not kept, the command is killed, and Run,
	// Exec and CommandHandle.Wait return an *Error of kind ErrOutputLimit
	// with the result so far. 0 means no cap: a command's output is kept
	// whole, however much the sandbox sends, so set one for commands
	// whose output is not yours to bound.
	MaxOutput int64
	// OnStdout and OnStderr are called with each chunk of output as it
	// arrives, in order, from one goroutine.
	OnStdout, OnStderr func(data string)
}

// CommandResult is how a command ended.
type CommandResult struct {
	// ExitCode is the exit status; -1 when a signal killed the command.
	ExitCode int `json:"exitCode"`
	// Stdout and Stderr hold the output not sent to a writer.
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Error explains an abnormal end (e.g. "signal: killed").
	Error string `json:"error,omitempty"`
}

// ShellStatus is the exit status a shell would report for the command:
// its exit code, or 128+N when signal N killed it (137 when the signal
// cannot be told).
func (r CommandResult) ShellStatus() int {
	if r.ExitCode >= 0 {
		return r.ExitCode
	}
	if name, ok := strings.CutPrefix(r.Error, "signal: "); ok {
		for sig := syscall.Signal(1); sig < 32; sig++ {
			if sig.String() == name {
				return 128 + int(sig)
			}
		}
	}
	return 128 + int(syscall.SIGKILL)
}

// ProcessInfo describes a process started through envd.
type ProcessInfo struct {
	PID  uint32            `json:"pid"`
	Tag  string            `json:"tag,omitempty"`
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
}

// Run runs cmd and waits for it. A non-zero exit status is returned as a
// *CommandExitError together with the result. When ctx ends first, the
// command is killed and the context's error returned.
func (c *Commands) Run(ctx context.Context, cmd string, opts *RunOptions) (*CommandResult, error) {
	h, err := c.start(ctx, shell(cmd), opts, false)
	return c.wait(ctx, h, err)
}

// Exec runs the program argv[0] with the arguments argv[1:] and waits for
// it, as [Commands.Run] does, but without a shell: envd starts the
// program itself, so no login shell reads the user's startup files
// (~/.bash_profile, ~/.profile, /etc/profile) and nothing in argv is
// expanded or split. argv[0] is a path, or a name looked up in the PATH
// of the command's environment (ErrInvalidArgument when there is no such
// program); an absolute path leaves nothing of the user's (functions,
// aliases, a PATH set in a profile) in the choice of program. The
// environment is the one Run gives a command (envd's PATH, HOME, USER,
// LOGNAME, the sandbox's variables, opts.Envs) without what a login shell
// would add; the other options work as for Run.
//
// Exec is Hutch's addition: E2B's SDKs always run `/bin/bash -l -c CMD`.
// The wire request is the same Process/Start with another cmd and args,
// so it works with any envd.
func (c *Commands) Exec(ctx context.Context, argv []string, opts *RunOptions) (*CommandResult, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, &Error{Op: "exec", Kind: ErrInvalidArgument, Message: "no program to run"}
	}
	h, err := c.start(ctx, program{cmd: argv[0], args: argv[1:], what: "exec " + quoteArgs(argv)}, opts, false)
	return c.wait(ctx, h, err)
}

// wait waits for a command Run or Exec started; when ctx ends first it
// kills it.
func (c *Commands) wait(ctx context.Context, h *CommandHandle, err error) (*CommandResult, error) {
	if err != nil {
		return nil, err
	}
	res, err := h.Wait(ctx)
	if ctx.Err() != nil && res == nil {
		killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		h.Kill(killCtx)
		cancel()
		h.Disconnect()
	}
	return res, err
}

// Start starts cmd in the background and returns once it runs. ctx bounds
// only the start: the handle follows the command until it ends, its
// Timeout passes or [CommandHandle.Disconnect] is called.
func (c *Commands) Start(ctx context.Context, cmd string, opts *RunOptions) (*CommandHandle, error) {
	return c.start(ctx, shell(cmd), opts, true)
}

// program is what a command runs: cmd with args; what names it in
// errors.
type program struct {
	cmd  string
	args []string
	what string
}

// shell is the program E2B's SDKs run for a command line.
func shell(cmd string) program {
	return program{cmd: "/bin/bash", args: []string{"-l", "-c", cmd}, what: "run " + strconv.Quote(cmd)}
}

// quoteArgs quotes each of argv as Go would and joins them with spaces.
func quoteArgs(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return strings.Join(q, " ")
}

func (c *Commands) start(ctx context.Context, prog program, opts *RunOptions, background bool) (*CommandHandle, error) {
	if opts == nil {
		opts = &RunOptions{}
	}
	cfg := &process.ProcessConfig{Cmd: prog.cmd, Args: prog.args, Envs: opts.Envs}
	if opts.Cwd != "" {
		cfg.Cwd = &opts.Cwd
	}
	stdin := opts.Stdin
	msg := &process.StartRequest{Process: cfg, Stdin: &stdin}
	if opts.Tag != "" {
		msg.Tag = &opts.Tag
	}
	if opts.MaxOutput < 0 {
		return nil, &Error{Op: prog.what, Kind: ErrInvalidArgument, Message: "negative MaxOutput"}
	}
	sinks := outputSinks{stdout: sink(opts.Stdout, opts.OnStdout), stderr: sink(opts.Stderr, opts.OnStderr), maxKept: opts.MaxOutput}
	sinks.keepStdout, sinks.keepStderr = opts.Stdout == nil, opts.Stderr == nil
	return startStream(ctx, c.envd, prog.what, opts.Timeout, background, true, sinks,
		func(sctx context.Context) (processStream, error) {
			s, err := c.envd.proc.Start(sctx, streamRequest(msg, opts.User))
			return startEvents{s}, err
		})
}

// ProcessConnectOptions configure [Commands.Connect].
type ProcessConnectOptions struct {
	// Timeout bounds how long the handle follows the process (it is not
	// killed when it passes); 0 means DefaultCommandTimeout.
	Timeout time.Duration
	// Stdout, Stderr, OnStdout and OnStderr receive output from now on,
	// as in [RunOptions].
	Stdout, Stderr     io.Writer
	OnStdout, OnStderr func(data string)
	// OnPty receives a terminal's output.
	OnPty func(data []byte)
}

// Connect follows a running process by pid: its output from now on and
// its end.
func (c *Commands) Connect(ctx context.Context, pid uint32, opts *ProcessConnectOptions) (*CommandHandle, error) {
	if opts == nil {
		opts = &ProcessConnectOptions{}
	}
	msg := &process.ConnectRequest{Process: selector(pid)}
	sinks := outputSinks{stdout: sink(opts.Stdout, opts.OnStdout), stderr: sink(opts.Stderr, opts.OnStderr), pty: opts.OnPty}
	sinks.keepStdout, sinks.keepStderr = opts.Stdout == nil, opts.Stderr == nil
	return startStream(ctx, c.envd, "connect to process "+strconv.Itoa(int(pid)), opts.Timeout, true, false, sinks,
		func(sctx context.Context) (processStream, error) {
			s, err := c.envd.proc.Connect(sctx, streamRequest(msg, ""))
			return connectEvents{s}, err
		})
}

// List returns the processes started through envd that still run.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	res, err := unary(ctx, c.envd, "list processes", c.envd.proc.List, &process.ListRequest{}, "")
	if err != nil {
		return nil, err
	}
	out := make([]ProcessInfo, 0, len(res.GetProcesses()))
	for _, p := range res.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{PID: p.GetPid(), Tag: p.GetTag(), Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Envs: cfg.GetEnvs(), Cwd: cfg.GetCwd()})
	}
	return out, nil
}

// Kill kills process pid with SIGKILL; ErrNotFound if it is not running.
func (c *Commands) Kill(ctx context.Context, pid uint32) error {
	return c.envd.signal(ctx, pid, process.Signal_SIGNAL_SIGKILL)
}

// Terminate sends SIGTERM to process pid.
func (c *Commands) Terminate(ctx context.Context, pid uint32) error {
	return c.envd.signal(ctx, pid, process.Signal_SIGNAL_SIGTERM)
}

// SendStdin writes data to the standard input of process pid, which must
// have been started with RunOptions.Stdin.
func (c *Commands) SendStdin(ctx context.Context, pid uint32, data []byte) error {
	_, err := unary(ctx, c.envd, "send stdin", c.envd.proc.SendInput, &process.SendInputRequest{
		Process: selector(pid), Input: &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}},
	}, "")
	return err
}

// CloseStdin closes the standard input of process pid (the command reads
// end of file).
func (c *Commands) CloseStdin(ctx context.Context, pid uint32) error {
	_, err := unary(ctx, c.envd, "close stdin", c.envd.proc.CloseStdin, &process.CloseStdinRequest{Process: selector(pid)}, "")
	return err
}

func selector(pid uint32) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
}

func (e *envdClient) signal(ctx context.Context, pid uint32, sig process.Signal) error {
	_, err := unary(ctx, e, "signal process "+strconv.Itoa(int(pid)), e.proc.SendSignal, &process.SendSignalRequest{Process: selector(pid), Signal: sig}, "")
	return err
}

// CommandHandle follows a background command or a terminal.
type CommandHandle struct {
	// PID is the process id inside the sandbox.
	PID uint32

	envd   *envdClient
	op     string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
	result *CommandResult
	err    error
	// maxKept caps the bytes kept in stdout and stderr together (0:
	// none); over is set once output went past it.
	maxKept int64
	over    bool
}

// outputLimitGrace is how long a command killed for its output has to
// end before the handle stops following it: a sandbox that keeps the
// stream going gets nothing more read.
const outputLimitGrace = 5 * time.Second

// Wait blocks until the command ends and returns its result; a non-zero
// exit status comes with a *CommandExitError. If ctx ends first, Wait
// returns its error and the command keeps running.
func (h *CommandHandle) Wait(ctx context.Context) (*CommandResult, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, &Error{Op: "wait for process " + strconv.Itoa(int(h.PID)), Err: ctx.Err(), Kind: ctxKind(ctx.Err())}
	}
	if h.over {
		res := CommandResult{ExitCode: -1, Stdout: h.stdout.String(), Stderr: h.stderr.String(), Error: "killed: output past MaxOutput"}
		if h.result != nil {
			res = *h.result
		}
		return &res, &Error{Op: h.op, Kind: ErrOutputLimit,
			Message: "the output passed MaxOutput (" + strconv.FormatInt(h.maxKept, 10) + " bytes): the command was killed"}
	}
	if h.err != nil {
		return nil, h.err
	}
	res := *h.result
	if res.ExitCode != 0 {
		return &res, &CommandExitError{CommandResult: res}
	}
	return &res, nil
}

func ctxKind(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return nil
}

// Done is closed when the command has ended or the handle stopped
// following it.
func (h *CommandHandle) Done() <-chan struct{} { return h.done }

// Stdout returns the standard output received so far (not sent to a
// writer).
func (h *CommandHandle) Stdout() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stdout.String()
}

// Stderr returns the standard error received so far (not sent to a
// writer).
func (h *CommandHandle) Stderr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// Kill kills the command (SIGKILL).
func (h *CommandHandle) Kill(ctx context.Context) error {
	return h.envd.signal(ctx, h.PID, process.Signal_SIGNAL_SIGKILL)
}

// Terminate sends the command SIGTERM, which it may handle.
func (h *CommandHandle) Terminate(ctx context.Context) error {
	return h.envd.signal(ctx, h.PID, process.Signal_SIGNAL_SIGTERM)
}

// SendStdin writes data to the command's standard input.
func (h *CommandHandle) SendStdin(ctx context.Context, data []byte) error {
	return (&Commands{envd: h.envd}).SendStdin(ctx, h.PID, data)
}

// CloseStdin closes the command's standard input.
func (h *CommandHandle) CloseStdin(ctx context.Context) error {
	return (&Commands{envd: h.envd}).CloseStdin(ctx, h.PID)
}

// Disconnect stops following the command, which keeps running; Wait then
// returns an error unless the command had already ended.
func (h *CommandHandle) Disconnect() { h.cancel() }

// outputSinks say where a stream's output goes.
type outputSinks struct {
	stdout, stderr         func([]byte)
	pty                    func([]byte)
	keepStdout, keepStderr bool
	// maxKept caps what is kept of stdout and stderr together (see
	// RunOptions.MaxOutput); 0: no cap.
	maxKept int64
}

func sink(w io.Writer, f func(string)) func([]byte) {
	switch {
	case w != nil && f != nil:
		return func(b []byte) { w.Write(b); f(string(b)) }
	case w != nil:
		return func(b []byte) { w.Write(b) }
	case f != nil:
		return func(b []byte) { f(string(b)) }
	}
	return nil
}

// processStream is a Start or Connect stream.
type processStream interface {
	Receive() bool
	Err() error
	Close() error
	event() *process.ProcessEvent
}

type startEvents struct {
	*connect.ServerStreamForClient[process.StartResponse]
}

func (s startEvents) event() *process.ProcessEvent { return s.Msg().GetEvent() }

type connectEvents struct {
	*connect.ServerStreamForClient[process.ConnectResponse]
}

func (s connectEvents) event() *process.ProcessEvent { return s.Msg().GetEvent() }

// startStream opens a process stream, waits for its start event, and
// follows it in a goroutine. The stream's context is bounded by timeout
// and, unless background, by ctx's deadline too, so that the sandbox
// enforces the deadline even if this client goes away. It is never
// cancelled by ctx itself: a stream cut while the process starts would
// leave the process running with nobody knowing its pid. Instead, when
// ctx ends before the start event, startStream returns at once and a
// goroutine waits for the event and kills a process that starts anyway
// (starts: only for Start streams, not for Connect to an existing one).
func startStream(ctx context.Context, e *envdClient, op string, timeout time.Duration, background, starts bool, sinks outputSinks,
	open func(context.Context) (processStream, error)) (*CommandHandle, error) {
	if err := ctx.Err(); err != nil {
		return nil, streamStartError(ctx, op, err)
	}
	var deadline time.Time
	switch {
	case timeout == 0:
		deadline = time.Now().Add(DefaultCommandTimeout)
	case timeout > 0:
		deadline = time.Now().Add(timeout)
	}
	if d, ok := ctx.Deadline(); ok && !background && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	var sctx context.Context
	var cancel context.CancelFunc
	if deadline.IsZero() {
		sctx, cancel = context.WithCancel(context.WithoutCancel(ctx))
	} else {
		sctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), deadline)
	}

	type opened struct {
		stream processStream
		start  *process.ProcessEvent_StartEvent
		err    error
	}
	ch := make(chan opened, 1)
	go func() {
		stream, err := open(sctx)
		if err != nil {
			ch <- opened{err: err}
			return
		}
		if !stream.Receive() {
			err := stream.Err()
			stream.Close()
			if err == nil {
				err = &Error{Op: op, Message: "the stream ended before the process started"}
			}
			ch <- opened{err: err}
			return
		}
		start := stream.event().GetStart()
		if start == nil {
			stream.Close()
			ch <- opened{err: &Error{Op: op, Message: "protocol error: the first event is not a start event"}}
			return
		}
		ch <- opened{stream: stream, start: start}
	}()

	var o opened
	select {
	case o = <-ch:
	case <-ctx.Done():
		go func() {
			defer cancel()
			o := <-ch
			if o.stream == nil {
				return
			}
			o.stream.Close()
			if starts {
				kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				e.signal(kctx, o.start.GetPid(), process.Signal_SIGNAL_SIGKILL)
				kcancel()
			}
		}()
		return nil, streamStartError(ctx, op, ctx.Err())
	}
	if o.err != nil {
		cancel()
		return nil, streamStartError(ctx, op, o.err)
	}
	h := &CommandHandle{PID: o.start.GetPid(), envd: e, op: op, cancel: cancel, done: make(chan struct{}), maxKept: sinks.maxKept}
	go follow(sctx, h, op, o.stream, sinks)
	return h, nil
}

// streamStartError reports a failure to start a stream; a 502 there means
// the sandbox is gone (spec §2.8).
func streamStartError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return &Error{Op: op, Err: ctx.Err(), Kind: ctxKind(ctx.Err())}
	}
	return rpcError(op, err)
}

// follow reads a process stream to its end.
func follow(sctx context.Context, h *CommandHandle, op string, stream processStream, sinks outputSinks) {
	defer close(h.done)
	defer h.cancel()
	defer stream.Close()
	for stream.Receive() {
		ev := stream.event()
		switch {
		case ev.GetData() != nil:
			d := ev.GetData()
			switch {
			case d.GetStdout() != nil:
				h.output(sctx, d.GetStdout(), &h.stdout, sinks.stdout, sinks.keepStdout)
			case d.GetStderr() != nil:
				h.output(sctx, d.GetStderr(), &h.stderr, sinks.stderr, sinks.keepStderr)
			case d.GetPty() != nil && sinks.pty != nil:
				sinks.pty(d.GetPty())
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			h.mu.Lock()
			h.result = &CommandResult{ExitCode: int(end.GetExitCode()), Stdout: h.stdout.String(), Stderr: h.stderr.String(), Error: end.GetError()}
			if !end.GetExited() && h.result.ExitCode == 0 {
				h.result.ExitCode = -1
			}
			if h.result.Error == "" && !end.GetExited() {
				h.result.Error = end.GetStatus()
			}
			h.mu.Unlock()
			return
		}
	}
	err := stream.Err()
	if err == nil {
		err = &Error{Op: op, Message: "the stream ended without the process's end"}
	}
	h.mu.Lock()
	h.err = rpcError(op, err)
	if errors.Is(sctx.Err(), context.DeadlineExceeded) {
		h.err = &Error{Op: op, Kind: ErrTimeout, Err: context.DeadlineExceeded,
			Message: "deadline passed (the Timeout option, default " + DefaultCommandTimeout.String() + ", or the context's)"}
	}
	h.mu.Unlock()
}

// output keeps b in keep, up to the handle's cap, and passes it to to.
// The first output past the cap kills the command.
func (h *CommandHandle) output(sctx context.Context, b []byte, keep *strings.Builder, to func([]byte), keepIt bool) {
	if keepIt {
		h.mu.Lock()
		kept := b
		first := false
		if h.maxKept > 0 {
			left := max(0, h.maxKept-int64(h.stdout.Len()+h.stderr.Len()))
			if int64(len(b)) > left {
				kept, first = b[:left], !h.over
				h.over = true
			}
		}
		keep.Write(kept)
		h.mu.Unlock()
		if first {
			go h.killForOutput(sctx)
		}
	}
	if to != nil {
		to(b)
	}
}

// killForOutput kills a command whose output passed the cap, and stops
// following it if it has not ended within outputLimitGrace.
func (h *CommandHandle) killForOutput(sctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(sctx), outputLimitGrace)
	defer cancel()
	h.envd.signal(ctx, h.PID, process.Signal_SIGNAL_SIGKILL)
	select {
	case <-h.done:
	case <-ctx.Done():
		h.cancel()
	}
}
