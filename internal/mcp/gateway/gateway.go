package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/mcp/httperr"
)

// Defaults of a gateway in a sandbox, as E2B's SDK expects them.
const (
	// Port is the gateway's port; E2B's getMcpUrl() is this port's host
	// plus Path.
	Port = 50005
	// Path is the MCP endpoint.
	Path = "/mcp"
	// Workspace is the root offered to servers that ask for roots.
	Workspace = "/home/user"
)

// Options configure a gateway.
type Options struct {
	// Workspace is the directory offered as the one root; default
	// Workspace.
	Workspace string
	// Logger logs; nil discards.
	Logger *slog.Logger
	// Stderr receives the servers' standard error, prefixed by their
	// names; nil discards.
	Stderr io.Writer
	// DownloadCheck reports whether servers that download at start can;
	// nil dials registry.npmjs.org:443.
	DownloadCheck func(ctx context.Context) error
	// Ready, if set, is told (and closed) once Serve serves: Launch's
	// pipe (ReadyFD).
	Ready io.WriteCloser
	// Listener, if set, is what Serve serves on (Launch's socket, through
	// Supervise), in place of listening on its address.
	Listener net.Listener
}

// Gateway aggregates running upstream servers into one MCP server.
type Gateway struct {
	srv    *mcp.Server
	ups    []*upstream
	cancel context.CancelFunc
	log    *slog.Logger

	// mu guards names, the exposed names and the server that has each: a
	// server that comes up after the gateway started registers then.
	mu    sync.Mutex
	names map[string]string
}

// ServerStatus is one server's state, for /health.
type ServerStatus struct {
	Name      string   `json:"name"`
	Running   bool     `json:"running"`
	Restarts  int      `json:"restarts"`
	LastError string   `json:"lastError,omitempty"`
	Tools     []string `json:"tools,omitempty"`
}

// New starts every server, lists what each offers, and returns the
// gateway serving all of it. A server that cannot start does not stop the
// others: it is tried again with backoff, /health reports it down with the
// reason, and calls of its tools (by its prefix) fail as tool errors
// saying why, until it starts and its tools are served. New fails if a
// server needs a download the sandbox cannot make, or offers a name
// another one already took; nothing is left running then.
func New(ctx context.Context, servers []*Server, opts Options) (_ *Gateway, err error) {
	if opts.Workspace == "" {
		opts.Workspace = Workspace
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if opts.DownloadCheck == nil {
		opts.DownloadCheck = dialRegistry
	}
	for _, s := range servers {
		if s.Download == "" {
			continue
		}
		if err := opts.DownloadCheck(ctx); err != nil {
			return nil, fmt.Errorf("MCP server %s needs a download (%s) but the sandbox cannot reach the internet (%v): create the sandbox with internet access, or use a template that has the server installed", s.Name, s.Download, err)
		}
	}
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	g := &Gateway{cancel: cancel, log: opts.Logger, names: map[string]string{},
		srv: mcp.NewServer(&mcp.Implementation{Name: "hutch-mcp-gateway", Title: "Hutch MCP gateway", Version: "1"}, &mcp.ServerOptions{Logger: opts.Logger})}
	g.srv.AddReceivingMiddleware(g.downTools)
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	for _, s := range servers {
		u := &upstream{srv: s, workspace: opts.Workspace, log: opts.Logger, stderr: opts.Stderr}
		g.ups = append(g.ups, u)
		cs, err := u.start(ctx)
		if err != nil {
			u.mu.Lock()
			u.lastErr = err
			u.mu.Unlock()
			g.log.Warn("MCP server did not start; trying again", "server", s.Name, "err", err)
			go g.startLater(life, u)
			continue
		}
		if err := g.adopt(ctx, u, cs); err != nil {
			return nil, err
		}
		go u.keep(life, cs)
	}
	return g, nil
}

// adopt registers a started server's tools, prompts and resources and
// makes its session the live one.
func (g *Gateway) adopt(ctx context.Context, u *upstream, cs *mcp.ClientSession) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.register(ctx, u, cs, g.names); err != nil {
		cs.Close()
		return err
	}
	u.mu.Lock()
	u.session, u.registered = cs, true
	u.mu.Unlock()
	return nil
}

