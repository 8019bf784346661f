package sdk

import (
	"cmp"
	"context"
	"maps"
	"net/http"
	"time"

	"github.com/hutch-sandbox/hutch/internal/osbapi"
)

// defaultTimeout is a sandbox's life when CreateOptions.Timeout is 0:
// E2B's default, which hutch serve applies to E2B's creates.
const defaultTimeout = 5 * time.Minute

// OpenSandbox's lifecycle API (its specs/sandbox-lifecycle.yml), which
// hutch serve answers next to E2B's: Create uses its create request for
// what E2B's cannot say (an OCI image, resource limits, an entrypoint,
// an egress policy by rules). Its field names live here only.

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
