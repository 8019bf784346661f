package platform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

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
// bounded.
func NewHTTPHandler(opts HTTPOptions) (http.Handler, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	keys := &keyring{base: opts.Config, clients: map[string]*keyEntry{}}
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
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		JSONResponse:                 true,
		MaxRequestBodyBytes:          MaxBodyBytes,
		PropagateRequestCancellation: true,
		CrossOriginProtection:        http.NewCrossOriginProtection(),
		Logger:                       opts.Logger,
	})
	if opts.NoAuth {
		return h, nil
	}
	return auth.RequireBearerToken(keys.verify, &auth.RequireBearerTokenOptions{Scopes: []string{scope}})(h), nil
}

// scope is the one scope Hutch's tokens carry.
const scope = "hutch"

// keyring keeps a client per API key that `hutch serve` accepted.
type keyring struct {
	base    sdk.Config
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
			return nil, fmt.Errorf("check the API key with hutch serve: %w", err)
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
