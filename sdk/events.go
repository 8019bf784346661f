package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Event is one entry of a server's audit trail: what was done, by which
// API key (its id, never its secret) and to which sandbox. Kind is "api",
// "command", "file", "network" or "mcp"; Action names the act
// ("sandbox.create", "command.start", "command.end", "file.write",
// "network.update", "tool.call", …) and Detail says the rest, secrets
// redacted (docs/audit.md).
type Event struct {
	Seq       int64          `json:"seq"`
	Time      time.Time      `json:"time"`
	KeyID     string         `json:"keyID,omitempty"`
	SandboxID string         `json:"sandboxID,omitempty"`
	Kind      string         `json:"kind"`
	Action    string         `json:"action"`
	Outcome   string         `json:"outcome"`
	Detail    map[string]any `json:"detail"`
}

// EventQuery selects events. The zero value is the first 100 events the
// key may read (an admin key every key's, a user key its own).
type EventQuery struct {
	SandboxID, KeyID, Kind string
	// Since keeps events at or after it.
	Since time.Time
	// After keeps events after the one whose Seq it is: a follower's
	// cursor.
	After int64
	// Limit is 1..1000; 0 means 100.
	Limit int
}

// Events returns the events q selects, oldest first.
func (c *Client) Events(ctx context.Context, q EventQuery) ([]Event, error) {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("sandboxID", q.SandboxID)
	set("keyID", q.KeyID)
	set("kind", q.Kind)
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatInt(q.After, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out []Event
	_, err := c.api(ctx, "events", http.MethodGet, "/events", v, nil, &out, http.StatusOK)
	return out, err
}

// ReportEvent adds an event of kind "mcp" to the audit trail under the
// client's key: what an MCP server acting with the key (hutch mcp) did for
// its client. The server redacts its detail like its own events'.
func (c *Client) ReportEvent(ctx context.Context, e Event) error {
	body := map[string]any{"kind": e.Kind, "action": e.Action, "sandboxID": e.SandboxID, "outcome": e.Outcome, "detail": e.Detail}
	_, err := c.api(ctx, "report event", http.MethodPost, "/events", nil, body, nil, http.StatusAccepted)
	return err
}
