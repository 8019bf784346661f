package osbexecd

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	procpb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// session is a bash session (POST /session). As in execd, its state is
// the working directory and the exported environment, carried from one
// run to the next: each run is a fresh bash started in the session's
// directory with the session's environment, which writes both back when
// the command is done. (A command that exits the shell, or is killed,
// leaves the state as it was, as in execd.)
type session struct {
	id  string
	sem chan struct{} // one run at a time

	// Guarded by sandboxState.mu.
	cwd     string            // "" is the user's home
	env     map[string]string // nil: the sandbox's defaults
	current *startedProcess   // the run going on
	closed  bool
}

// Bounds of what a session carries between runs (execd's for a value).
const (
	maxSessionVar = 8 << 10
	maxSessionEnv = 256 << 10
)

// sessionScript runs the command ($2) in bash and then writes the
// working directory and the exported environment to the state file ($1),
// readable by its owner alone. The command is an argument, evaluated by
// the shell as the session's code; nothing else is interpolated.
const sessionScript = `__hutch_osb_state=$1
__hutch_osb_cmd=$2
shift 2
eval "$__hutch_osb_cmd"
__hutch_osb_rc=$?
(umask 077; { pwd; env -0 2>/dev/null || env; } > "$__hutch_osb_state") 2>/dev/null
exit "$__hutch_osb_rc"`

// createSessionRequest is execd's CreateSessionRequest.
type createSessionRequest struct {
	Cwd string `json:"cwd"`
}

// createSession is POST /session: a new session, its directory made if
// missing.
func (h *Handler) createSession(w http.ResponseWriter, r *http.Request, c *call) {
	var req createSessionRequest
	if err := h.decodeJSON(w, r, &req, true); err != nil {
		fail(w, err)
		return
	}
	s := &session{id: newID(), sem: make(chan struct{}, 1)}
	if req.Cwd != "" {
		if err := checkPath(req.Cwd); err != nil {
			fail(w, err)
			return
		}
		ec := h.client(c, "")
		mk := connect.NewRequest(&fspb.MakeDirRequest{Path: req.Cwd})
		ec.header(mk.Header())
		if _, err := ec.fs().MakeDir(r.Context(), mk); err != nil && connect.CodeOf(err) != connect.CodeAlreadyExists {
			fail(w, classify("make the session's directory", err))
			return
		}
		e, err := ec.stat(r.Context(), req.Cwd)
		if err != nil {
			fail(w, err)
			return
		}
		s.cwd = e.GetPath()
	}
	c.st.mu.Lock()
	if len(c.st.sessions) >= h.opts.MaxSessions {
		c.st.mu.Unlock()
		fail(w, &apiError{http.StatusTooManyRequests, codeTooMany, "the sandbox has the most sessions this server keeps; delete one first"})
		return
	}
	c.st.sessions[s.id] = s
	c.st.mu.Unlock()
	writeJSON(w, map[string]string{"session_id": s.id})
}

// runInSessionRequest is execd's RunInSessionRequest.
type runInSessionRequest struct {
	Command string `json:"command"`
	Cwd     string `json:"cwd"`
	Timeout int64  `json:"timeout"` // milliseconds; 0: none
}

