package sdk_test

import (
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// TestMCPGateway: the Go SDK's Create with MCP starts the sandbox's MCP
// gateway as E2B's SDKs do; the MCP Go SDK's client reaches it through
// MCPClient with the token and calls a server's prefixed tools; the token
// is the gateway's own; a configuration the gateway refuses fails the
// create, saying so.
func TestMCPGateway(t *testing.T) {
	e := startServer(t)
	ctx := t.Context()
	sbx := e.sandbox(t, sdk.CreateOptions{MCP: map[string]any{"memory": map[string]any{}}})
	if sbx.TemplateID != sdk.MCPTemplate {
		t.Errorf("template %q, want %q", sbx.TemplateID, sdk.MCPTemplate)
	}
	if !strings.HasPrefix(sbx.MCPURL(), "https://50005-"+sbx.ID+".") {
		t.Errorf("MCPURL() = %q", sbx.MCPURL())
	}
	token, err := sbx.MCPToken(ctx)
	if err != nil || len(token) < 16 {
		t.Fatalf("MCPToken: %q, %v", token, err)
	}
	if b, err := sbx.Files.Read(ctx, "/etc/mcp-gateway/.token", &sdk.FileOptions{User: "root"}); err != nil || strings.TrimSpace(string(b)) != token {
		t.Errorf("the gateway's token file holds %q (%v), MCPToken %q", b, err, token)
	}
	endpoint, hc, err := sbx.MCPClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sdk-test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "memory__create_entities", Arguments: map[string]any{
		"entities": []any{map[string]any{"name": "hutch", "entityType": "project", "observations": []any{"go sdk"}}}}}); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "memory__read_graph", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("memory__read_graph: %v %+v", err, res)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, "go sdk") {
		t.Errorf("memory__read_graph: %+v", res.Content)
	}

	// Refused by the server's check, and by the gateway's own.
	for _, cfg := range []map[string]any{
		{"airtable": map[string]any{"nodeenv": "x"}},
		{"broken": map[string]any{"command": "/no/such/server", "args": []any{"x"}, "env": "not an object"}},
	} {
		_, err := sdk.Create(ctx, sdk.CreateOptions{Config: e.cfg, MCP: cfg})
		if err == nil || !strings.Contains(err.Error(), "Failed to start MCP gateway") {
			t.Errorf("create with %v: %v", cfg, err)
		}
	}
}