// startLater tries to start a server that did not start with the gateway,
// with backoff, until it starts (its tools are then served) or ctx ends.
func (g *Gateway) startLater(ctx context.Context, u *upstream) {
	backoff := minBackoff
	var cs *mcp.ClientSession
	started := retry(ctx, &backoff, func() bool {
		var err error
		if cs, err = u.start(ctx); err == nil {
			if err = g.adopt(ctx, u, cs); err == nil {
				return true
			}
		}
		u.mu.Lock()
		u.lastErr = err
		u.restarts++
		u.mu.Unlock()
		if ctx.Err() == nil {
			g.log.Warn("MCP server failed to start", "server", u.srv.Name, "err", err, "in", backoff)
		}
		return false
	})
	if started {
		g.log.Info("MCP server started", "server", u.srv.Name)
		u.keep(ctx, cs)
	}
}

// downTools answers a call of a tool of a server that has not started yet
// (whose tools are not known) with a tool error saying why, rather than
// the protocol's "unknown tool".
func (g *Gateway) downTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/call" {
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
				prefix, _, found := strings.Cut(p.Name, Separator)
				for _, u := range g.ups {
					if !found || u.srv.Name != prefix {
						continue
					}
					u.mu.Lock()
					registered, lastErr := u.registered, u.lastErr
					u.mu.Unlock()
					if !registered {
						return toolError(fmt.Errorf("MCP server %s has not started (%v); it is being tried again, see GET /health", u.srv.Name, lastErr)), nil
					}
				}
			}
		}
		return next(ctx, method, req)
	}
}

// dialRegistry checks that npm's registry can be reached.
func dialRegistry(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", "registry.npmjs.org:443")
	if err != nil {
		return err
	}
	return c.Close()
}

// claim records an exposed name, refusing one taken by another server.
func claim(names map[string]string, kind, name, server string) error {
	if other, taken := names[kind+" "+name]; taken {
		return fmt.Errorf("%s %q of server %s collides with server %s's: rename one of the servers", kind, name, server, other)
	}
	names[kind+" "+name] = server
	return nil
}

