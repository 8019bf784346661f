package sandbox

import (
	"context"
	"fmt"
	"io"
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
//
// The log is the standard error of a process in the sandbox, which the
// sandbox's root can write anything to: Logs reads it in bounded chunks
// (backward from its end for Backward), decodes only the entries the
// page takes, and bounds every entry and the page (see readLog), so that
// what it holds in memory does not depend on what the log holds.
func (m *Manager) Logs(ctx context.Context, keyID, id string, q LogQuery) ([]LogEntry, error) {
	if _, err := m.store.GetSandbox(ctx, keyID, id); err != nil {
		return nil, err
	}
	sbx, err := m.rt.Load(ctx, id)
	if err != nil {
		return nil, err
	}
	log, err := sbx.Output(ctx)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	entries, err := readLog(log, log.Size(), q)
	if err != nil {
		return nil, fmt.Errorf("read log of sandbox %s: %w", id, err)
	}
	return entries, nil
}

// readLog returns the entries of the size bytes of r that q selects.
//
// Lines are JSON objects as slog writes them; other lines (a Go panic,
// say) become error entries. A line without a time of its own takes the
// time of the nearest line before it that has one. A page ends at
// q's limit, or before its entries would pass maxLogPage (entrySize),
// but holds at least one entry.
func readLog(r io.ReaderAt, size int64, q LogQuery) ([]LogEntry, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	limit = min(limit, MaxLogLimit)
	if q.Backward {
		return readBackward(newBackwardLines(r, size), q.Cursor, limit)
	}
	return readForward(newForwardLines(r, size), q.Cursor, limit)
}

// page collects entries up to a count and a size.
type page struct {
	entries []LogEntry
	limit   int
	size    int // entrySize of entries, and of pending ones
}

// room reports whether an entry of size n fits after held entries
// (those collected and those pending): a page always takes one.
func (p *page) room(held, n int) bool {
	return held == 0 || (held < p.limit && p.size+n <= maxLogPage)
}

// readForward reads lines from the start: entries at or after cursor,
// oldest first.
func readForward(lines *forwardLines, cursor time.Time, limit int) ([]LogEntry, error) {
	p := page{limit: limit}
	var last time.Time
	for {
		line, n, err := lines.next()
		if err == io.EOF {
			return p.entries, nil
		}
		if err != nil {
			return nil, err
		}
		l := scanLine(line, n)
		if l.blank {
			continue
		}
		t := l.time
		if t.IsZero() {
			t = last
		}
		last = t
		if !cursor.IsZero() && t.Before(cursor) {
			continue
		}
		e := l.entry(line, n, t)
		size := entrySize(e)
		if !p.room(len(p.entries), size) {
			return p.entries, nil
		}
		p.entries = append(p.entries, e)
		p.size += size
		if len(p.entries) == limit {
			return p.entries, nil
		}
	}
}

// readBackward reads lines from the end: entries at or before cursor,
// newest first.
//
// Lines without a time of their own take that of the nearest earlier
// line with one, which is read after them: they wait in pending (newest
// first) until it is, then join the page or not together. Only as many
// wait as could still join the page: older ones of the same group could
// not, whether the group joins or not.
func readBackward(lines *backwardLines, cursor time.Time, limit int) ([]LogEntry, error) {
	p := page{limit: limit}
	var pending []LogEntry
	keep := func(t time.Time) bool { return cursor.IsZero() || !t.After(cursor) }
	// resolve settles the pending entries: they have time t.
	resolve := func(t time.Time) {
		for _, e := range pending {
			if keep(t) {
				e.Time = t
				p.entries = append(p.entries, e)
			} else {
				p.size -= entrySize(e)
			}
		}
		pending = pending[:0]
	}
	full := func() bool { return len(p.entries) == limit || (len(p.entries) > 0 && p.size >= maxLogPage) }
	for {
		line, n, err := lines.next()
		if err == io.EOF {
			resolve(time.Time{})
			return p.entries, nil
		}
		if err != nil {
			return nil, err
		}
		l := scanLine(line, n)
		if l.blank {
			continue
		}
		held := len(p.entries) + len(pending)
		if l.time.IsZero() {
			if held == limit {
				continue // read on only to find the pending entries' time
			}
			e := l.entry(line, n, time.Time{})
			if size := entrySize(e); p.room(held, size) {
				pending = append(pending, e)
				p.size += size
			}
			continue
		}
		resolve(l.time)
		if full() {
			return p.entries, nil
		}
		if !keep(l.time) {
			continue
		}
		e := l.entry(line, n, l.time)
		size := entrySize(e)
		if !p.room(len(p.entries), size) {
			return p.entries, nil
		}
		p.entries = append(p.entries, e)
		p.size += size
		if full() {
			return p.entries, nil
		}
	}
}
