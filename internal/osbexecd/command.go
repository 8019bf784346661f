package osbexecd

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	procpb "github.com/hutch-sandbox/hutch/api/gen/process"
)

// runCommandRequest is execd's RunCommandRequest.
type runCommandRequest struct {
	Command    *string           `json:"command"`
	Argv       []string          `json:"argv"`
	Cwd        string            `json:"cwd"`
	Background bool              `json:"background"`
	Timeout    int64             `json:"timeout"` // milliseconds; 0: none
	UID        *int64            `json:"uid"`
	GID        *int64            `json:"gid"`
	Envs       map[string]string `json:"envs"`
}

// maxTimeout bounds a command's timeout so that it fits a time.Duration.
const maxTimeout = 100 * 365 * 24 * time.Hour

// validate checks req and returns envd's process config for it and the
// command's text for its status.
func (req *runCommandRequest) validate() (*procpb.ProcessConfig, string, error) {
	cfg := &procpb.ProcessConfig{Envs: req.Envs}
	var content string
	switch {
	case req.Command != nil && req.Argv != nil:
		return nil, "", badRequest("invalid request, validation error: give either command or argv, not both")
	case req.Command != nil:
		if strings.TrimSpace(*req.Command) == "" {
			return nil, "", badRequest("invalid request, validation error: command is empty")
		}
		if strings.ContainsRune(*req.Command, 0) {
			return nil, "", badRequest("invalid request, validation error: command contains a NUL byte")
		}
		// envd runs /bin/sh instead where the image has no bash, as
		// execd falls back to sh.
		cfg.Cmd, cfg.Args, content = "/bin/bash", []string{"-c", *req.Command}, *req.Command
	case len(req.Argv) > 0:
		for i, a := range req.Argv {
			if strings.ContainsRune(a, 0) {
				return nil, "", badRequest("invalid request, validation error: argv[%d] contains a NUL byte", i)
			}
		}
		if req.Argv[0] == "" {
			return nil, "", badRequest("invalid request, validation error: argv[0] is empty")
		}
		cfg.Cmd, cfg.Args, content = req.Argv[0], req.Argv[1:], shellJoin(req.Argv)
	default:
		return nil, "", badRequest("invalid request, validation error: command or argv is required")
	}
	if req.Timeout < 0 || req.Timeout > int64(maxTimeout/time.Millisecond) {
		return nil, "", badRequest("invalid request, validation error: timeout must be between 0 and %d milliseconds", int64(maxTimeout/time.Millisecond))
	}
	if req.Cwd != "" {
		if err := checkPath(req.Cwd); err != nil {
			return nil, "", err
		}
		cfg.Cwd = &req.Cwd
	}
	for k, v := range req.Envs {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, "", badRequest("invalid request, validation error: environment variable name %q is not valid", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, "", badRequest("invalid request, validation error: environment variable %s contains a NUL byte", k)
		}
	}
	return cfg, content, nil
}

// userFor returns the sandbox user a command with uid and gid runs as
// ("" for the default). envd runs a process as a user of the sandbox's
// /etc/passwd with that user's own groups, so a gid other than the user's
// primary group cannot be honoured and is refused rather than ignored.
func (h *Handler) userFor(ctx context.Context, c *call, uid, gid *int64) (string, error) {
	if uid == nil {
		if gid != nil {
			return "", badRequest("invalid request, validation error: gid requires uid")
		}
		return "", nil
	}
	if *uid < 0 || *uid > 4294967294 {
		return "", badRequest("invalid request, validation error: uid %d is out of range", *uid)
	}
	u, err := h.client(c, "root").lookupUID(ctx, uint32(*uid))
	if err != nil {
		return "", err
	}
	if gid != nil && *gid != int64(u.gid) {
		return "", badRequest("gid %d is not supported: commands run with their user's own groups, and %s's primary group is %d", *gid, u.name, u.gid)
	}
	return u.name, nil
}

