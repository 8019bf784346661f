// Package audit is Hutch's trail of what agents did: API calls that change
// something, commands started in sandboxes, files written or deleted,
// network policy changes and MCP tool calls, each with the API key (by id)
// and sandbox behind it. Events are redacted (redact.go) before they are
// kept, written to the control plane's SQLite database in batches, and
// pruned after a retention period.
//
// Durability: Record queues an event and returns; a writer commits the
// queue every FlushInterval (or each BatchSize events) in one transaction
// fsynced like every other write of the store, and Close commits what is
// left. A crash of the process loses at most the last FlushInterval of
// events; that bound is the price of not adding an fsync to every command
// an agent starts.
package audit

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Kinds of event.
const (
	KindAPI     = "api"     // a REST call that changes something
	KindCommand = "command" // a process started in a sandbox, and its end
	KindFile    = "file"    // a file written, moved or deleted
	KindNetwork = "network" // a sandbox's network policy set or changed
	KindMCP     = "mcp"     // an MCP tool call
)

// Outcomes.
const (
	OK    = "ok"
	Error = "error"
)

// Stored is an event as the trail keeps it, with its Seq and Time.
type Stored = store.Event

// Filter selects stored events (store.EventFilter).
type Filter = store.EventFilter

// Event is one action to record. Detail is redacted by its producer with
// this package's rules before it is recorded.
type Event struct {
	KeyID, SandboxID string
	Kind, Action     string
	Outcome          string
	Detail           map[string]any
}

const (
	// FlushInterval is the longest an event waits in memory.
	FlushInterval = 50 * time.Millisecond
	// BatchSize is the most events committed in one transaction.
	BatchSize = 256
	// queueSize is how many events may wait; Record blocks beyond it
	// rather than drop one.
	queueSize = 8192
)

// Log records events in the store. Safe for concurrent use; a nil *Log
// records nothing.
type Log struct {
	st        *store.Store
	logger    *slog.Logger
	prom      *metrics.Metrics
	retention time.Duration
	q         chan store.Event
	flushes   chan chan struct{}
	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
	now       func() time.Time
	// mu is held shared by Record while it queues, and exclusively by
	// Close to mark the Log closed: no event is queued after the writer
	// has drained the queue for the last time.
	mu     sync.RWMutex
	closed bool
	// room is Options.Room; noRoom, the writer's own, whether the last
	// batch was dropped for it (logged once per stretch).
	room   func() error
	noRoom atomic.Bool
}

// Options configure a Log.
type Options struct {
	Store  *store.Store
	Logger *slog.Logger
	// Metrics counts the events written and lost; nil counts nothing.
	Metrics *metrics.Metrics
	// Retention is how long events are kept; 0 keeps them for ever.
	Retention time.Duration
	// Room, when set, is asked before each batch is written: an error (the
	// data dir's disk down to the floor its other writers keep) drops the
	// batch, counted lost, rather than let the trail fill the disk every
	// sandbox and the database share (review 27 round 2, G3).
	Room func() error
}

// New starts a Log writing to opts.Store; Close stops it.
func New(opts Options) *Log {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Log{st: opts.Store, logger: logger, prom: opts.Metrics, retention: opts.Retention, room: opts.Room,
		q: make(chan store.Event, queueSize), flushes: make(chan chan struct{}), stop: make(chan struct{}), now: time.Now}
	l.done.Add(1)
	go l.write()
	if l.retention > 0 {
		l.done.Add(1)
		go l.prune()
	}
	return l
}

// Record queues e. It blocks only while the queue is full.
func (l *Log) Record(e Event) {
	if l == nil {
		return
	}
	if e.Outcome == "" {
		e.Outcome = OK
	}
	detail := []byte("{}")
	if len(e.Detail) > 0 {
		b, err := json.Marshal(e.Detail)
		if err != nil {
			b, _ = json.Marshal(map[string]string{"unencodable": err.Error()})
		}
		detail = bound(b)
	}
	se := store.Event{Time: l.now().UTC(), KeyID: e.KeyID, SandboxID: e.SandboxID, Kind: e.Kind,
		Action: e.Action, Outcome: e.Outcome, Detail: detail}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		// Late (a request still answered while the server stops):
		// written directly.
		l.append([]store.Event{se})
		return
	}
	l.q <- se
}

