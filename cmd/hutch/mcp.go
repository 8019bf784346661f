package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/mcp/platform"
	"github.com/hutch-sandbox/hutch/internal/version"
	"github.com/hutch-sandbox/hutch/sdk"
)

func newMCPCmd(g *globals) *cobra.Command {
	var (
		transport string
		listen    string
		noAuth    bool
		idle      time.Duration
		verbose   bool
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve Hutch to MCP clients: tools to create sandboxes, run commands and edit files",
		Long: `Mcp is an MCP server whose tools drive a hutch serve: sandbox_create,
command_run, file_read, file_edit and the rest (see docs/mcp.md).

With --transport stdio (the default) it speaks MCP on standard input and
output, acting with one API key (--api-key, HUTCH_API_KEY, E2B_API_KEY or
DATA_DIR/api-key), for clients that start it:

  claude mcp add --transport stdio hutch -- hutch mcp

With --transport http it serves streamable HTTP at /mcp on --listen, for
clients of both protocol eras (2026-07-28 and 2025-11-25); every request
must carry "Authorization: Bearer <API key>" of the hutch serve, and the
tools act with that key, so each key sees only its own sandboxes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelDebug
			}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			cfg, keyErr := g.remoteConfig()
			switch transport {
			case "stdio":
				if keyErr != nil {
					return keyErr
				}
				return serveMCPStdio(cmd.Context(), cfg, idle, logger)
			case "http":
				if noAuth {
					if keyErr != nil {
						return keyErr
					}
					if !loopback(listen) {
						return fmt.Errorf("--insecure-no-auth serves anyone who can connect: only on a loopback address, not %s", listen)
					}
				}
				return serveMCPHTTP(cmd.Context(), cfg, listen, noAuth, idle, logger)
			}
			return fmt.Errorf("--transport must be stdio or http, not %q", transport)
		},
	}
	cmd.AddCommand(newMCPGatewayCmd())
	f := cmd.Flags()
	f.StringVar(&transport, "transport", "stdio", "stdio or http")
	f.StringVar(&listen, "listen", "127.0.0.1:3001", "address of the HTTP listener (--transport http)")
	f.BoolVar(&noAuth, "insecure-no-auth", false, "HTTP without Authorization, acting with --api-key for everyone (loopback only; for test suites)")
	f.DurationVar(&idle, "idle-timeout", 0, "kill sandboxes made through MCP this long after the last tool call on them (0: only their own timeout)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log every request on stderr")
	cmd.AddCommand(newMCPWrapCmd(g))
	return cmd
}

// serverVersion is this build's version for MCP's serverInfo: the
// package's or Go's module version, "dev" for a plain build.
func serverVersion() string {
	if v := version.Get().Version; v != "(devel)" && v != "unknown" {
		return v
	}
	return "dev"
}

func serveMCPStdio(ctx context.Context, cfg sdk.Config, idle time.Duration, logger *slog.Logger) error {
	c, err := sdk.NewClient(cfg)
	if err != nil {
		return err
	}
	srv := platform.NewServer(platform.Options{
		IdleTimeout: idle, Version: serverVersion(), Logger: logger,
		Client: func(context.Context, *mcp.CallToolRequest) (*sdk.Client, error) { return c, nil },
	})
	err = srv.Run(ctx, &mcp.StdioTransport{})
	if errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed) {
		return nil // the client went away: a normal end
	}
	return err
}

func serveMCPHTTP(ctx context.Context, cfg sdk.Config, listen string, noAuth bool, idle time.Duration, logger *slog.Logger) error {
	h, err := platform.NewHTTPHandler(platform.HTTPOptions{Config: cfg, NoAuth: noAuth, IdleTimeout: idle, Version: serverVersion(), Logger: logger})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
	fmt.Fprintf(os.Stderr, "hutch mcp: serving MCP at http://%s/mcp (hutch serve at %s)\n", ln.Addr(), cfg.APIURL)
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// loopback reports whether a listen address is on a loopback interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
