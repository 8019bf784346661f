package platform

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/mcp/httperr"
	"github.com/hutch-sandbox/hutch/sdk"
)

// HTTP serving defaults.
const (
	// MaxBodyBytes bounds one request to /mcp (a file_write's content
	// included).
	MaxBodyBytes = 16 << 20
	// keyCheckTTL is how long a key the server accepted is trusted
	// without asking again; a revoked key stops working within it.
	keyCheckTTL = time.Minute
)

// HTTPOptions configure [NewHTTPHandler].
type HTTPOptions struct {
	// Config reaches `hutch serve`; its APIKey is used only with NoAuth.
	Config sdk.Config
	// NoAuth serves every request with Config.APIKey and no
	// Authorization header: for test suites that cannot send headers.
	// Never on a listener others can reach.
	NoAuth bool
	// IdleTimeout is passed to the tools; see Options.IdleTimeout.
	IdleTimeout time.Duration
	// Version is the server's version.
	Version string
	// Logger logs failures; nil discards.
	Logger *slog.Logger
}

// NewHTTPHandler serves the platform tools over MCP's streamable HTTP
// transport, statelessly: clients of the 2026-07-28 revision and legacy
// (initialize) clients alike, no sessions to lose. Each request must carry
// `Authorization: Bearer <API key>` of the `hutch serve` behind it; the
// tools act with that key, so a caller sees only its own sandboxes. Keys
// are checked with the server (and trusted for a minute). DNS-rebinding
// (Host) and cross-origin (Origin) requests are refused, and bodies are
// bounded. Every such refusal is answered in one shape, a JSON-RPC error
// object with its HTTP status (httperr), whether this package, the MCP
// SDK's auth middleware or its transport refused.
func NewHTTPHandler(opts HTTPOptions) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	keys := &keyring{base: opts.Config, log: opts.Logger, clients: map[string]*keyEntry{}}
	var fixed *sdk.Client
	if opts.NoAuth {
		var err error
		if fixed, err = sdk.NewClient(opts.Config); err != nil {
			return nil, err
		}
	}
	srv := NewServer(Options{
		IdleTimeout: opts.IdleTimeout, Version: opts.Version, Logger: opts.Logger,
		Client: func(ctx context.Context, req *mcp.CallToolRequest) (*sdk.Client, error) {
			if fixed != nil {
				return fixed, nil
			}
			if req.Extra != nil && req.Extra.TokenInfo != nil {
				if c, ok := req.Extra.TokenInfo.Extra["client"].(*sdk.Client); ok {
					return c, nil
				}
			}
			return nil, errors.New("the request carries no API key")
		},
	})
	srv.AddReceivingMiddleware(cancelWithRequest)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		JSONResponse:                 true,
		MaxRequestBodyBytes:          MaxBodyBytes,
		PropagateRequestCancellation: true,
		CrossOriginProtection:        http.NewCrossOriginProtection(),
		Logger:                       opts.Logger,
	})
	calls := &inflight{calls: map[string][]context.CancelFunc{}}
	var out http.Handler = calls.wrap(h)
	if !opts.NoAuth {
		out = auth.RequireBearerToken(keys.verify, &auth.RequireBearerTokenOptions{Scopes: []string{scope}})(out)
	}
	return httperr.Handler(out), nil
}

// requestContextKey carries the context of the HTTP request of a call
// into the tool call (see cancelWithRequest).
type requestContextKey struct{}

// inflight tracks the tool calls in progress, so that a client's
// notifications/cancelled, which comes in an HTTP request of its own, can
// cancel one. The stateless endpoint has no session in which the MCP SDK
// could find it. Calls are known by the caller (its key) and the JSON-RPC
// id; two clients sharing a key and an id in flight at once would both be
// cancelled — ids are per client, so that takes two clients of one key.
type inflight struct {
	mu    sync.Mutex
	calls map[string][]context.CancelFunc
}

