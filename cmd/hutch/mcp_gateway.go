package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/mcp/catalog"
	"github.com/hutch-sandbox/hutch/internal/mcp/gateway"
)

// gatewayName is the name the mcp-gateway template gives this binary: run
// under it, hutch is `hutch mcp gateway` (what E2B's SDK runs).
const gatewayName = "mcp-gateway"

func newMCPGatewayCmd() *cobra.Command {
	var (
		config           string
		serve, supervise bool
	)
	cmd := &cobra.Command{
		Use:   "gateway --config JSON",
		Short: "Run MCP servers inside a sandbox behind one bearer-protected endpoint (E2B's mcp-gateway)",
		Long: `Gateway starts the stdio MCP servers of --config (E2B's mcp option: catalog
names such as memory, filesystem or githubOfficial, "github/<owner>/<repo>"
entries, or {"command", "args", "env"}), serves their tools, prompts and
resources as "<server>__<name>" over streamable HTTP on port 50005, path /mcp,
to requests bearing GATEWAY_ACCESS_TOKEN (written to /etc/mcp-gateway/.token),
and returns once it serves, leaving it running. In the mcp-gateway template
this binary is also installed as mcp-gateway. See docs/mcp.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			token := os.Getenv("GATEWAY_ACCESS_TOKEN")
			// The descriptors Launch hands down are nobody else's to
			// inherit: a server that had the ready pipe could say "ready",
			// one that had the socket could serve the port.
			handed := func(env string, fd int) *os.File {
				if os.Getenv(env) != "1" {
					return nil
				}
				os.Unsetenv(env)
				syscall.CloseOnExec(fd)
				return os.NewFile(uintptr(fd), env)
			}
			ready, listener := handed(gateway.ReadyEnv, gateway.ReadyFD), handed(gateway.ListenerEnv, gateway.ListenerFD)
			logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
			if supervise {
				if listener == nil {
					return fmt.Errorf("--supervise needs the listening socket Launch hands down")
				}
				self, err := os.Executable()
				if err != nil {
					return err
				}
				return gateway.Supervise(cmd.Context(), gateway.SuperviseOptions{Command: gatewayCommand(self, "--serve"), Listener: listener, Ready: ready, Logger: logger})
			}
			if serve {
				opts := gateway.Options{Logger: logger, Stderr: os.Stderr}
				if ready != nil {
					opts.Ready = ready
				}
				if listener != nil {
					ln, err := net.FileListener(listener)
					listener.Close()
					if err != nil {
						return err
					}
					opts.Listener = ln
				}
				return gateway.Serve(cmd.Context(), "0.0.0.0:"+strconv.Itoa(gateway.Port), token, opts)
			}
			if config == "" {
				return fmt.Errorf("--config is required: a JSON object of MCP servers")
			}
			if token == "" {
				b := make([]byte, 16)
				rand.Read(b)
				token = hex.EncodeToString(b)
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if err := gateway.Launch(cmd.Context(), gateway.LaunchOptions{Config: []byte(config), Token: token, Command: gatewayCommand(self, "--supervise")}); err != nil {
				return err
			}
			fmt.Printf("MCP gateway serving on port %d, path %s\n", gateway.Port, gateway.Path)
			return nil
		},
	}
	cmd.AddCommand(newMCPGatewayPullCmd())
	cmd.Flags().StringVar(&config, "config", "", "the MCP servers, as JSON")
	cmd.Flags().BoolVar(&serve, "serve", false, "serve the configuration Launch wrote, in the foreground")
	cmd.Flags().MarkHidden("serve")
	cmd.Flags().BoolVar(&supervise, "supervise", false, "keep a serving gateway running on the socket Launch hands down")
	cmd.Flags().MarkHidden("supervise")
	return cmd
}

// newMCPGatewayPullCmd is `mcp-gateway pull NAME...`, which E2B's SDK runs
// in a template build for Template().addMcpServer(names). In Hutch the
// host pulls a catalog server's image when a sandbox's mcp option names
// it (docs/mcp-gateway.md), into its template store, where every later
// sandbox finds it: a template holds no images. So pull checks that each
// name is one the gateway runs, and says where its image comes from.
func newMCPGatewayPullCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pull NAME...",
		Short: "Check MCP catalog server names for a template (E2B's addMcpServer); the host pulls their images when a sandbox names them",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var unknown []string
			for _, name := range args {
				e := catalog.Load().Lookup(name)
				switch {
				case gateway.Catalog[name] != nil:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: runs from its package (%s)\n", name, gateway.Catalog[name].Command)
				case e == nil:
					unknown = append(unknown, name)
				case e.Unsupported != "":
					return fmt.Errorf("%s cannot run in a sandbox: %s", name, e.Unsupported)
				case e.Remote != nil:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: hosted at %s (needs the sandbox's internet access)\n", name, e.Remote.URL)
				default:
					fmt.Fprintf(cmd.OutOrStdout(), "%s: image %s, pulled by the host when a sandbox's mcp option names it\n", name, e.Image)
				}
			}
			if len(unknown) > 0 {
				return fmt.Errorf("not in the MCP catalog: %s (see docs/mcp-gateway.md)", strings.Join(unknown, ", "))
			}
			return nil
		},
	}
}

// gatewayCommand is this binary (self) run as `hutch mcp gateway FLAG`.
func gatewayCommand(self, flag string) []string {
	if filepath.Base(self) == gatewayName {
		// Run as mcp-gateway, the binary is `hutch mcp gateway` already.
		return []string{self, flag}
	}
	return []string{self, "mcp", "gateway", flag}
}
