package sdk

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hutch-sandbox/hutch/internal/osbapi"
)

// defaultTimeout is a sandbox's life when CreateOptions.Timeout is 0:
// E2B's default, which hutch serve applies to E2B's creates.
const defaultTimeout = 5 * time.Minute

// OpenSandbox's lifecycle API (its specs/sandbox-lifecycle.yml), which
// hutch serve answers next to E2B's: Create uses its create request for
// what E2B's cannot say (an OCI image, resource limits, an entrypoint,
// an egress policy by rules), and GetOpenSandboxInfo,
// ListOpenSandboxInfo and GetOpenSandboxEndpoint read what E2B's
// answers have no place for. Its field names live here only.

// openSandbox reports whether opts need OpenSandbox's create request.
func (o CreateOptions) openSandbox() bool {
	return o.Image != "" || o.ImageAuth != nil || o.Resources != nil || o.Entrypoint != nil ||
		o.NetworkPolicy != nil || o.Extensions != nil
}

// createOpenSandbox creates a sandbox with OpenSandbox's create request,
// then connects to it for the handle (its envd access token and traffic
// token), without changing its life.
func (c *Client) createOpenSandbox(ctx context.Context, opts CreateOptions) (*Sandbox, error) {
	const op = "create sandbox"
	invalid := func(msg string) error { return &Error{Op: op, Kind: ErrInvalidArgument, Message: msg} }
	switch {
	case opts.Image != "" && opts.Template != "":
		return nil, invalid("Image and Template both name what the sandbox starts from: set one")
	case opts.Network != nil || opts.AllowInternetAccess != nil:
		return nil, invalid("Network and AllowInternetAccess cannot be combined with Image, Resources, Entrypoint, NetworkPolicy or Extensions: use NetworkPolicy")
	case opts.MCP != nil || len(opts.Volumes) > 0:
		return nil, invalid("MCP and Volumes cannot be combined with Image, Resources, Entrypoint, NetworkPolicy or Extensions")
	}
	req := osbapi.CreateSandboxRequest{
		Image:          &osbapi.ImageSpec{URI: cmp.Or(opts.Image, opts.Template, "base")},
		ResourceLimits: opts.Resources, Env: opts.Envs, Metadata: opts.Metadata,
		Entrypoint: opts.Entrypoint, Extensions: opts.Extensions,
	}
	if a := opts.ImageAuth; a != nil {
		req.Image.Auth = &osbapi.ImageAuth{Username: a.Username, Password: a.Password}
	}
	if p := opts.NetworkPolicy; p != nil {
		req.NetworkPolicy = &osbapi.NetworkPolicy{DefaultAction: cmp.Or(p.DefaultAction, "deny")}
		for _, r := range p.Egress {
			req.NetworkPolicy.Egress = append(req.NetworkPolicy.Egress, osbapi.NetworkRule{Action: r.Action, Target: r.Target})
		}
	}
	if opts.Runtime != "" {
		req.Metadata = maps.Clone(opts.Metadata)
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		req.Metadata[RuntimeMetadata] = opts.Runtime
	}
	// 0 is E2B's default here too, not OpenSandbox's (none: 24 hours).
	t := int64(defaultTimeout / time.Second)
	if opts.Timeout != 0 {
		t = int64(seconds(opts.Timeout))
	}
	req.Timeout = &t
	var out osbapi.CreateSandboxResponse
	if _, err := c.apiAs(ctx, osbapi.HeaderAPIKey, op, http.MethodPost, "/v1/sandboxes", nil, req, &out, http.StatusAccepted, http.StatusOK, http.StatusCreated); err != nil {
		return nil, err
	}
	if out.ID == "" {
		return nil, &Error{Op: op, Message: "malformed response: no sandbox id"}
	}
	// Connect extends a life to at least its Timeout: one second asks
	// for nothing.
	sbx, err := c.Connect(ctx, out.ID, ConnectOptions{Timeout: time.Second})
	if err != nil {
		// No handle, no way to reach it: do not leave it running.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		c.Kill(kctx, out.ID)
		return nil, err
	}
	return sbx, nil
}

// OpenSandboxInfo is a sandbox as OpenSandbox's lifecycle API describes
// it: what it was made from as the create named it, and its entrypoint,
// which E2B's description ([SandboxInfo]) has no place for. Sandboxes
// made through E2B's API are described too.
type OpenSandboxInfo struct {
	// ID identifies the sandbox.
	ID string
	// Image is what the sandbox was made from: the OCI image reference
	// or the template name its create gave. Empty for a sandbox made
	// from a snapshot (SnapshotID).
	Image string
	// SnapshotID is the snapshot the sandbox was made from, if it was.
	SnapshotID string
	// State is OpenSandbox's name of its state: "Running" or "Paused".
	State string
	// Reason and Message explain the state when the server does.
	Reason, Message string
	// Metadata are the sandbox's labels (never nil).
	Metadata map[string]string
	// Entrypoint is the command started in the background when the
	// sandbox came up; empty (not nil) for none.
	Entrypoint []string
	// ExpiresAt is when the sandbox will be killed unless renewed; zero
	// for never.
	ExpiresAt time.Time
	// CreatedAt is when it was made.
	CreatedAt time.Time
}

func openSandboxInfoOf(s osbapi.Sandbox) OpenSandboxInfo {
	out := OpenSandboxInfo{ID: s.ID, SnapshotID: s.SnapshotID, State: s.Status.State, Reason: s.Status.Reason,
		Message: s.Status.Message, Metadata: s.Metadata, Entrypoint: s.Entrypoint, CreatedAt: s.CreatedAt}
	if s.Image != nil {
		out.Image = s.Image.URI
	}
	if s.ExpiresAt != nil {
		out.ExpiresAt = *s.ExpiresAt
	}
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if out.Entrypoint == nil {
		out.Entrypoint = []string{}
	}
	return out
}