// runCommand is POST /command: an event stream of init (with the
// command's id), stdout and stderr, then execution_complete for exit 0 or
// error (evalue the exit code). A background command's stream ends after
// init and execution_complete; the command keeps running, its output kept
// in the sandbox for GET /command/{id}/logs (bglog.go).
func (h *Handler) runCommand(w http.ResponseWriter, r *http.Request, c *call) {
	var req runCommandRequest
	if err := h.decodeJSON(w, r, &req, false); err != nil {
		fail(w, err)
		return
	}
	cfg, content, err := req.validate()
	if err != nil {
		fail(w, err)
		return
	}
	user, err := h.userFor(r.Context(), c, req.UID, req.GID)
	if err != nil {
		fail(w, err)
		return
	}
	cmd := &command{id: newID(), content: content, background: req.Background, startedAt: time.Now(), done: make(chan struct{})}
	cmd.tag = "osb-command-" + cmd.id
	timeout := time.Duration(req.Timeout) * time.Millisecond
	if req.Background {
		h.runBackground(w, r, c, cmd, cfg, user, timeout)
		return
	}
	if err := h.register(c, cmd); err != nil {
		fail(w, err)
		return
	}
	p, err := startProcess(c.st.ctx, h.client(c, user), cfg, cmd.tag, timeout)
	if err != nil {
		c.st.unregister(cmd)
		fail(w, err)
		return
	}
	stopTimer := p.watchTimeout(c.st.ctx, timeout)
	ep := newEventPipe()
	go func() {
		defer stopTimer()
		p.follow(func(ev procEvent) {
			switch {
			case ev.end != nil:
				code, msg := p.exitOf(ev.end)
				c.st.finish(cmd, &code, msg)
			case ev.err != nil:
				c.st.finish(cmd, nil, ev.err.Error())
				h.log.Info("lost a command's stream", "sandbox", c.id, "command", cmd.id, "err", ev.err)
			}
			ep.deliver(ev)
		})
	}()

	s := startSSE(w)
	if err := s.send(streamEvent{Type: eventInit, Text: cmd.id}); err != nil {
		ep.leave()
		_ = p.kill(c.st.ctx, procpb.Signal_SIGNAL_SIGKILL)
		return
	}
	streamForeground(r, s, p, ep, c.st.ctx)
}

// register adds cmd to c's sandbox, removing from the sandbox the output
// of the commands it puts over the bounds.
func (h *Handler) register(c *call, cmd *command) error {
	drop, err := c.st.register(cmd, h.opts.MaxCommands, h.keptLogs())
	if len(drop) > 0 {
		ctx, cancel := context.WithTimeout(c.st.ctx, 30*time.Second)
		h.removeLogs(ctx, c, drop)
		cancel()
	}
	return err
}

// runBackground starts cmd, whose process is cfg run as user, in the
// background: its output goes to a keeper in the sandbox, and the host
// follows only its end.
func (h *Handler) runBackground(w http.ResponseWriter, r *http.Request, c *call, cmd *command, cfg *procpb.ProcessConfig, user string, timeout time.Duration) {
	cmd.log = &commandLog{dir: logRoot + "/" + cmd.id, segment: max(int64(h.opts.MaxCommandLog)/2, 1), end: -1}
	if err := h.register(c, cmd); err != nil {
		fail(w, err)
		return
	}
	writer := user
	if writer == "" {
		writer = h.opts.User
	}
	if err := h.startKeeper(r.Context(), c, cmd, writer); err != nil {
		h.dropKeeper(c, cmd)
		c.st.unregister(cmd)
		fail(w, err)
		return
	}
	wrapped := &procpb.ProcessConfig{
		Cmd:  "/bin/bash",
		Args: append([]string{"-c", backgroundScript, "hutch-osb", cmd.log.dir + "/out", cfg.GetCmd()}, cfg.GetArgs()...),
		Envs: cfg.GetEnvs(),
		Cwd:  cfg.Cwd,
	}
	p, err := startProcess(c.st.ctx, h.client(c, user), wrapped, cmd.tag, timeout)
	if err != nil {
		h.dropKeeper(c, cmd)
		c.st.unregister(cmd)
		fail(w, err)
		return
	}
	stopTimer := p.watchTimeout(c.st.ctx, timeout)
	go func() {
		defer stopTimer()
		// Only what the script says before its output goes to the FIFO
		// comes here: why it could not open it.
		var early strings.Builder
		p.follow(func(ev procEvent) {
			switch {
			case ev.end != nil:
				h.awaitKeeper(c, cmd)
				code, msg := p.exitOf(ev.end)
				if early.Len() > 0 {
					msg = strings.TrimSpace(msg + ": " + early.String())
				}
				c.st.finish(cmd, &code, msg)
			case ev.err != nil:
				c.st.finish(cmd, nil, ev.err.Error())
				h.log.Info("lost a command's stream", "sandbox", c.id, "command", cmd.id, "err", ev.err)
			case early.Len() < maxHelperOutput:
				early.Write(ev.stdout)
				early.Write(ev.stderr)
			}
		})
	}()
	s := startSSE(w)
	if s.send(streamEvent{Type: eventInit, Text: cmd.id}) == nil {
		ms := time.Since(cmd.startedAt).Milliseconds()
		_ = s.send(streamEvent{Type: eventComplete, ExecutionTime: &ms})
	}
}

