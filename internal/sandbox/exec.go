package sandbox

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// DefaultReadyTimeout bounds how long a create waits for a template's
// ready command to pass.
const DefaultReadyTimeout = 2 * time.Minute

// ExecRequest is a command the host runs in a sandbox through its envd.
type ExecRequest struct {
	// Shell is run with /bin/sh -c; Argv, when set, is run as it is
	// instead (no shell).
	Shell string
	Argv  []string
	User  string            // empty: envd's default user
	Env   map[string]string // added to the sandbox's environment
	Cwd   string            // empty: the user's home
	// Output receives stdout and stderr as they come; nil discards them.
	Output func(stderr bool, data []byte)
	// Background returns as soon as the process started, leaving it
	// running; its exit code is then not known.
	Background bool
	// token is envd's access token when the route does not have it yet
	// (a sandbox not adopted yet).
	token string
}

// maxEntrypoint bounds an entrypoint: its arguments and their bytes.
const (
	maxEntrypointArgs  = 256
	maxEntrypointBytes = 64 << 10
)

// CheckEntrypoint refuses an entrypoint no sandbox can start: an empty
// program name, or more than 256 arguments or 64 KiB.
func CheckEntrypoint(argv []string) error {
	if len(argv) == 0 {
		return nil
	}
	n := 0
	for _, a := range argv {
		n += len(a)
	}
	switch {
	case argv[0] == "":
		return fmt.Errorf("entrypoint: the program name is empty: %w", errdefs.ErrInvalidArgument)
	case len(argv) > maxEntrypointArgs || n > maxEntrypointBytes:
		return fmt.Errorf("entrypoint: at most %d arguments and %d bytes: %w", maxEntrypointArgs, maxEntrypointBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

// startEntrypoint starts argv in the background in the sandbox behind rt,
// whose envd has token token: its main process. Nothing for an empty
// argv. A program that cannot start is an errdefs.ErrInvalidArgument.
func startEntrypoint(ctx context.Context, rt *route, token string, argv []string) error {
	if len(argv) == 0 {
		return nil
	}
	if _, err := execIn(ctx, rt, ExecRequest{Argv: argv, Background: true, token: token}); err != nil {
		return fmt.Errorf("entrypoint %q did not start: %w: %w", argv, err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// envdProcess is a client of a sandbox's process service on rt's control
// socket, where the host's own calls go.
func envdProcess(rt *route) processconnect.ProcessClient {
	return processconnect.NewProcessClient(&http.Client{Transport: rt.host}, "http://envd")
}

// execIn runs req in the sandbox behind rt and returns its exit code.
func execIn(ctx context.Context, rt *route, req ExecRequest) (int, error) {
	cfg := &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", req.Shell}, Envs: req.Env}
	if len(req.Argv) > 0 {
		cfg.Cmd, cfg.Args = req.Argv[0], req.Argv[1:]
		req.Shell = strings.Join(req.Argv, " ") // for the errors below
	}
	if req.Cwd != "" {
		cfg.Cwd = &req.Cwd
	}
	no := false
	msg := connect.NewRequest(&process.StartRequest{Process: cfg, Stdin: &no})
	if req.User != "" {
		msg.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(req.User+":")))
	}
	if tok := cmp.Or(req.token, rt.accessToken()); tok != "" {
		msg.Header().Set(envdapi.HeaderAccessToken, tok)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := envdProcess(rt).Start(sctx, msg)
	if err != nil {
		return -1, fmt.Errorf("start %q: %w", req.Shell, err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			if req.Background {
				return 0, nil
			}
		case ev.GetData() != nil:
			if req.Output != nil {
				if b := ev.GetData().GetStdout(); len(b) > 0 {
					req.Output(false, b)
				}
				if b := ev.GetData().GetStderr(); len(b) > 0 {
					req.Output(true, b)
				}
			}
		case ev.GetEnd() != nil:
			end := ev.GetEnd()
			if end.Error != nil && *end.Error != "" && !end.Exited {
				return -1, fmt.Errorf("%q: %s", req.Shell, *end.Error)
			}
			return int(end.ExitCode), nil
		}
	}
	if err := stream.Err(); err != nil {
		return -1, fmt.Errorf("run %q: %w", req.Shell, err)
	}
	return -1, fmt.Errorf("run %q: the stream ended before the process did", req.Shell)
}

// Exec runs req in internal sandbox id (CreateRequest.Internal) and
// returns its exit code: what the template builder runs its steps with.
func (m *Manager) Exec(ctx context.Context, id string, req ExecRequest) (int, error) {
	l, err := m.internalLive(id)
	if err != nil {
		return -1, err
	}
	return execIn(ctx, l.route, req)
}

// Discard kills internal sandbox id and forgets it.
func (m *Manager) Discard(ctx context.Context, id string) error {
	if _, err := m.internalLive(id); err != nil {
		return err
	}
	return m.remove(ctx, id)
}

// internalLive returns running internal sandbox id.
func (m *Manager) internalLive(id string) (*live, error) {
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil || !l.internal || l.sbx == nil {
		return nil, fmt.Errorf("internal sandbox %s is not running: %w", id, errdefs.ErrNotFound)
	}
	return l, nil
}

// ReadyError is Create's error when a template's ready command did not
// pass in time.
type ReadyError struct {
	Template string
	ReadyCmd string
	Waited   time.Duration
	// Output is the end of what the start command and the last ready
	// check printed.
	Output string
	// Err is why it stopped (a timeout, the sandbox ended).
	Err error
}

func (e *ReadyError) Error() string {
	msg := fmt.Sprintf("template %s: its ready command %q did not succeed within %s", e.Template, e.ReadyCmd, e.Waited.Round(time.Millisecond))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Output != "" {
		msg += "; last output: " + e.Output
	}
	return msg
}

// Is makes a ReadyError match errdefs.ErrFailedPrecondition.
func (e *ReadyError) Is(target error) bool { return target == errdefs.ErrFailedPrecondition }

// startCommand starts tpl's start command in the sandbox behind rt (in the
// background, as the template's user, in its workdir, with its env) and
// runs its ready command every readyInterval until it exits 0, for up to
// m.readyTimeout. A template without a start command is ready at once.
func (m *Manager) startCommand(ctx context.Context, rt *route, tpl *template.Template) error {
	if tpl.StartCmd == "" && tpl.ReadyCmd == "" {
		return nil
	}
	if err := envdapi.NewClient(rt.host).Health(ctx); err != nil {
		return fmt.Errorf("envd did not start: %w", err)
	}
	env := envMap(tpl.Env)
	var tail tailBuffer
	if tpl.StartCmd != "" {
		// Its output goes to the sandbox's log through envd, as every
		// process's does; the tail is kept for the error.
		_, err := execIn(ctx, rt, ExecRequest{Shell: tpl.StartCmd, User: tpl.DefaultUser, Env: env, Cwd: tpl.DefaultWorkdir, Background: true})
		if err != nil {
			return fmt.Errorf("template %s: start command: %w", tpl.Name, err)
		}
	}
	if tpl.ReadyCmd == "" {
		return nil
	}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, m.readyTimeout)
	defer cancel()
	const readyInterval = 50 * time.Millisecond
	for {
		tail.Reset()
		code, err := execIn(rctx, rt, ExecRequest{Shell: tpl.ReadyCmd, User: tpl.DefaultUser, Env: env, Cwd: tpl.DefaultWorkdir,
			Output: func(_ bool, b []byte) { tail.Write(b) }})
		if err == nil && code == 0 {
			return nil
		}
		if rctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &ReadyError{Template: tpl.Name, ReadyCmd: tpl.ReadyCmd, Waited: time.Since(start), Output: tail.String(), Err: context.DeadlineExceeded}
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			// envd itself failed: the sandbox is going away.
			return &ReadyError{Template: tpl.Name, ReadyCmd: tpl.ReadyCmd, Waited: time.Since(start), Output: tail.String(), Err: err}
		}
		select {
		case <-rctx.Done():
		case <-time.After(readyInterval):
		}
	}
}

// envMap turns KEY=VALUE entries into a map; later entries win.
func envMap(env []string) map[string]string {
	if len(env) == 0 {
		return nil
	}
	m := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if k != "" {
			m[k] = v
		}
	}
	return m
}

// tailBuffer keeps the last 512 bytes written to it.
type tailBuffer struct{ b []byte }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 512 {
		t.b = t.b[len(t.b)-512:]
	}
	return len(p), nil
}
func (t *tailBuffer) Reset()         { t.b = t.b[:0] }
func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.b)) }

// TemplateUsers lists the running sandboxes of this manager made from
// template build id (the template store's Remove asks before removing).
func (m *Manager) TemplateUsers(id string) []string {
	sts, err := m.rt.List(context.Background())
	if err != nil {
		return []string{"(unknown: " + err.Error() + ")"}
	}
	var out []string
	for _, st := range sts {
		if st.TemplateID == id && st.State != runtime.StateExited {
			out = append(out, st.ID)
		}
	}
	return out
}
