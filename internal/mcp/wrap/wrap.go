// Package wrap runs a stdio MCP server in a fresh sandbox and makes it a
// local stdio MCP server: `hutch mcp wrap -- CMD [ARGS...]`.
//
// What mcp-use's SandboxConnector does with supergateway, a port and a
// public URL (one shared child, no authentication), wrap does over the
// sandbox daemon's process stream, which the control plane already
// authenticates with the API key: it creates the sandbox, uploads files,
// starts CMD with its standard input kept open, and relays bytes both
// ways: the client's standard input to the server's (SendStdin, in order,
// as they come), the server's standard output to the client's, and the
// server's standard error to the client's standard error. No port is
// opened in the sandbox and nothing is published.
//
// The sandbox lives as long as the client: wrap renews its lifetime while
// the client is connected and kills it when the session ends, whichever
// way it ends (the client closes its end, a signal, the server exits, the
// sandbox is lost), unless Keep is set.
package wrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/hutch-sandbox/hutch/internal/cli/shell"
	"github.com/hutch-sandbox/hutch/sdk"
)

// Metadata of the sandboxes wrap creates: MetadataKey=MetadataValue, so
// that `hutch sandbox ls --metadata hutch.mcp=wrap` lists them, and the
// command line (cut to MaxCommandMetadata bytes) under CommandKey.
const (
	MetadataKey        = "hutch.mcp"
	MetadataValue      = "wrap"
	CommandKey         = "hutch.mcp.command"
	MaxCommandMetadata = 256
)

// Defaults.
const (
	// DefaultTimeout is the sandbox's lifetime, renewed while the client
	// is connected.
	DefaultTimeout = time.Hour
	// DefaultGrace is how long the server may take to exit once its
	// standard input is closed.
	DefaultGrace = 5 * time.Second
	// ProcessTag tags the server's process in the sandbox's process list.
	ProcessTag = "hutch-mcp-wrap"
)

// ExitFailure is the exit status when Hutch could not run the server or
// lost it (as `hutch exec`'s 125).
const ExitFailure = 125

// Prefix starts every line wrap itself writes on standard error.
const Prefix = "hutch mcp wrap: "

// Options configure [Run].
type Options struct {
	// Client reaches the hutch serve that makes the sandbox.
	Client *sdk.Client
	// Command is the server's command line: one word is a shell command
	// line, run as is by bash; several are quoted so that bash sees
	// exactly them (see CommandLine).
	Command []string
	// Template names the sandbox's template; empty means "base".
	Template string
	// Envs are set in the server's environment.
	Envs map[string]string
	// Files are uploaded before the server starts.
	Files []File
	// NoInternet gives the sandbox no route out.
	NoInternet bool
	// Timeout is the sandbox's lifetime (DefaultTimeout when 0), renewed
	// every RenewEvery (Timeout/3 when 0) while the session lasts.
	Timeout    time.Duration
	RenewEvery time.Duration
	// Keep leaves the sandbox running (until its timeout) when the
	// session ends; the server is stopped all the same.
	Keep bool
	// Cwd and User are the server's working directory and sandbox user
	// (defaults: the user's home, the template's user); uploads belong to
	// User.
	Cwd, User string
	// Grace is how long the server may take to exit after its standard
	// input closes; DefaultGrace when 0.
	Grace time.Duration
	// Stdin, Stdout and Stderr are the client's side: JSON-RPC in, JSON-RPC
	// out, and the server's standard error plus wrap's own messages.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Explain, if set, rewrites errors of the control plane into advice
	// (an unreachable server, a refused key).
	Explain func(error) error
}

// Signaled is the cause to cancel Run's context with when a signal ends
// the session; Run then exits 128+Signal.
type Signaled struct{ Signal syscall.Signal }

func (s Signaled) Error() string { return "got " + SignalName(s.Signal) }

// SignalName is sig as SIGTERM, SIGINT, SIGHUP…, or its description.
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGKILL:
		return "SIGKILL"
	}
	return sig.String()
}

// CommandLine is the command line bash runs for argv: a single word as
// it is (so it may be a shell command line), several words quoted.
func CommandLine(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	return shell.Join(argv)
}

