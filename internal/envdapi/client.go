package envdapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// Client makes the host's own calls to a sandbox's envd, over a transport
// that reaches the sandbox's control socket.
type Client struct {
	http *http.Client
}

// NewClient returns a client whose requests go through rt; the URL's host
// is ignored by rt.
func NewClient(rt http.RoundTripper) *Client {
	return &Client{http: &http.Client{Transport: rt}}
}

// Init is POST /init: it gives envd the sandbox-wide settings.
func (c *Client) Init(ctx context.Context, req InitRequest) error {
	return c.InitAs(ctx, "", req)
}

// InitAs is Init to an envd that has access token token already (one
// restored from a checkpoint: a token, once set, guards /init too).
func (c *Client) InitAs(ctx context.Context, token string, req InitRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return c.do(ctx, "POST", "/init", token, "application/json", body, http.StatusNoContent)
}

// Health is GET /health: nil once envd serves.
func (c *Client) Health(ctx context.Context) error {
	return c.do(ctx, "GET", "/health", "", "", nil, http.StatusNoContent)
}

// WriteFile is POST /files: it writes content to path as user, with
// token when the sandbox has one ("" otherwise).
func (c *Client) WriteFile(ctx context.Context, path, user, token string, content []byte) error {
	q := url.Values{"path": {path}, "username": {user}}
	return c.do(ctx, "POST", "/files?"+q.Encode(), token, "application/octet-stream", content, http.StatusOK)
}

// do makes one request and wants status back; a transport error is
// returned as it is, so callers can tell envd not serving yet.
func (c *Client) do(ctx context.Context, method, target, token, contentType string, body []byte, status int) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://envd"+target, r)
	if err != nil {
		return err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set(HeaderAccessToken, token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		var e Error
		if json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&e) == nil && e.Message != "" {
			return &StatusError{Op: method + " " + req.URL.Path, Status: resp.StatusCode, Message: e.Message}
		}
		return &StatusError{Op: method + " " + req.URL.Path, Status: resp.StatusCode}
	}
	return nil
}

// StatusError is an answer of envd's other than the one a call wants.
type StatusError struct {
	Op      string // "POST /init"
	Status  int
	Message string // envd's, if its body said one
}

func (e *StatusError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("envd %s: %d %s", e.Op, e.Status, e.Message)
	}
	return fmt.Sprintf("envd %s: %d %s", e.Op, e.Status, http.StatusText(e.Status))
}
