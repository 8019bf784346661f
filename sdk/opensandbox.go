package sdk

import (
	"context"
	"maps"
	"net/http"
	"time"
)

// OpenSandbox's lifecycle API (its specs/sandbox-lifecycle.yml), which
// hutch serve answers next to E2B's: Create uses its create request for
// what E2B's cannot say (an OCI image, resource limits, an entrypoint,
// an egress policy by rules). Its field names live here only.

// openSandbox reports whether opts need OpenSandbox's create request.
func (o CreateOptions) openSandbox() bool {
	return o.Image != "" || o.ImageAuth != nil || o.Resources != nil || o.Entrypoint != nil ||
		o.NetworkPolicy != nil || o.Extensions != nil
}

// osbCreateRequest is OpenSandbox's CreateSandboxRequest.
type osbCreateRequest struct {
	Image          osbImage          `json:"image"`
	Timeout        *int32            `json:"timeout,omitempty"`
	ResourceLimits map[string]string `json:"resourceLimits,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	NetworkPolicy  *NetworkPolicy    `json:"networkPolicy,omitempty"`
	Extensions     map[string]string `json:"extensions,omitempty"`
}

type osbImage struct {
	URI  string        `json:"uri"`
	Auth *RegistryAuth `json:"auth,omitempty"`
}

// osbCreateResponse is the part of OpenSandbox's CreateSandboxResponse
// Create reads.
type osbCreateResponse struct {
	ID string `json:"id"`
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
	uri := opts.Image
	if uri == "" {
		uri = opts.Template
	}
	if uri == "" {
		uri = "base"
	}
	req := osbCreateRequest{
		Image:          osbImage{URI: uri, Auth: opts.ImageAuth},
		ResourceLimits: opts.Resources, Env: opts.Envs, Metadata: opts.Metadata,
		Entrypoint: opts.Entrypoint, NetworkPolicy: opts.NetworkPolicy, Extensions: opts.Extensions,
	}
	if opts.Runtime != "" {
		req.Metadata = maps.Clone(opts.Metadata)
		if req.Metadata == nil {
			req.Metadata = map[string]string{}
		}
		req.Metadata[RuntimeMetadata] = opts.Runtime
	}
	if opts.Timeout != 0 {
		t := seconds(opts.Timeout)
		req.Timeout = &t
	}
	var out osbCreateResponse
	if _, err := c.apiAs(ctx, "OPEN-SANDBOX-API-KEY", op, http.MethodPost, "/v1/sandboxes", nil, req, &out, http.StatusAccepted, http.StatusOK, http.StatusCreated); err != nil {
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
