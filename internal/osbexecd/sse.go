package osbexecd

import (
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"
)

// Event types of execd's ServerStreamEvent.
const (
	eventInit     = "init"
	eventStdout   = "stdout"
	eventStderr   = "stderr"
	eventErr      = "error"
	eventComplete = "execution_complete"
	eventPing     = "ping"
)

// pingInterval is how often a quiet command stream gets a ping event, so
// proxies between the client and the host keep the connection.
const pingInterval = 5 * time.Second

// writeTimeout bounds one event's write: a client that stops reading is
// then taken as gone, rather than holding the command's output forever.
const writeTimeout = time.Minute

// streamEvent is execd's ServerStreamEvent.
type streamEvent struct {
	Type          string      `json:"type"`
	Text          string      `json:"text,omitempty"`
	ExecutionTime *int64      `json:"execution_time,omitempty"`
	Timestamp     int64       `json:"timestamp"`
	Error         *eventError `json:"error,omitempty"`
}

// eventError is the error of an "error" event; the SDKs read evalue as
// the exit code.
type eventError struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback"`
}

// sseWriter writes events as standard server-sent events ("data: <json>"
// and a blank line), which the SDKs read as well as execd's bare JSON.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE commits the response as an event stream.
func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	_ = s.rc.Flush()
	return s
}

// send writes ev and flushes it; an error means the client is gone.
func (s *sseWriter) send(ev streamEvent) error {
	if ev.Timestamp == 0 {
		ev.Timestamp = timestamp()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
		return err
	}
	return s.rc.Flush()
}

// utf8Carry turns a byte stream cut at arbitrary points into strings that
// do not split a UTF-8 sequence: an incomplete sequence at a chunk's end
// waits for the next chunk. Invalid bytes stay (JSON encodes them as
// U+FFFD).
type utf8Carry struct{ pending []byte }

func (c *utf8Carry) text(b []byte) string {
	buf := append(c.pending, b...)
	c.pending = nil
	// Look back at most UTFMax-1 bytes for the start of a last rune.
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				c.pending = append([]byte(nil), buf[i:]...)
				buf = buf[:i]
			}
			break
		}
	}
	return string(buf)
}

// flush returns what is still pending.
func (c *utf8Carry) flush() string {
	s := string(c.pending)
	c.pending = nil
	return s
}
