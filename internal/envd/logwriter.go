package envd

import (
	"io"
	"log/slog"
	"sync"
)

// MaxLogBytes bounds what envd writes to its log over its life. The log is
// a file on the host (the runtime's output log of the sandbox) and code in
// the sandbox makes entries by starting processes, so without a bound a
// busy sandbox would grow it without end.
const MaxLogBytes = 16 << 20

// NewLogWriter returns a writer for envd's log that passes writes to w
// until MaxLogBytes have been written, then writes one last line saying
// the log was cut and discards the rest.
func NewLogWriter(w io.Writer) io.Writer { return &logWriter{w: w, left: MaxLogBytes} }

type logWriter struct {
	mu   sync.Mutex
	w    io.Writer
	left int
}

func (l *logWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.left < 0:
		return len(p), nil
	case len(p) <= l.left:
		l.left -= len(p)
		return l.w.Write(p)
	}
	l.left = -1
	l.w.Write([]byte(`{"level":"WARN","msg":"envd log limit reached: later entries are dropped"}` + "\n"))
	return len(p), nil
}

// NewLogger returns envd's logger: JSON lines to w, bounded by
// MaxLogBytes. The control plane parses these lines for a sandbox's logs.
func NewLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(NewLogWriter(w), nil))
}
