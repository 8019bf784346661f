package store

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// Event is one entry of the audit trail as stored: what was done
// (Kind, Action, Outcome, Detail), by which API key, to which sandbox.
// Seq orders events and is never reused.
type Event struct {
	Seq       int64
	Time      time.Time
	KeyID     string
	SandboxID string
	Kind      string
	Action    string
	Outcome   string
	// Detail is a JSON object; empty means {}.
	Detail json.RawMessage
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	KeyID, SandboxID, Kind string
	// Since keeps events at or after it.
	Since time.Time
	// After keeps events whose Seq is greater (a follower's cursor).
	After int64
	// Before keeps events whose Seq is smaller (the cursor of a reader
	// of the newest first); 0 keeps all.
	Before int64
	// Limit caps the events returned; 0 means 100.
	Limit int
	// Newest returns the Limit newest events, newest first, instead of
	// the oldest, oldest first: a view that starts at the present (the
	// console's audit page) needs it, since paging forward from the
	// oldest through a long trail would take one request per Limit.
	Newest bool
}

// AppendEvents stores events in one transaction and sets their Seq.
func (s *Store) AppendEvents(ctx context.Context, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return errorf("store: append events: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx,
		`INSERT INTO events (time, key_id, sandbox_id, kind, action, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return errorf("store: append events: %w", err)
	}
	defer stmt.Close()
	for i := range events {
		e := &events[i]
		detail := string(e.Detail)
		if detail == "" {
			detail = "{}"
		}
		res, err := stmt.ExecContext(ctx, toNanos(e.Time), e.KeyID, e.SandboxID, e.Kind, e.Action, e.Outcome, detail)
		if err != nil {
			return errorf("store: append event %s: %w", e.Action, err)
		}
		if e.Seq, err = res.LastInsertId(); err != nil {
			return errorf("store: append events: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return errorf("store: append events: %w", err)
	}
	return nil
}

// ListEvents returns the events f selects, oldest first.
func (s *Store) ListEvents(ctx context.Context, f EventFilter) ([]Event, error) {
	var out []Event
	err := s.EachEvent(ctx, f, func(e Event) error { out = append(out, e); return nil })
	return out, err
}

// EachEvent calls fn with each event f selects, oldest first, as they are
// read: a long export is never held whole. An error of fn stops it and is
// returned.
func (s *Store) EachEvent(ctx context.Context, f EventFilter, fn func(Event) error) error {
	var (
		where []string
		args  []any
	)
	add := func(cond string, arg any) { where = append(where, cond); args = append(args, arg) }
	if f.KeyID != "" {
		add("key_id = ?", f.KeyID)
	}
	if f.SandboxID != "" {
		add("sandbox_id = ?", f.SandboxID)
	}
	if f.Kind != "" {
		add("kind = ?", f.Kind)
	}
	if !f.Since.IsZero() {
		add("time >= ?", toNanos(f.Since))
	}
	if f.After > 0 {
		add("seq > ?", f.After)
	}
	if f.Before > 0 {
		add("seq < ?", f.Before)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT seq, time, key_id, sandbox_id, kind, action, outcome, detail FROM events`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	if f.Newest {
		q += " ORDER BY seq DESC LIMIT ?"
	} else {
		q += " ORDER BY seq LIMIT ?"
	}
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return errorf("store: list events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			e      Event
			t      int64
			detail string
		)
		if err := rows.Scan(&e.Seq, &t, &e.KeyID, &e.SandboxID, &e.Kind, &e.Action, &e.Outcome, &detail); err != nil {
			return errorf("store: list events: %w", err)
		}
		e.Time = fromNanos(t)
		e.Detail = json.RawMessage(detail)
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return errorf("store: list events: %w", err)
	}
	return nil
}

// PruneEvents deletes the events older than before and reports how many.
func (s *Store) PruneEvents(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE time < ?`, toNanos(before))
	if err != nil {
		return 0, errorf("store: prune events: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
