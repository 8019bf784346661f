package server

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// logEntry is E2B's SandboxLogEntry.
type logEntry struct {
	Timestamp e2bapi.Time       `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// legacyLog is E2B's SandboxLog: one plain line.
type legacyLog struct {
	Timestamp e2bapi.Time `json:"timestamp"`
	Line      string      `json:"line"`
}

// logs answers GET /v2/sandboxes/{id}/logs?cursor=<unix ms>&limit=&direction=
// with {"logs": [SandboxLogEntry]}.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	q, err := logQuery(r, "cursor")
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	switch d := r.URL.Query().Get("direction"); d {
	case "", "forward":
	case "backward":
		q.Backward = true
	default:
		e2bapi.Write(w, s.logger, e2bapi.BadRequest(fmt.Sprintf("direction must be forward or backward, got %q", d)))
		return
	}
	entries, err := s.mgr.Logs(r.Context(), keyID(r), r.PathValue("id"), q)
	if err != nil {
		s.notFound(w, r.PathValue("id"), err)
		return
	}
	out := struct {
		Logs []logEntry `json:"logs"`
	}{Logs: make([]logEntry, 0, len(entries))}
	for _, e := range entries {
		out.Logs = append(out.Logs, entryJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// legacyLogs answers GET /sandboxes/{id}/logs?start=<unix ms>&limit= with
// {"logs": [SandboxLog], "logEntries": [SandboxLogEntry]}.
func (s *Server) legacyLogs(w http.ResponseWriter, r *http.Request) {
	q, err := logQuery(r, "start")
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	entries, err := s.mgr.Logs(r.Context(), keyID(r), r.PathValue("id"), q)
	if err != nil {
		s.notFound(w, r.PathValue("id"), err)
		return
	}
	out := struct {
		Logs       []legacyLog `json:"logs"`
		LogEntries []logEntry  `json:"logEntries"`
	}{Logs: []legacyLog{}, LogEntries: []logEntry{}}
	for _, e := range entries {
		out.Logs = append(out.Logs, legacyLog{Timestamp: e2bapi.Time(e.Time), Line: e.Message})
		out.LogEntries = append(out.LogEntries, entryJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func entryJSON(e sandbox.LogEntry) logEntry {
	f := e.Fields
	if f == nil {
		f = map[string]string{}
	}
	return logEntry{Timestamp: e2bapi.Time(e.Time), Level: e.Level, Message: e.Message, Fields: f}
}

// logQuery reads the cursor parameter (Unix milliseconds) and limit.
func logQuery(r *http.Request, cursorParam string) (sandbox.LogQuery, error) {
	var q sandbox.LogQuery
	if v := r.URL.Query().Get(cursorParam); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return q, e2bapi.BadRequest(fmt.Sprintf("%s must be a Unix time in milliseconds, got %q", cursorParam, v))
		}
		q.Cursor = time.UnixMilli(ms)
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return q, e2bapi.BadRequest(fmt.Sprintf("limit must be a non-negative integer, got %q", v))
		}
		q.Limit = n
	}
	return q, nil
}
