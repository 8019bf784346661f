package osbexecd

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// command is one POST /command the handler started: what GET
// /command/status/{id} reports, and where a background command's output
// is kept for GET /command/{id}/logs.
type command struct {
	id         string
	content    string // the command as the client gave it
	background bool
	tag        string // envd's tag of the process, to signal it by
	startedAt  time.Time
	done       chan struct{} // closed once the command has finished
	log        *commandLog   // background commands only

	// Guarded by sandboxState.mu.
	running    bool
	exitCode   *int
	errMsg     string
	finishedAt *time.Time
}

// newID returns a random identifier for a command or session.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// register adds cmd (running) to the sandbox's commands, forgetting the
// oldest finished command when the sandbox has max already; with max
// commands all running, it refuses. It returns the commands whose kept
// output the caller must remove from the sandbox: the forgotten one's,
// and, when cmd keeps output, the oldest finished commands' beyond
// keepLogs commands keeping theirs (running commands keep theirs).
func (st *sandboxState) register(cmd *command, max, keepLogs int) ([]*command, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	var drop []*command
	for len(st.commands) >= max {
		evicted := false
		for i, old := range st.order {
			if !old.running {
				if old.log != nil && !old.log.removed {
					old.log.removed = true
					drop = append(drop, old)
				}
				st.forgetLocked(i)
				evicted = true
				break
			}
		}
		if !evicted {
			return drop, &apiError{http.StatusTooManyRequests, codeTooMany, fmt.Sprintf("the sandbox has %d commands running, the most this server follows; wait for one to end or interrupt one", max)}
		}
	}
	if cmd.log != nil {
		kept := 1
		for _, old := range st.order {
			if old.log != nil && !old.log.removed {
				kept++
			}
		}
		for _, old := range st.order {
			if kept <= keepLogs {
				break
			}
			if !old.running && old.log != nil && !old.log.removed {
				old.log.removed = true
				drop = append(drop, old)
				kept--
			}
		}
	}
	cmd.running = true
	st.commands[cmd.id] = cmd
	st.order = append(st.order, cmd)
	return drop, nil
}

// forgetLocked drops st.order[i].
func (st *sandboxState) forgetLocked(i int) {
	delete(st.commands, st.order[i].id)
	st.order = append(st.order[:i], st.order[i+1:]...)
}

// unregister drops cmd, which never started.
func (st *sandboxState) unregister(cmd *command) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, c := range st.order {
		if c == cmd {
			st.forgetLocked(i)
			return
		}
	}
}

// lookup returns command id, or nil.
func (st *sandboxState) lookup(id string) *command {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.commands[id]
}

// finish records cmd's end: exitCode is nil when it is not known.
func (st *sandboxState) finish(cmd *command, exitCode *int, errMsg string) {
	st.mu.Lock()
	now := time.Now()
	cmd.running, cmd.exitCode, cmd.errMsg, cmd.finishedAt = false, exitCode, errMsg, &now
	st.mu.Unlock()
	close(cmd.done)
}

// commandStatus is execd's CommandStatusResponse.
type commandStatus struct {
	ID         string     `json:"id"`
	Content    string     `json:"content"`
	Running    bool       `json:"running"`
	ExitCode   *int       `json:"exit_code"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// status returns cmd's status.
func (st *sandboxState) status(cmd *command) commandStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := commandStatus{ID: cmd.id, Content: cmd.content, Running: cmd.running, Error: cmd.errMsg, StartedAt: cmd.startedAt.UTC()}
	if cmd.exitCode != nil {
		code := *cmd.exitCode
		s.ExitCode = &code
	}
	if cmd.finishedAt != nil {
		t := cmd.finishedAt.UTC()
		s.FinishedAt = &t
	}
	return s
}
