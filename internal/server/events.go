package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// Hutch's own routes, beside E2B's: the audit trail (/events) and API
// keys (/api-keys). An admin key sees and manages every key and reads
// every key's events; a user key sees only its own.

func (s *Server) eventRoutes() {
	s.handle("GET /events", s.authed(s.listEvents))
	s.handle("POST /events", s.authed(s.reportEvent))
	s.handle("GET /api-keys", s.authed(s.listKeys))
	s.handle("POST /api-keys", s.authed(s.createKey))
	s.handle("DELETE /api-keys/{apiKeyID}", s.authed(s.revokeKey))
}

// eventJSON is an event on the wire.
type eventJSON struct {
	Seq       int64           `json:"seq"`
	Time      time.Time       `json:"time"`
	KeyID     string          `json:"keyID,omitempty"`
	SandboxID string          `json:"sandboxID,omitempty"`
	Kind      string          `json:"kind"`
	Action    string          `json:"action"`
	Outcome   string          `json:"outcome"`
	Detail    json.RawMessage `json:"detail"`
}

// maxEvents is the most events one GET answers; JSON lines, for export,
// may ask for more.
const (
	maxEvents      = 1000
	maxEventsLines = 100000
)

// jsonLines is the media type of an export: one event per line.
const jsonLines = "application/x-ndjson"

// isAdmin reports whether the request's key is an admin key.
func (s *Server) isAdmin(r *http.Request) (bool, error) {
	k, err := s.mgr.Key(r.Context(), keyID(r))
	if err != nil {
		return false, err
	}
	return k.Role == sandbox.RoleAdmin, nil
}

func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	if s.audit == nil {
		e2bapi.Write(w, s.logger, noAudit())
		return
	}
	q := r.URL.Query()
	lines := q.Get("format") == "jsonl" || strings.Contains(r.Header.Get("Accept"), jsonLines)
	f := audit.Filter{KeyID: q.Get("keyID"), SandboxID: q.Get("sandboxID"), Kind: q.Get("kind")}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			e2bapi.Write(w, s.logger, e2bapi.BadRequestf("since %q: want an RFC 3339 time, e.g. 2026-11-27T10:00:00Z", v))
			return
		}
		f.Since = t
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			e2bapi.Write(w, s.logger, e2bapi.BadRequestf("after %q: want an event's seq (a whole number)", v))
			return
		}
		f.After = n
	}
	switch v := q.Get("order"); v {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		e2bapi.Write(w, s.logger, e2bapi.BadRequestf("order %q: want oldest (the default: the oldest events, oldest first) or newest (the newest, newest first)", v))
		return
	}
	most := maxEvents
	if lines {
		most = maxEventsLines
	}
	f.Limit = 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > most {
			e2bapi.Write(w, s.logger, e2bapi.BadRequestf("limit %q: want 1 to %d", v, most))
			return
		}
		f.Limit = n
	}
	admin, err := s.isAdmin(r)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if !admin {
		if f.KeyID != "" && f.KeyID != keyID(r) {
			e2bapi.Write(w, s.logger, forbidden("a user key reads only its own events: leave keyID out or name this key's id"))
			return
		}
		f.KeyID = keyID(r)
	}
	// What this client just did is in the answer.
	s.audit.Flush()
	// Read and written a chunk at a time: an export of 100,000 events is
	// never held whole, and a client that stops reading holds no
	// connection to the database, only its last chunk (two reviews of
	// issue 22: whole answers in memory; then answers streamed from an
	// open query, eight of which, unread, stalled every API call).
	if lines {
		w.Header().Set("Content-Type", jsonLines)
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	enc := json.NewEncoder(w)
	n := 0
	for remaining := f.Limit; remaining > 0; {
		chunk := f
		chunk.Limit = min(remaining, eventChunk)
		events, err := s.audit.List(r.Context(), chunk)
		if err != nil {
			if n == 0 {
				w.Header().Del("Content-Type")
				e2bapi.Write(w, s.logger, err)
				return
			}
			// Mid-answer: the client sees a cut body.
			s.logger.Warn("events: answer cut", "err", err)
			return
		}
		for _, e := range events {
			if n == 0 {
				w.WriteHeader(http.StatusOK)
				if !lines {
					io.WriteString(w, "[")
				}
			} else if !lines {
				io.WriteString(w, ",")
			}
			n++
			if enc.Encode(eventJSON{Seq: e.Seq, Time: e.Time, KeyID: e.KeyID, SandboxID: e.SandboxID, Kind: e.Kind,
				Action: e.Action, Outcome: e.Outcome, Detail: e.Detail}) != nil {
				return
			}
		}
		if len(events) < chunk.Limit {
			break
		}
		remaining -= len(events)
		if last := events[len(events)-1].Seq; f.Newest {
			f.Before = last
		} else {
			f.After = last
		}
	}
	switch {
	case n == 0 && !lines:
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "[]\n")
	case n == 0:
		w.WriteHeader(http.StatusOK)
	case !lines:
		io.WriteString(w, "]\n")
	}
}

// eventChunk is how many events one read of the store takes.
const eventChunk = 256

// reportedEvent is what a client reports: an MCP tool call it served with
// this key (`hutch mcp` does).
type reportedEvent struct {
	Kind      string         `json:"kind"`
	Action    string         `json:"action"`
	SandboxID string         `json:"sandboxID"`
	Outcome   string         `json:"outcome"`
	Detail    map[string]any `json:"detail"`
}

