package sdk

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// keepaliveInterval asks envd for a keepalive message on a stream that has
// been quiet this many seconds, as E2B's SDKs do, so that idle streams are
// not cut by proxies.
const keepaliveInterval = "50"

// envdClient reaches one sandbox's daemon: the generated Connect clients
// for RPC and plain HTTP for /files and /health.
type envdClient struct {
	c    *Client
	sbx  *Sandbox
	base string // envd's base URL (RPC and REST)
	http *routedDoer
	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
}

func newEnvdClient(c *Client, sbx *Sandbox) *envdClient {
	base := c.cfg.SandboxURL
	if base == "" {
		base = fmt.Sprintf("https://%d-%s.%s", EnvdPort, sbx.ID, sbx.domain())
	}
	d := &routedDoer{client: c.cfg.HTTPClient, id: sbx.ID, token: sbx.EnvdAccessToken}
	return &envdClient{
		c: c, sbx: sbx, base: base, http: d,
		proc: processconnect.NewProcessClient(d, base),
		fs:   filesystemconnect.NewFilesystemClient(d, base),
	}
}

// routedDoer adds the routing headers and the access token to every
// request for one sandbox (spec §1.4, §3.1).
type routedDoer struct {
	client *http.Client
	id     string
	token  string
}

func (d *routedDoer) Do(req *http.Request) (*http.Response, error) {
	req.Header.Set("E2b-Sandbox-Id", d.id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if d.token != "" {
		req.Header.Set(envdapi.HeaderAccessToken, d.token)
	}
	req.Header.Set("User-Agent", userAgent)
	return d.client.Do(req)
}

// basicUser is the Authorization header that selects the sandbox user for
// an RPC: Basic base64("<user>:").
func basicUser(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// rpcRequest wraps msg with the user selection header.
func rpcRequest[T any](msg *T, user string) *connect.Request[T] {
	r := connect.NewRequest(msg)
	if user != "" {
		r.Header().Set("Authorization", basicUser(user))
	}
	return r
}

// streamRequest is rpcRequest for server streams: it also asks for
// keepalives.
func streamRequest[T any](msg *T, user string) *connect.Request[T] {
	r := rpcRequest(msg, user)
	r.Header().Set("Keepalive-Ping-Interval", keepaliveInterval)
	return r
}

// unary runs one unary RPC bounded by the request timeout.
func unary[Req, Res any](ctx context.Context, e *envdClient, op string, call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req, user string) (*Res, error) {
	ctx, cancel := e.c.requestContext(ctx)
	defer cancel()
	resp, err := call(ctx, rpcRequest(msg, user))
	if err != nil {
		return nil, rpcError(op, err)
	}
	return resp.Msg, nil
}

// newRequest makes a plain HTTP request to envd; query is already encoded.
func (e *envdClient) newRequest(ctx context.Context, method, path, query string, body io.Reader) (*http.Request, error) {
	u := e.base + path
	if query != "" {
		u += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, &Error{Op: method + " " + path, Kind: ErrInvalidArgument, Err: err}
	}
	return req, nil
}

// do sends a plain HTTP request with the routing headers.
func (e *envdClient) do(op string, req *http.Request) (*http.Response, error) {
	resp, err := e.http.Do(req)
	if err != nil {
		return nil, transportError(op, err)
	}
	return resp, nil
}
