package server

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/respstatus"
)

// The audit trail of REST calls: every call that changes something is
// recorded once it is answered, with the key that made it (authed fills it
// in), the sandbox it concerned and what its handler noted (auditNote).
// Calls to sandboxes' envd and MCP gateways are recorded by the edge
// (auditedge.go).

// auditRoutes names the actions of the API's changing routes; a changing
// route missing here is recorded under its pattern.
var auditRoutes = map[string]string{
	"POST /v2/sandboxes":                               "sandbox.create",
	"POST /sandboxes":                                  "sandbox.create",
	"DELETE /sandboxes/{id}":                           "sandbox.kill",
	"POST /sandboxes/{id}/timeout":                     "sandbox.timeout",
	"POST /sandboxes/{id}/refreshes":                   "sandbox.refresh",
	"POST /v2/sandboxes/{id}/connect":                  "sandbox.connect",
	"POST /sandboxes/{id}/connect":                     "sandbox.connect",
	"POST /sandboxes/{id}/pause":                       "sandbox.pause",
	"POST /sandboxes/{id}/resume":                      "sandbox.resume",
	"POST /sandboxes/{id}/fork":                        "sandbox.fork",
	"POST /sandboxes/{id}/snapshots":                   "snapshot.create",
	"PUT /sandboxes/{id}/network":                      "network.update",
	"POST /v3/templates":                               "template.create",
	"POST /v2/templates/{templateID}/builds/{buildID}": "template.build",
	"PUT /templates/files/{hash}":                      "template.upload",
	"POST /templates/tags":                             "template.tag",
	"DELETE /templates/tags":                           "template.untag",
	"DELETE /templates/{templateID}":                   "template.delete",
	"POST /volumes":                                    "volume.create",
	"DELETE /volumes/{volumeID}":                       "volume.delete",
	"POST /volumecontent/{volumeID}/dir":               "file.mkdir",
	"PATCH /volumecontent/{volumeID}/path":             "file.update",
	"DELETE /volumecontent/{volumeID}/path":            "file.delete",
	"PUT /volumecontent/{volumeID}/file":               "file.write",
	"POST /api-keys":                                   "key.create",
	"DELETE /api-keys/{apiKeyID}":                      "key.revoke",
	"POST /console/session":                            "console.signin",
	// OpenSandbox's lifecycle API: the same actions under their names.
	"POST /v1/sandboxes":                       "sandbox.create",
	"DELETE /v1/sandboxes/{id}":                "sandbox.kill",
	"POST /v1/sandboxes/{id}/renew-expiration": "sandbox.timeout",
	"POST /v1/sandboxes/{id}/pause":            "sandbox.pause",
	"POST /v1/sandboxes/{id}/resume":           "sandbox.resume",
	"PATCH /v1/sandboxes/{id}/metadata":        "sandbox.metadata",
	"POST /v1/sandboxes/{id}/snapshots":        "snapshot.create",
	"DELETE /v1/snapshots/{snapshotId}":        "snapshot.delete",
	"DELETE /console/session":                  "console.signout",
}

// notAudited are changing routes that are not actions of their own.
var notAudited = map[string]bool{
	// What a client reports is recorded by the handler itself.
	"POST /events": true,
	// The OpenSandbox SDKs' own create timings, kept nowhere.
	"POST /v1/metrics/events": true,
}

// auditAction is the kind and action of pattern's calls, false for routes
// that change nothing.
func auditAction(pattern string) (kind, action string, ok bool) {
	method, _, found := strings.Cut(pattern, " ")
	if !found || method == http.MethodGet || method == http.MethodHead || notAudited[pattern] {
		return "", "", false
	}
	action, ok = auditRoutes[pattern]
	if !ok {
		action = pattern
	}
	switch {
	case strings.HasPrefix(action, "network."):
		kind = audit.KindNetwork
	case strings.HasPrefix(action, "file."):
		kind = audit.KindFile
	default:
		kind = audit.KindAPI
	}
	return kind, action, true
}

// auditPending is the event of a call being answered: authed and the
// handler fill it in.
type auditPending struct {
	keyID, sandboxID string
	detail           map[string]any
	// authenticated is set once the call proved who makes it (a key, a
	// volume's token, an upload link's signature). Calls that did not
	// are not recorded: anyone could fill the trail with them (review
	// of issue 22).
	authenticated bool
}

// maxAuditID is the most of an id from a path the trail keeps: ids are
// short, and a path is whatever a client sent.
const maxAuditID = 128

// clip bounds a client's string for the trail.
func clip(s string) string {
	if len(s) > maxAuditID {
		return s[:maxAuditID] + "…"
	}
	return s
}

type auditCtx struct{}

// audited records pattern's calls, when they change something.
func (s *Server) audited(pattern string, h http.HandlerFunc) http.HandlerFunc {
	kind, action, ok := auditAction(pattern)
	if !ok || s.audit == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		p := &auditPending{detail: map[string]any{}}
		if id := r.PathValue("id"); id != "" {
			p.sandboxID = clip(id)
		}
		for _, name := range []string{"templateID", "volumeID", "apiKeyID", "buildID"} {
			if v := r.PathValue(name); v != "" {
				p.detail[name] = clip(v)
			}
		}
		if kind == audit.KindFile {
			p.detail["path"] = clip(r.URL.Query().Get("path"))
		}
		start := time.Now()
		sw := &respstatus.Writer{ResponseWriter: w}
		h(sw, r.WithContext(context.WithValue(r.Context(), auditCtx{}, p)))
		if !p.authenticated {
			return
		}
		status := sw.Status
		if status == 0 {
			status = http.StatusOK
		}
		p.detail["status"] = status
		p.detail["durationMs"] = time.Since(start).Milliseconds()
		outcome := audit.OK
		if status >= 400 {
			outcome = audit.Error
		}
		s.audit.Record(audit.Event{KeyID: p.keyID, SandboxID: p.sandboxID, Kind: kind, Action: action, Outcome: outcome, Detail: p.detail})
	}
}

// auditKey sets the key of r's pending event: the call is authenticated.
func auditKey(r *http.Request, keyID string) {
	if p, _ := r.Context().Value(auditCtx{}).(*auditPending); p != nil {
		p.keyID = keyID
		p.authenticated = true
	}
}

// auditSandbox sets the sandbox of r's pending event (a create's, known
// once it is made).
func auditSandbox(r *http.Request, id string) {
	if p, _ := r.Context().Value(auditCtx{}).(*auditPending); p != nil {
		p.sandboxID = id
	}
}

// auditNote adds name: value to the detail of r's pending event. Values
// must be redacted already.
func auditNote(r *http.Request, name string, value any) {
	if p, _ := r.Context().Value(auditCtx{}).(*auditPending); p != nil {
		p.detail[name] = value
	}
}