// runInSession is POST /session/{id}/run: the command's events, as POST
// /command's, with the session's id in init. Runs of one session take
// turns.
func (h *Handler) runInSession(w http.ResponseWriter, r *http.Request, c *call) {
	var req runInSessionRequest
	if err := h.decodeJSON(w, r, &req, false); err != nil {
		fail(w, err)
		return
	}
	switch {
	case strings.TrimSpace(req.Command) == "":
		fail(w, badRequest("invalid request, validation error: command is required"))
		return
	case strings.ContainsRune(req.Command, 0):
		fail(w, badRequest("invalid request, validation error: command contains a NUL byte"))
		return
	case req.Timeout < 0 || req.Timeout > int64(maxTimeout/time.Millisecond):
		fail(w, badRequest("invalid request, validation error: timeout must be between 0 and %d milliseconds", int64(maxTimeout/time.Millisecond)))
		return
	}
	if req.Cwd != "" {
		if err := checkPath(req.Cwd); err != nil {
			fail(w, err)
			return
		}
	}
	id := c.params["id"]
	c.st.mu.Lock()
	s := c.st.sessions[id]
	c.st.mu.Unlock()
	if s == nil {
		fail(w, &apiError{http.StatusNotFound, codeContextNotFound, "session " + id + " not found"})
		return
	}
	select {
	case s.sem <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	release := func() { <-s.sem }
	c.st.mu.Lock()
	if s.closed {
		c.st.mu.Unlock()
		release()
		fail(w, &apiError{http.StatusNotFound, codeContextNotFound, "session " + id + " was deleted"})
		return
	}
	cwd, env := s.cwd, s.env
	c.st.mu.Unlock()
	if req.Cwd != "" {
		cwd = req.Cwd
	}

	statePath := "/tmp/.hutch-osb-session-" + newID()
	cfg := &procpb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", sessionScript, "bash", statePath, req.Command}, Envs: env}
	if cwd != "" {
		cfg.Cwd = &cwd
	}
	timeout := time.Duration(req.Timeout) * time.Millisecond
	ec := h.client(c, "")
	p, err := startProcess(c.st.ctx, ec, cfg, "osb-session-"+s.id+"-"+newID(), timeout)
	if err != nil {
		release()
		fail(w, err)
		return
	}
	c.st.mu.Lock()
	s.current = p
	c.st.mu.Unlock()
	stopTimer := p.watchTimeout(c.st.ctx, timeout)
	ep := newEventPipe()
	go func() {
		defer release()
		defer stopTimer()
		var last procEvent
		p.follow(func(ev procEvent) {
			if ev.end != nil || ev.err != nil {
				last = ev
				return
			}
			ep.deliver(ev)
		})
		if last.end != nil && !p.timedOut.Load() {
			h.loadSessionState(c, ec, s, statePath)
		}
		ctx, cancel := context.WithTimeout(c.st.ctx, 10*time.Second)
		_ = ec.as("root").remove(ctx, statePath)
		cancel()
		c.st.mu.Lock()
		s.current = nil
		c.st.mu.Unlock()
		ep.deliver(last)
	}()

	sse := startSSE(w)
	if err := sse.send(streamEvent{Type: eventInit, Text: s.id}); err != nil {
		ep.leave()
		_ = p.kill(c.st.ctx, procpb.Signal_SIGNAL_SIGKILL)
		return
	}
	streamForeground(r, sse, p, ep, c.st.ctx)
}

// loadSessionState reads what a run left in statePath into s: the first
// line is the directory, the rest the environment (NUL-separated where
// env -0 works, else one variable a line).
func (h *Handler) loadSessionState(c *call, ec *envdClient, s *session, statePath string) {
	ctx, cancel := context.WithTimeout(c.st.ctx, 10*time.Second)
	defer cancel()
	b, err := ec.as("root").readFile(ctx, statePath, 4<<20)
	if err != nil {
		if !errdefs.IsNotFound(err) {
			h.log.Info("session state not read", "sandbox", c.id, "session", s.id, "err", err)
		}
		return
	}
	dir, rest, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return
	}
	sep := []byte("\n")
	if bytes.IndexByte(rest, 0) >= 0 {
		sep = []byte{0}
	}
	env := map[string]string{}
	total := 0
	for _, kv := range bytes.Split(rest, sep) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok || !validEnvName(k) || len(v) > maxSessionVar {
			continue
		}
		switch k {
		case "_", "SHLVL", "PWD":
			continue // the shell's own, set anew by each run
		}
		if total += len(k) + len(v); total > maxSessionEnv {
			break
		}
		env[k] = v
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	if s.closed {
		return
	}
	if d := string(dir); strings.HasPrefix(d, "/") {
		s.cwd = d
	}
	s.env = env
}

// validEnvName reports whether k is a shell variable name.
func validEnvName(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}

// deleteSession is DELETE /session/{id}: kills a run going on and forgets
// the session.
func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request, c *call) {
	id := c.params["id"]
	c.st.mu.Lock()
	s := c.st.sessions[id]
	var running *startedProcess
	if s != nil {
		s.closed = true
		running = s.current
		delete(c.st.sessions, id)
	}
	c.st.mu.Unlock()
	if s == nil {
		fail(w, &apiError{http.StatusNotFound, codeContextNotFound, "session " + id + " not found"})
		return
	}
	if running != nil {
		if err := running.kill(r.Context(), procpb.Signal_SIGNAL_SIGKILL); err != nil {
			fail(w, err)
			return
		}
	}
	okEmpty(w)
}
