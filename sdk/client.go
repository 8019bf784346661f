package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Defaults of a [Config].
const (
	// DefaultAPIURL is the control plane used when neither an API URL nor
	// a domain is configured: a local `hutch serve`.
	DefaultAPIURL = "http://127.0.0.1:3000"
	// DefaultRequestTimeout bounds each control-plane call and each unary
	// envd call, as in E2B's SDKs.
	DefaultRequestTimeout = 60 * time.Second
	// EnvdPort is the port of the daemon inside every sandbox.
	EnvdPort = 49983
	// userAgent identifies this SDK to servers.
	userAgent = "hutch-go-sdk/1"
)

// Config says how to reach the control plane and the sandboxes. The zero
// value reads everything from the environment (see the package
// documentation).
type Config struct {
	// APIKey authenticates control-plane calls (X-API-KEY).
	APIKey string
	// APIURL is the control plane's base URL, e.g. http://127.0.0.1:3000.
	APIURL string
	// SandboxURL is the base URL of sandbox (envd) traffic; requests are
	// routed to a sandbox by headers.
	SandboxURL string
	// VolumeAPIURL is the base URL of the volume content API; empty means
	// APIURL (`hutch serve` answers it on the API's listener).
	VolumeAPIURL string
	// Domain is the sandbox domain, as E2B's SDKs use it: the API is at
	// https://api.<Domain> and sandboxes at https://<port>-<id>.<Domain>.
	Domain string
	// RequestTimeout bounds each control-plane call and each unary envd
	// call; 0 means [DefaultRequestTimeout], negative means none. Streams
	// (commands, terminals, watches) have their own timeouts.
	RequestTimeout time.Duration
	// Headers are added to every control-plane request.
	Headers http.Header
	// HTTPClient sends every request; nil uses a client of this package
	// with pooled keep-alive connections.
	HTTPClient *http.Client
}

// resolved fills in a Config from the environment and defaults. It never
// modifies c.
func (c Config) resolved() Config {
	env := func(cur, hutch, e2b string) string {
		if cur != "" {
			return cur
		}
		if v := os.Getenv(hutch); v != "" {
			return v
		}
		return os.Getenv(e2b)
	}
	c.APIKey = env(c.APIKey, "HUTCH_API_KEY", "E2B_API_KEY")
	c.APIURL = env(c.APIURL, "HUTCH_API_URL", "E2B_API_URL")
	c.SandboxURL = env(c.SandboxURL, "HUTCH_SANDBOX_URL", "E2B_SANDBOX_URL")
	c.Domain = env(c.Domain, "HUTCH_DOMAIN", "E2B_DOMAIN")
	c.VolumeAPIURL = env(c.VolumeAPIURL, "HUTCH_VOLUME_API_URL", "E2B_VOLUME_API_URL")
	if c.APIURL == "" {
		if c.Domain != "" {
			c.APIURL = "https://api." + c.Domain
		} else {
			c.APIURL = DefaultAPIURL
		}
	}
	if c.SandboxURL == "" && c.Domain == "" {
		// `hutch serve` routes sandbox traffic on the API's listener.
		c.SandboxURL = c.APIURL
	}
	c.APIURL = strings.TrimRight(c.APIURL, "/")
	c.SandboxURL = strings.TrimRight(c.SandboxURL, "/")
	if c.VolumeAPIURL == "" {
		c.VolumeAPIURL = c.APIURL
	}
	c.VolumeAPIURL = strings.TrimRight(c.VolumeAPIURL, "/")
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = defaultHTTPClient()
	}
	return c
}

// defaultHTTPClient pools connections generously: over plain HTTP/1.1 every
// open stream (a background command, a terminal, a watch) holds one.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return &http.Client{Transport: t}
}

// Client talks to one control plane. It is safe for concurrent use; make
// one and share it.
type Client struct {
	cfg Config
}

// NewClient returns a client for cfg, completed from the environment. It
// fails when no API key is configured anywhere, or a URL does not parse.
func NewClient(cfg Config) (*Client, error) {
	cfg = cfg.resolved()
	if cfg.APIKey == "" {
		return nil, &Error{Op: "configure client", Kind: ErrAuthentication,
			Message: "no API key: set Config.APIKey, HUTCH_API_KEY or E2B_API_KEY"}
	}
	for _, u := range []string{cfg.APIURL, cfg.SandboxURL} {
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, &Error{Op: "configure client", Kind: ErrInvalidArgument, Message: fmt.Sprintf("%q is not an http(s) URL", u)}
		}
	}
	return &Client{cfg: cfg}, nil
}

// Config returns the client's configuration, with the environment and
// defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// requestContext bounds ctx by the request timeout.
func (c *Client) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.cfg.RequestTimeout < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// api makes one control-plane call: it sends in (if not nil) as JSON,
// checks the status is one of ok, and decodes the body into out (if not
// nil). It returns the response's headers.
func (c *Client) api(ctx context.Context, op, method, path string, query url.Values, in, out any, ok ...int) (http.Header, error) {
	return c.apiAs(ctx, "X-API-KEY", op, method, path, query, in, out, ok...)
}

// apiAs is api with the API key sent in header keyHeader: OpenSandbox's
// lifecycle API, which hutch serve also answers, reads it from
// OPEN-SANDBOX-API-KEY.
func (c *Client) apiAs(ctx context.Context, keyHeader, op, method, path string, query url.Values, in, out any, ok ...int) (http.Header, error) {
	ctx, cancel := c.requestContext(ctx)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, &Error{Op: op, Kind: ErrInvalidArgument, Err: err}
		}
		body = bytes.NewReader(b)
	}
	u := c.cfg.APIURL + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, &Error{Op: op, Kind: ErrInvalidArgument, Err: err}
	}
	for k, v := range c.cfg.Headers {
		req.Header[k] = v
	}
	req.Header.Set(keyHeader, c.cfg.APIKey)
	req.Header.Set("User-Agent", userAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, transportError(op, err)
	}
	defer resp.Body.Close()
	good := false
	for _, s := range ok {
		good = good || resp.StatusCode == s
	}
	if !good {
		return nil, httpError(op, resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, transportError(op, err)
			}
			return nil, &Error{Op: op, Message: "malformed response: " + err.Error(), Err: err}
		}
	}
	return resp.Header, nil
}
