package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Log query bounds.
const (
	// DefaultLogLimit is the number of entries Logs returns when the
	// query sets none (E2B's default).
	DefaultLogLimit = 1000
	// MaxLogLimit is the most entries one call returns.
	MaxLogLimit = 10000
)

// LogEntry is one line of a sandbox's log: what its envd did (started,
// processes started and ended, failures).
type LogEntry struct {
	Time    time.Time
	Level   string // "debug", "info", "warn" or "error"
	Message string
	Fields  map[string]string
}

// LogQuery selects log entries.
type LogQuery struct {
	// Cursor, if not zero, keeps entries at or after it (forward) or at or
	// before it (backward).
	Cursor time.Time
	// Limit caps the number of entries: 0 means DefaultLogLimit, at most
	// MaxLogLimit.
	Limit int
	// Backward returns the newest entries first.
	Backward bool
}

// Logs returns entries of sandbox id's log, which envd writes as JSON
// lines to the runtime's output log of the sandbox.
func (m *Manager) Logs(ctx context.Context, keyID, id string, q LogQuery) ([]LogEntry, error) {
	if _, err := m.store.GetSandbox(ctx, keyID, id); err != nil {
		return nil, err
	}
	sbx, err := m.rt.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	rc, err := sbx.Output(ctx)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	limit = min(limit, MaxLogLimit)
	var out []LogEntry
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var last time.Time
	for sc.Scan() {
		e, ok := parseLogLine(sc.Bytes(), last)
		if !ok {
			continue
		}
		last = e.Time
		if !q.Cursor.IsZero() && (!q.Backward && e.Time.Before(q.Cursor) || q.Backward && e.Time.After(q.Cursor)) {
			continue
		}
		out = append(out, e)
		if !q.Backward && len(out) == limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read log of sandbox %s: %w", id, err)
	}
	if q.Backward {
		slices.Reverse(out)
		out = out[:min(len(out), limit)]
	}
	return out, nil
}

// parseLogLine reads one line of slog's JSON. Other lines (a Go panic,
// say) become error entries stamped with the previous entry's time.
func parseLogLine(line []byte, prev time.Time) (LogEntry, bool) {
	if len(strings.TrimSpace(string(line))) == 0 {
		return LogEntry{}, false
	}
	var raw map[string]any
	if json.Unmarshal(line, &raw) != nil {
		return LogEntry{Time: prev, Level: "error", Message: string(line)}, true
	}
	e := LogEntry{Level: "info", Fields: map[string]string{}}
	for k, v := range raw {
		s, isString := v.(string)
		if !isString {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		switch k {
		case "time":
			e.Time, _ = time.Parse(time.RFC3339Nano, s)
		case "level":
			e.Level = strings.ToLower(s)
		case "msg":
			e.Message = s
		default:
			e.Fields[k] = s
		}
	}
	if e.Time.IsZero() {
		e.Time = prev
	}
	return e, true
}
