package sdk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MCPPort is the port of a sandbox's MCP gateway (E2B's mcpPort).
const MCPPort = 50005

// MCPTemplate is the template a sandbox with MCP servers is made from
// when CreateOptions.Template is empty (E2B's defaultMcpTemplate).
const MCPTemplate = "mcp-gateway"

// mcpTokenPath is where the gateway keeps its token in the sandbox.
const mcpTokenPath = "/etc/mcp-gateway/.token"

// startMCP starts the sandbox's MCP gateway for the create's mcp option,
// as E2B's SDKs do: `mcp-gateway --config JSON` as root with a new token,
// waited for. It runs without a shell (Exec), so the JSON needs no
// quoting.
func (s *Sandbox) startMCP(ctx context.Context, config []byte) error {
	b := make([]byte, 16)
	rand.Read(b)
	token := hex.EncodeToString(b)
	_, err := s.Commands.Exec(ctx, []string{"mcp-gateway", "--config", string(config)},
		&RunOptions{User: "root", Envs: map[string]string{"GATEWAY_ACCESS_TOKEN": token}, Timeout: 90 * time.Second})
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*CommandExitError); ok {
			msg = strings.TrimSpace(ee.Stderr)
		}
		return &Error{Op: "create sandbox", Kind: ErrInvalidArgument, Message: "Failed to start MCP gateway: " + msg, Err: err}
	}
	s.mcpToken = token
	return nil
}

// MCPURL returns the URL of the sandbox's MCP gateway,
// https://50005-<id>.<domain>/mcp, as E2B's getMcpUrl. Without a sandbox
// domain, reach it with [Sandbox.MCPClient].
func (s *Sandbox) MCPURL() string { return "https://" + s.Host(MCPPort) + "/mcp" }

// MCPToken returns the bearer token of the sandbox's MCP gateway: the one
// Create started it with, else the gateway's own (read as root from the
// sandbox), as E2B's getMcpToken.
func (s *Sandbox) MCPToken(ctx context.Context) (string, error) {
	if s.mcpToken != "" {
		return s.mcpToken, nil
	}
	b, err := s.Files.Read(ctx, mcpTokenPath, &FileOptions{User: "root"})
	if err != nil {
		return "", err
	}
	s.mcpToken = strings.TrimSpace(string(b))
	return s.mcpToken, nil
}

// MCPClient returns the endpoint of the sandbox's MCP gateway and an HTTP
// client that reaches it through the server's routing (as
// [Sandbox.PortRequest] does) with the gateway's token: what an MCP
// client's streamable HTTP transport takes (the MCP Go SDK's
// StreamableClientTransport{Endpoint, HTTPClient}). Hutch's addition.
func (s *Sandbox) MCPClient(ctx context.Context) (endpoint string, client *http.Client, err error) {
	token, err := s.MCPToken(ctx)
	if err != nil {
		return "", nil, err
	}
	base := s.client.cfg.SandboxURL
	if base == "" {
		base = "https://" + s.Host(MCPPort)
	}
	next := s.client.cfg.HTTPClient.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	return base + "/mcp", &http.Client{Transport: mcpRoute{s: s, token: token, next: next}}, nil
}

// mcpRoute adds the routing headers and the gateway's token.
type mcpRoute struct {
	s     *Sandbox
	token string
	next  http.RoundTripper
}

func (m mcpRoute) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("E2b-Sandbox-Id", m.s.ID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(MCPPort))
	if m.s.TrafficAccessToken != "" {
		req.Header.Set("E2b-Traffic-Access-Token", m.s.TrafficAccessToken)
	}
	req.Header.Set("Authorization", "Bearer "+m.token)
	return m.next.RoundTrip(req)
}