// GetOpenSandboxInfo describes sandbox id through OpenSandbox's
// lifecycle API (GET /v1/sandboxes/{id}); ErrNotFound if there is none,
// or if the server does not answer that API.
func (c *Client) GetOpenSandboxInfo(ctx context.Context, id string) (*OpenSandboxInfo, error) {
	var s osbapi.Sandbox
	if _, err := c.apiAs(ctx, osbapi.HeaderAPIKey, "get sandbox "+id, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id), nil, nil, &s, http.StatusOK); err != nil {
		return nil, err
	}
	info := openSandboxInfoOf(s)
	return &info, nil
}

// OpenSandboxListOptions filter and page [Client.ListOpenSandboxInfo].
// The zero value asks for the first page of every sandbox, 20 to a
// page.
type OpenSandboxListOptions struct {
	// States keeps sandboxes in these states (OpenSandbox's names,
	// "Running", "Paused"; the server takes any case); empty means all.
	// States Hutch never reports ("Pending", "Terminated") match nothing.
	States []string
	// Metadata keeps sandboxes whose metadata has all these pairs.
	Metadata map[string]string
	// Page is the page to return, from 1; 0 means 1.
	Page int
	// PageSize is the number of sandboxes a page holds; 0 means the
	// server's default (20). hutch serve takes at most 200.
	PageSize int
}

// OpenSandboxPage is one page of a listing, and where it is in it.
type OpenSandboxPage struct {
	// Items are the page's sandboxes (never nil).
	Items []OpenSandboxInfo
	// Page and PageSize are the page's number and size.
	Page, PageSize int
	// TotalItems and TotalPages count the whole listing.
	TotalItems, TotalPages int
	// HasNextPage reports whether a page follows this one.
	HasNextPage bool
}

// ListOpenSandboxInfo returns one page of the sandboxes opts select,
// through OpenSandbox's lifecycle API (GET /v1/sandboxes).
// ErrInvalidArgument when the server refuses a page or page size.
func (c *Client) ListOpenSandboxInfo(ctx context.Context, opts OpenSandboxListOptions) (*OpenSandboxPage, error) {
	q := url.Values{}
	for _, st := range opts.States {
		q.Add("state", st)
	}
	if len(opts.Metadata) > 0 {
		md := url.Values{}
		for k, v := range opts.Metadata {
			md.Set(k, v)
		}
		// The metadata filter is itself a query string, key=value pairs
		// joined by &, sent as one parameter.
		q.Set("metadata", md.Encode())
	}
	if opts.Page > 0 {
		q.Set("page", strconv.Itoa(opts.Page))
	}
	if opts.PageSize > 0 {
		q.Set("pageSize", strconv.Itoa(opts.PageSize))
	}
	var out osbapi.ListSandboxesResponse
	if _, err := c.apiAs(ctx, osbapi.HeaderAPIKey, "list sandboxes", http.MethodGet, "/v1/sandboxes", q, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	p := out.Pagination
	page := &OpenSandboxPage{Items: make([]OpenSandboxInfo, 0, len(out.Items)), Page: p.Page, PageSize: p.PageSize,
		TotalItems: p.TotalItems, TotalPages: p.TotalPages, HasNextPage: p.HasNextPage}
	for _, s := range out.Items {
		page.Items = append(page.Items, openSandboxInfoOf(s))
	}
	return page, nil
}

// OpenSandboxEndpoint says how OpenSandbox's clients reach a port of a
// sandbox.
type OpenSandboxEndpoint struct {
	// Endpoint is the port's address without a scheme, a host and a
	// path: requests go to http(s)://Endpoint/PATH (the scheme of the
	// API URL). hutch serve answers
	// "<host>/v1/sandboxes/<id>/proxy/<port>".
	Endpoint string
	// Headers must be sent with every request to the endpoint: for
	// OpenSandbox's execd (port 44772) X-EXECD-ACCESS-TOKEN, for other
	// ports the sandbox's traffic token when it has one. Never nil.
	Headers map[string]string
	// Origin is the server's OPEN-SANDBOX-ORIGIN header, what backs the
	// sandbox: "template" from hutch serve (no egress sidecar runs in
	// it); empty when the server does not say.
	Origin string
}

// GetOpenSandboxEndpoint returns where port of sandbox id is reached
// through OpenSandbox's lifecycle API (GET
// /v1/sandboxes/{id}/endpoints/{port}); ErrNotFound if there is no such
// sandbox, ErrInvalidArgument for a port outside 1-65535.
func (c *Client) GetOpenSandboxEndpoint(ctx context.Context, id string, port int) (*OpenSandboxEndpoint, error) {
	op := "get endpoint of port " + strconv.Itoa(port) + " of sandbox " + id
	var ep osbapi.Endpoint
	h, err := c.apiAs(ctx, osbapi.HeaderAPIKey, op, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id)+"/endpoints/"+strconv.Itoa(port), nil, nil, &ep, http.StatusOK)
	if err != nil {
		return nil, err
	}
	if ep.Endpoint == "" {
		return nil, &Error{Op: op, Message: "malformed response: no endpoint"}
	}
	if ep.Headers == nil {
		ep.Headers = map[string]string{}
	}
	return &OpenSandboxEndpoint{Endpoint: ep.Endpoint, Headers: ep.Headers, Origin: h.Get(osbapi.HeaderOrigin)}, nil
}