func (r *reportedEvent) Validate() error {
	switch {
	case r.Kind != audit.KindMCP:
		return e2bapi.BadRequestf("kind %q: clients report only %q events (MCP tool calls); the server records the rest", r.Kind, audit.KindMCP)
	case !validAction(r.Action):
		return e2bapi.BadRequest("action: want a name of 1 to 64 characters of a-z, 0-9, '.', '_' and '-', e.g. tool.call")
	case r.Outcome != "" && r.Outcome != audit.OK && r.Outcome != audit.Error:
		return e2bapi.BadRequestf("outcome %q: want %q or %q", r.Outcome, audit.OK, audit.Error)
	}
	return nil
}

// validAction reports whether a is a reported event's action: a short
// name, nothing a terminal or a page would read as markup.
func validAction(a string) bool {
	if a == "" || len(a) > 64 {
		return false
	}
	for _, c := range a {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// maxReportedDetail bounds a reported event's detail, encoded.
const maxReportedDetail = 16 << 10

func (s *Server) reportEvent(w http.ResponseWriter, r *http.Request) {
	if s.audit == nil {
		e2bapi.Write(w, s.logger, noAudit())
		return
	}
	var ev reportedEvent
	if !s.decode(w, r, &ev, false) {
		return
	}
	if ev.SandboxID != "" {
		// A key reports on its own sandboxes only.
		if _, err := s.mgr.Get(r.Context(), keyID(r), ev.SandboxID); err != nil {
			s.notFound(w, ev.SandboxID, err)
			return
		}
	}
	if b, _ := json.Marshal(ev.Detail); len(b) > maxReportedDetail {
		e2bapi.Write(w, s.logger, e2bapi.BadRequestf("detail: at most %d bytes as JSON", maxReportedDetail))
		return
	}
	detail, _ := audit.JSON(map[string]any(ev.Detail), s.gatewaySecrets.get(ev.SandboxID)).(map[string]any)
	if detail == nil {
		detail = map[string]any{}
	}
	detail["reportedBy"] = "client"
	s.audit.Record(audit.Event{KeyID: keyID(r), SandboxID: ev.SandboxID, Kind: ev.Kind, Action: ev.Action, Outcome: ev.Outcome, Detail: detail})
	w.WriteHeader(http.StatusAccepted)
}

// keyJSON is an API key on the wire; Key, its secret, only in the answer
// that made it.
type keyJSON struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	Role      string     `json:"role"`
	CreatedAt time.Time  `json:"createdAt"`
	RevokedAt *time.Time `json:"revokedAt"`
	Current   bool       `json:"current"`
	Key       string     `json:"key,omitempty"`
}

func toKeyJSON(k sandbox.Key, current string) keyJSON {
	return keyJSON{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Role: string(k.Role), CreatedAt: k.Created, RevokedAt: k.Revoked, Current: k.ID == current}
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	admin, err := s.isAdmin(r)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	var keys []sandbox.Key
	if admin {
		if keys, err = s.mgr.Keys(r.Context()); err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
	} else {
		k, err := s.mgr.Key(r.Context(), keyID(r))
		if err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
		keys = []sandbox.Key{k}
	}
	out := make([]keyJSON, len(keys))
	for i, k := range keys {
		out[i] = toKeyJSON(k, keyID(r))
	}
	writeJSON(w, http.StatusOK, out)
}

// newKey is POST /api-keys' body.
type newKey struct {
	Name string `json:"name"`
	Role string `json:"role"`
}

func (k *newKey) Validate() error {
	if len(k.Name) > 128 {
		return e2bapi.BadRequest("name: at most 128 bytes")
	}
	if k.Role == "" {
		k.Role = string(sandbox.RoleUser)
	}
	if _, err := sandbox.ParseRole(k.Role); err != nil {
		return e2bapi.BadRequestf("role %q: want %q or %q", k.Role, sandbox.RoleUser, sandbox.RoleAdmin)
	}
	return nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	admin, err := s.isAdmin(r)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if !admin {
		e2bapi.Write(w, s.logger, forbidden("only an admin key makes API keys"))
		return
	}
	var req newKey
	if !s.decode(w, r, &req, false) {
		return
	}
	plain, k, err := s.mgr.NewKey(r.Context(), req.Name, sandbox.Role(req.Role))
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	auditNote(r, "apiKeyID", k.ID)
	auditNote(r, "role", req.Role)
	out := toKeyJSON(k, keyID(r))
	out.Key = plain
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("apiKeyID")
	admin, err := s.isAdmin(r)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if !admin && id != keyID(r) {
		// Not "forbidden": a user key does not learn which ids exist.
		e2bapi.Write(w, s.logger, e2bapi.NotFound("API key "+strconv.Quote(id)+" not found"))
		return
	}
	if err := s.mgr.RevokeKey(r.Context(), id); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = e2bapi.NotFound("API key " + strconv.Quote(id) + " not found")
		}
		e2bapi.Write(w, s.logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// noAudit answers /events on a server that keeps no trail.
func noAudit() error {
	return &e2bapi.StatusError{Status: http.StatusNotImplemented, Message: "this server keeps no audit trail (hutch serve --no-audit)"}
}

// forbidden is a 403 with message.
func forbidden(message string) error {
	return &e2bapi.StatusError{Status: http.StatusForbidden, Message: message}
}
