package osbexecd

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"
)

// command is one POST /command the handler started: what GET
// /command/status/{id} reports, and a background command's output for GET
// /command/{id}/logs.
type command struct {
	id         string
	content    string // the command as the client gave it
	background bool
	tag        string // envd's tag of the process, to signal it by
	startedAt  time.Time
	done       chan struct{} // closed once the command has finished

	// Guarded by sandboxState.mu.
	running    bool
	exitCode   *int
	errMsg     string
	finishedAt *time.Time
	log        *logBuffer // background commands only
}

// logBuffer is the output of a background command, stdout and stderr
// interleaved as they came (execd keeps them in one file too). Offsets
// are absolute: byte n of everything the command wrote. When the buffer
// is over its bound the oldest bytes go, and start moves on.
type logBuffer struct {
	data  []byte
	start int64 // offset of data[0]
}

func (b *logBuffer) end() int64 { return b.start + int64(len(b.data)) }

// drop forgets the oldest n kept bytes, compacting the buffer so that it
// does not keep growing underneath.
func (b *logBuffer) drop(n int) {
	if n <= 0 {
		return
	}
	if n >= len(b.data) {
		b.start += int64(len(b.data))
		b.data = nil
		return
	}
	b.start += int64(n)
	rest := b.data[n:]
	if cap(b.data) > 2*len(rest)+4096 {
		b.data = append([]byte(nil), rest...)
	} else {
		b.data = rest
	}
}

// newID returns a random identifier for a command or session.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// register adds cmd (running) to the sandbox's commands, forgetting the
// oldest finished command when the sandbox has max already; with max
// commands all running, it refuses.
func (st *sandboxState) register(cmd *command, max int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	for len(st.commands) >= max {
		evicted := false
		for i, old := range st.order {
			if !old.running {
				st.forgetLocked(i)
				evicted = true
				break
			}
		}
		if !evicted {
			return &apiError{http.StatusTooManyRequests, codeTooMany, fmt.Sprintf("the sandbox has %d commands running, the most this server follows; wait for one to end or interrupt one", max)}
		}
	}
	cmd.running = true
	st.commands[cmd.id] = cmd
	st.order = append(st.order, cmd)
	return nil
}

// forgetLocked drops st.order[i] and its output.
func (st *sandboxState) forgetLocked(i int) {
	old := st.order[i]
	if old.log != nil {
		st.logBytes -= len(old.log.data)
	}
	delete(st.commands, old.id)
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

// appendLog keeps b as cmd's output, within the bounds per command
// (maxCmd) and per sandbox (maxSandbox): the oldest output goes first,
// the finished commands' before the running ones'.
func (st *sandboxState) appendLog(cmd *command, b []byte, maxCmd, maxSandbox int) {
	if len(b) == 0 {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if _, ok := st.commands[cmd.id]; !ok {
		return // forgotten meanwhile
	}
	lb := cmd.log
	lb.data = append(lb.data, b...)
	st.logBytes += len(b)
	if over := len(lb.data) - maxCmd; over > 0 {
		lb.drop(over)
		st.logBytes -= over
	}
	for _, old := range st.order {
		if st.logBytes <= maxSandbox {
			return
		}
		if old == cmd || old.running || old.log == nil || len(old.log.data) == 0 {
			continue
		}
		st.logBytes -= len(old.log.data)
		old.log.drop(len(old.log.data))
	}
	if over := st.logBytes - maxSandbox; over > 0 {
		n := min(over, len(lb.data))
		lb.drop(n)
		st.logBytes -= n
	}
}

// readLog returns cmd's output from byte offset cursor and the offset to
// ask from next. Output that was dropped is replaced by a note saying how
// much.
func (st *sandboxState) readLog(cmd *command, cursor int64, maxCmd, maxSandbox int) ([]byte, int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	lb := cmd.log
	end := lb.end()
	if cursor > end {
		cursor = end
	}
	if cursor >= lb.start {
		return append([]byte(nil), lb.data[cursor-lb.start:]...), end
	}
	note := fmt.Sprintf("[hutch: %d bytes of earlier output were dropped; the host keeps at most the last %d bytes of a command's output and %d bytes of all commands' output of a sandbox]\n",
		lb.start-cursor, maxCmd, maxSandbox)
	return append([]byte(note), lb.data...), end
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