// register adds u's tools, prompts and resources to the gateway.
func (g *Gateway) register(ctx context.Context, u *upstream, cs *mcp.ClientSession, names map[string]string) error {
	caps := cs.InitializeResult().Capabilities
	if caps != nil && caps.Tools != nil {
		for t, err := range cs.Tools(ctx, nil) {
			if err != nil {
				return fmt.Errorf("list tools of %s: %w", u.srv.Name, err)
			}
			if !u.srv.exposes(t.Name) {
				continue
			}
			name := u.srv.Name + Separator + t.Name
			if err := claim(names, "tool", name, u.srv.Name); err != nil {
				return err
			}
			tool := *t
			tool.Name, tool.Meta = name, nil
			if tool.InputSchema == nil {
				tool.InputSchema = map[string]any{"type": "object"}
			}
			orig := t.Name
			g.srv.AddTool(&tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				cs, err := u.get()
				if err != nil {
					return toolError(err), nil
				}
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: orig, Arguments: req.Params.Arguments})
				var wire *jsonrpc.Error
				switch {
				case errors.As(err, &wire):
					return nil, err // the server's own protocol error, passed on
				case err != nil && ctx.Err() == nil:
					return toolError(fmt.Errorf("MCP server %s failed during the call (%v); it is restarted if it crashed", u.srv.Name, err)), nil
				case err != nil:
					return nil, err
				}
				// The upstream's _meta (its serverInfo, its era's fields)
				// is not this server's; the SDK stamps our own.
				res.Meta = nil
				return res, nil
			})
		}
	}
	if caps != nil && caps.Prompts != nil {
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				return fmt.Errorf("list prompts of %s: %w", u.srv.Name, err)
			}
			name := u.srv.Name + Separator + p.Name
			if err := claim(names, "prompt", name, u.srv.Name); err != nil {
				return err
			}
			prompt := *p
			prompt.Name, prompt.Meta = name, nil
			orig := p.Name
			g.srv.AddPrompt(&prompt, func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
				cs, err := u.get()
				if err != nil {
					return nil, err
				}
				res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: orig, Arguments: req.Params.Arguments})
				if res != nil {
					res.Meta = nil
				}
				return res, err
			})
		}
	}
	if caps != nil && caps.Resources != nil {
		read := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			cs, err := u.get()
			if err != nil {
				return nil, err
			}
			res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI})
			if res != nil {
				res.Meta = nil
			}
			return res, err
		}
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				return fmt.Errorf("list resources of %s: %w", u.srv.Name, err)
			}
			// URIs are the server's own and cannot be renamed: when two
			// servers offer one (two instances of one server), the first
			// keeps it.
			if other, taken := names["resource "+r.URI]; taken {
				g.log.Warn("resource offered by two servers: the first keeps it", "uri", r.URI, "server", u.srv.Name, "kept", other)
				continue
			}
			names["resource "+r.URI] = u.srv.Name
			res := *r
			res.Meta = nil
			if res.Name != "" {
				res.Name = u.srv.Name + Separator + res.Name
			}
			g.srv.AddResource(&res, read)
		}
		for t, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				return fmt.Errorf("list resource templates of %s: %w", u.srv.Name, err)
			}
			if other, taken := names["template "+t.URITemplate]; taken {
				g.log.Warn("resource template offered by two servers: the first keeps it", "uri", t.URITemplate, "server", u.srv.Name, "kept", other)
				continue
			}
			names["template "+t.URITemplate] = u.srv.Name
			tpl := *t
			tpl.Meta = nil
			tpl.Name = u.srv.Name + Separator + tpl.Name
			g.srv.AddResourceTemplate(&tpl, read)
		}
	}
	return nil
}

func toolError(err error) *mcp.CallToolResult {
	var r mcp.CallToolResult
	r.SetError(err)
	return &r
}

// Status reports every server's state and tools.
func (g *Gateway) Status(ctx context.Context) []ServerStatus {
	out := make([]ServerStatus, 0, len(g.ups))
	for _, u := range g.ups {
		out = append(out, u.status())
	}
	return out
}

// Tools lists the exposed tool names.
func (g *Gateway) Tools(ctx context.Context) []string {
	ct, st := mcp.NewInMemoryTransports()
	if _, err := g.srv.Connect(ctx, st, nil); err != nil {
		return nil
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "self"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		return nil
	}
	defer cs.Close()
	var names []string
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			break
		}
		names = append(names, t.Name)
	}
	return names
}

// Handler serves the gateway at Path over streamable HTTP, both protocol
// eras, to requests bearing token, and GET /health.
func (g *Gateway) Handler(token string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.srv }, &mcp.StreamableHTTPOptions{
		Stateless: true,
		// The gateway is reached through Hutch's proxy, which connects from
		// loopback with the public host name: the bearer token, not the
		// Host header, is what keeps others out.
		DisableLocalhostProtection:   true,
		PropagateRequestCancellation: true,
		Logger:                       g.log,
	})
	mux := http.NewServeMux()
	// One shape for every refusal at Path: a JSON-RPC error object with
	// its HTTP status (httperr), the bearer check's and the MCP SDK's.
	mux.Handle(Path, httperr.Handler(bearer(token, h)))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		if !validBearer(r, token) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"servers": g.Status(r.Context())})
	})
	return mux
}

func validBearer(r *http.Request, token string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// bearer refuses requests without `Authorization: Bearer <token>`.
func bearer(token string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !validBearer(r, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-gateway"`)
			httperr.Write(w, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer <the gateway token>")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Close stops every server.
func (g *Gateway) Close() {
	g.cancel()
	for _, u := range g.ups {
		u.close()
	}
}