// interruptCommand is DELETE /command?id=: SIGTERM to the command's
// process group, then SIGKILL if it has not ended within interruptWait,
// as execd does. A command that has ended already is left as it is.
func (h *Handler) interruptCommand(w http.ResponseWriter, r *http.Request, c *call) {
	id := r.URL.Query().Get("id")
	if id == "" {
		fail(w, missingQuery("id"))
		return
	}
	cmd := c.st.lookup(id)
	if cmd == nil {
		fail(w, &apiError{http.StatusNotFound, codeContextNotFound, "command " + id + " not found"})
		return
	}
	if err := h.interrupt(r.Context(), h.client(c, ""), cmd.tag, cmd.done); err != nil {
		fail(w, err)
		return
	}
	okEmpty(w)
}

// interruptWait is how long an interrupted command has after SIGTERM
// before SIGKILL, as execd gives it.
const interruptWait = 3 * time.Second

// interrupt ends the process tagged tag, whose end closes done.
func (h *Handler) interrupt(ctx context.Context, ec *envdClient, tag string, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	default:
	}
	if err := ec.signal(ctx, tag, procpb.Signal_SIGNAL_SIGTERM); err != nil {
		return err
	}
	t := time.NewTimer(interruptWait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	if err := ec.signal(ctx, tag, procpb.Signal_SIGNAL_SIGKILL); err != nil {
		return err
	}
	t.Reset(interruptWait)
	select {
	case <-done:
	case <-ctx.Done():
	case <-t.C:
	}
	return nil
}

// commandStatus is GET /command/status/{id}.
func (h *Handler) commandStatus(w http.ResponseWriter, r *http.Request, c *call) {
	cmd := c.st.lookup(c.params["id"])
	if cmd == nil {
		fail(w, &apiError{http.StatusNotFound, codeContextNotFound, "command " + c.params["id"] + " not found"})
		return
	}
	writeJSON(w, c.st.status(cmd))
}

// commandLogs is GET /command/{id}/logs?cursor=: a background command's
// output from byte offset cursor (all of it without one) as plain text,
// and in header EXECD-COMMANDS-TAIL-CURSOR the offset to ask from next.
// The offsets are bytes, as execd's are (its spec says lines; its code and
// the SDKs use what the header gives).
func (h *Handler) commandLogs(w http.ResponseWriter, r *http.Request, c *call) {
	id := c.params["id"]
	cmd := c.st.lookup(id)
	if cmd == nil {
		fail(w, &apiError{http.StatusNotFound, codeContextNotFound, "command " + id + " not found"})
		return
	}
	if cmd.log == nil {
		fail(w, badRequest("command %s is not running in background: its output was streamed, not kept", id))
		return
	}
	var cursor int64
	if v := r.URL.Query().Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			fail(w, badRequest("cursor %q is not a non-negative integer", v))
			return
		}
		cursor = n
	}
	out, next, err := h.readLogs(r.Context(), c, cmd, cursor)
	if err != nil {
		fail(w, err)
		return
	}
	w.Header().Set("EXECD-COMMANDS-TAIL-CURSOR", strconv.FormatInt(next, 10))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

// shellJoin renders argv as a shell would read it, for a status's content.
func shellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			parts[i] = a
			continue
		}
		parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(parts, " ")
}