// write commits the queue in batches until Close.
func (l *Log) write() {
	defer l.done.Done()
	batch := make([]store.Event, 0, BatchSize)
	tick := time.NewTicker(FlushInterval)
	defer tick.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		l.append(batch)
		batch = batch[:0]
	}
	add := func(e store.Event) {
		if batch = append(batch, e); len(batch) == BatchSize {
			flush()
		}
	}
	// drain commits everything queued so far.
	drain := func() {
		for {
			select {
			case e := <-l.q:
				add(e)
			default:
				flush()
				return
			}
		}
	}
	for {
		select {
		case e := <-l.q:
			add(e)
		case <-tick.C:
			flush()
		case done := <-l.flushes:
			drain()
			close(done)
		case <-l.stop:
			drain()
			return
		}
	}
}

// append writes events to the store and counts them.
func (l *Log) append(events []store.Event) {
	if l.room != nil {
		if err := l.room(); err != nil {
			if !l.noRoom.Swap(true) {
				l.logger.Error("audit: events dropped until the disk has room", "err", err)
			}
			l.prom.AuditLost(len(events))
			return
		}
		l.noRoom.Store(false)
	}
	if err := l.st.AppendEvents(context.Background(), events); err != nil {
		l.logger.Error("audit: events lost", "count", len(events), "err", err)
		l.prom.AuditLost(len(events))
		return
	}
	kinds := map[string]int{}
	for _, e := range events {
		kinds[e.Kind]++
	}
	for k, n := range kinds {
		l.prom.AuditEvents(k, n)
	}
}

// pruneEvery is how often events past the retention are deleted.
const pruneEvery = time.Hour

// prune deletes events older than the retention, now and then every
// pruneEvery.
func (l *Log) prune() {
	defer l.done.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			n, err := l.st.PruneEvents(context.Background(), l.now().Add(-l.retention))
			if err != nil {
				l.logger.Warn("audit: prune", "err", err)
			} else if n > 0 {
				l.logger.Info("audit: pruned events past the retention", "count", n, "retention", l.retention)
			}
			t.Reset(pruneEvery)
		}
	}
}

// Flush waits until every event recorded before it is committed: a
// reader that flushes first sees its own actions.
func (l *Log) Flush() {
	if l == nil {
		return
	}
	done := make(chan struct{})
	select {
	case l.flushes <- done:
		<-done
	case <-l.stop:
	}
}

// Close commits the events queued and stops the Log.
func (l *Log) Close() {
	if l == nil {
		return
	}
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.stop)
		l.done.Wait()
	})
}

// List returns the events f selects, oldest first.
func (l *Log) List(ctx context.Context, f Filter) ([]Stored, error) {
	return l.st.ListEvents(ctx, f)
}

// maxDetail bounds an event's detail, encoded; longer strings in a larger
// one are clipped to their first and last maxDetailString/2 bytes with the
// length and SHA-256 of the whole between (a 1 MiB script keeps its head
// and its tail, where a padded one hides its point: review of issue 22,
// and the hash ties it to a copy), and a detail still too large is
// replaced by its size. The trail's size follows what was done, not what
// a client chose to send.
const (
	maxDetail       = 64 << 10
	maxDetailString = 8 << 10
)

func bound(b []byte) []byte {
	if len(b) <= maxDetail {
		return b
	}
	var v any
	if json.Unmarshal(b, &v) == nil {
		if c, err := json.Marshal(clipStrings(v)); err == nil && len(c) <= maxDetail {
			return c
		}
	}
	c, _ := json.Marshal(map[string]any{"truncated": true, "bytes": len(b)})
	return c
}

// clipStrings returns v (decoded JSON) with every string longer than
// maxDetailString clipped.
func clipStrings(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = clipStrings(x)
		}
	case []any:
		for i, x := range t {
			t[i] = clipStrings(x)
		}
	case string:
		if len(t) > maxDetailString {
			half := maxDetailString / 2
			return fmt.Sprintf("%s…[%d bytes clipped; sha256 %x]…%s", t[:half], len(t)-2*half, sha256.Sum256([]byte(t)), t[len(t)-half:])
		}
	}
	return v
}