// truncate cuts s to at most n bytes on a character boundary, marking the
// cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// Run runs the session and returns the exit status to exit with: the
// server's own when it exited (0 when it did so after its input ended, or
// was stopped because it did not within Grace), 128+N when signal N ended
// the session (see Signaled), ExitFailure when the sandbox could not be
// made or was lost. Everything Run says goes to Stderr, prefixed with
// Prefix; nothing but the server's output goes to Stdout.
func Run(ctx context.Context, o Options) int {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RenewEvery <= 0 {
		o.RenewEvery = max(o.Timeout/3, time.Second)
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Template == "" {
		o.Template = "base"
	}
	if o.Explain == nil {
		o.Explain = func(err error) error { return err }
	}
	if o.Stdin == nil {
		o.Stdin = strings.NewReader("")
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	s := &session{o: o, errw: newStderr(o.Stderr)}
	return s.run(ctx)
}

// session is one run of Run.
type session struct {
	o    Options
	errw *stderrWriter
}

func (s *session) say(format string, args ...any) { s.errw.say(format, args...) }

// failed reports a failure before the relay began: a signal's status when
// one interrupted it, else ExitFailure.
func (s *session) failed(ctx context.Context, what string, err error) int {
	var sig Signaled
	if errors.As(context.Cause(ctx), &sig) {
		s.say("%v while starting the server", sig)
		return 128 + int(sig.Signal)
	}
	s.say("%s: %s", what, oneLine(s.o.Explain(err).Error()))
	return ExitFailure
}

func (s *session) run(ctx context.Context) int {
	o := s.o
	if len(o.Command) == 0 {
		s.say("no command to run")
		return ExitFailure
	}
	if o.Client == nil {
		s.say("no client")
		return ExitFailure
	}
	cmdline := CommandLine(o.Command)
	uploads, err := checkFiles(o.Files)
	if err != nil {
		s.say("%v", err)
		return ExitFailure
	}
	create := sdk.CreateOptions{
		Template: o.Template, Timeout: o.Timeout,
		Metadata: map[string]string{MetadataKey: MetadataValue, CommandKey: truncate(cmdline, MaxCommandMetadata)},
	}
	if o.NoInternet {
		create.AllowInternetAccess = new(false)
	}
	sbx, err := o.Client.Create(ctx, create)
	if err != nil {
		return s.failed(ctx, "cannot create a sandbox from template "+o.Template, err)
	}
	var (
		proc *sdk.CommandHandle
		end  = result{why: "the server did not start"}
	)
	defer func() { s.finish(sbx, proc, end) }()

	if err := s.upload(ctx, sbx, uploads); err != nil {
		end.code = s.failed(ctx, "sandbox "+sbx.ID, err)
		return end.code
	}
	out := newClientWriter(o.Stdout)
	proc, err = sbx.Commands.Start(ctx, cmdline, &sdk.RunOptions{
		Envs: o.Envs, Cwd: o.Cwd, User: o.User, Timeout: sdk.NoTimeout, Stdin: true, Tag: ProcessTag,
		Stdout: out, Stderr: s.errw,
	})
	if err != nil {
		end.code = s.failed(ctx, "cannot start "+cmdline+" in sandbox "+sbx.ID, err)
		return end.code
	}

	lost := make(chan error, 1)
	stopRenewing := s.renew(sbx, lost)
	r := &relay{proc: proc, in: o.Stdin, out: out, grace: o.Grace, explainLoss: func(err error) (string, bool) { return s.explainLoss(sbx, err) }}
	end = r.run(ctx, lost)
	stopRenewing()
	return end.code
}

// finish ends the session: it stops the server and kills the sandbox (or
// keeps it), saying why the session ended when it was not the client's
// doing.
func (s *session) finish(sbx *sdk.Sandbox, proc *sdk.CommandHandle, end result) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	what := "killing sandbox " + sbx.ID
	if s.o.Keep {
		what = fmt.Sprintf("keeping sandbox %s until its timeout (end it with: hutch sandbox kill %s)", sbx.ID, sbx.ID)
	}
	switch {
	case end.gone:
		s.say("%s", end.why)
		return
	case end.why != "":
		s.say("%s: %s", end.why, what)
	case s.o.Keep:
		s.say("%s", what)
	}
	if s.o.Keep {
		if proc != nil {
			select {
			case <-proc.Done():
			default:
				if err := proc.Kill(ctx); err != nil && !errors.Is(err, sdk.ErrNotFound) {
					s.say("could not stop the server in sandbox %s: %v", sbx.ID, err)
				}
			}
		}
		return
	}
	if err := sbx.Kill(ctx); err != nil && !errors.Is(err, sdk.ErrNotFound) {
		s.say("could not kill sandbox %s: %s", sbx.ID, oneLine(s.o.Explain(err).Error()))
	}
}

// renew extends the sandbox's life to Timeout every RenewEvery until the
// returned function is called; it sends on lost when the sandbox is gone.
func (s *session) renew(sbx *sdk.Sandbox, lost chan<- error) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(s.o.RenewEvery)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(s.o.RenewEvery, 10*time.Second))
			err := sbx.SetTimeout(ctx, s.o.Timeout)
			cancel()
			switch {
			case errors.Is(err, sdk.ErrNotFound):
				select {
				case lost <- err:
				default:
				}
				return
			case err != nil && !failing:
				failing = true
				s.say("could not extend the life of sandbox %s (trying again in %v): %s", sbx.ID, s.o.RenewEvery, oneLine(s.o.Explain(err).Error()))
			case err == nil && failing:
				failing = false
				s.say("extended the life of sandbox %s again", sbx.ID)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// explainLoss says why the server's stream failed, asking whether the
// sandbox still exists.
func (s *session) explainLoss(sbx *sdk.Sandbox, err error) (why string, gone bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, ierr := s.o.Client.GetInfo(ctx, sbx.ID); errors.Is(ierr, sdk.ErrNotFound) || errors.Is(err, sdk.ErrNotFound) {
		return fmt.Sprintf("lost the server: sandbox %s is gone (killed, or its timeout passed)", sbx.ID), true
	}
	return fmt.Sprintf("lost the server in sandbox %s: %s", sbx.ID, oneLine(s.o.Explain(err).Error())), false
}

// oneLine joins the lines of s with "; ".
func oneLine(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}