// wrap records each request's context in itself, where the tool
// middleware finds it (the MCP SDK keeps a request's values but, for
// legacy clients, not its cancellation), and registers tool calls and
// applies cancellations.
func (f *inflight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
			if err != nil {
				status := http.StatusBadRequest
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					status = http.StatusRequestEntityTooLarge
				}
				httperr.Write(w, status, fmt.Sprintf("request body: %v", err))
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					RequestID json.RawMessage `json:"requestId"`
				} `json:"params"`
			}
			json.Unmarshal(body, &msg)
			caller := ""
			if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
				caller = ti.UserID
			}
			switch {
			case msg.Method == "tools/call" && len(msg.ID) > 0:
				id := caller + "\x00" + string(bytes.TrimSpace(msg.ID))
				f.add(id, cancel)
				defer f.remove(id)
			case msg.Method == "notifications/cancelled" && len(msg.Params.RequestID) > 0:
				f.cancel(caller + "\x00" + string(bytes.TrimSpace(msg.Params.RequestID)))
			}
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, requestContextKey{}, ctx)))
	})
}

func (f *inflight) add(id string, cancel context.CancelFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[id] = append(f.calls[id], cancel)
}

// remove forgets the oldest registration of id; a call's own cancel is
// called by its handler anyway.
func (f *inflight) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.calls[id]; len(c) > 1 {
		f.calls[id] = c[1:]
	} else {
		delete(f.calls, id)
	}
}

func (f *inflight) cancel(id string) {
	f.mu.Lock()
	calls := f.calls[id]
	f.mu.Unlock()
	for _, c := range calls {
		c()
	}
}

// cancelWithRequest ends a call's work when the HTTP request that carries
// it ends — a client that aborts or disconnects: on the stateless endpoint
// no answer can reach it any more (no session, no stream to resume), so
// the disconnect is the cancellation, as the 2026-07-28 revision says for
// every client — or when the client cancels it (see inflight).
func cancelWithRequest(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		rc, ok := ctx.Value(requestContextKey{}).(context.Context)
		if !ok {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(rc, cancel)
		defer stop()
		return next(ctx, method, req)
	}
}

// scope is the one scope Hutch's tokens carry.
const scope = "hutch"

// keyring keeps a client per API key that `hutch serve` accepted.
type keyring struct {
	base    sdk.Config
	log     *slog.Logger
	mu      sync.Mutex
	clients map[string]*keyEntry // by SHA-256 of the key
}

type keyEntry struct {
	client  *sdk.Client
	checked time.Time
}

// verify accepts a bearer token that `hutch serve` accepts as an API key.
func (k *keyring) verify(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	sum := sha256.Sum256([]byte(token))
	id := hex.EncodeToString(sum[:])
	k.mu.Lock()
	e := k.clients[id]
	k.mu.Unlock()
	if e == nil || time.Since(e.checked) > keyCheckTTL {
		cfg := k.base
		cfg.APIKey = token
		c, err := sdk.NewClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		// Any authenticated call will do: the first page of one sandbox.
		if _, err := c.List(sdk.ListOptions{Limit: 1}).NextItems(ctx); err != nil {
			if errors.Is(err, sdk.ErrAuthentication) {
				k.mu.Lock()
				delete(k.clients, id)
				k.mu.Unlock()
				return nil, fmt.Errorf("%w: hutch serve refused the API key", auth.ErrInvalidToken)
			}
			// The caller is not authenticated yet: no details of the
			// backend in the answer, only in the log.
			k.log.Warn("checking an API key with hutch serve", "err", err)
			return nil, errors.New("cannot check the API key: hutch serve did not answer")
		}
		e = &keyEntry{client: c, checked: time.Now()}
		k.mu.Lock()
		k.clients[id] = e
		k.mu.Unlock()
	}
	return &auth.TokenInfo{
		Scopes: []string{scope}, UserID: id[:32], Expiration: e.checked.Add(keyCheckTTL),
		Extra: map[string]any{"client": e.client},
	}, nil
}
