package gateway

import (
	"context"
	"net/http"
	"os"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/mcp/mcptest"
)

// FuzzGatewayRPC: any body posted to the gateway's /mcp, with the right
// bearer token, is answered without a 5xx and in JSON-RPC (a call that is
// accepted gets its response), and the gateway still lists its tools
// afterwards (mcptest.CheckPost). Behind it run two real upstream servers
// (this test binary in its server role), so calls reach a real stdio
// server: its tools, resources, roots and a tool that crashes it, after
// which the gateway restarts it.
func FuzzGatewayRPC(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"hi"}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"beta__roots","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":7}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"nope","arguments":null}}`,
		`{"jsonrpc":"2.0","id":6,"method":"resources/list"}`,
		`{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"test://alpha"}}`,
		`{"jsonrpc":"2.0","id":8,"method":"resources/templates/list"}`,
		`{"jsonrpc":"2.0","id":9,"method":"prompts/list"}`,
		`{"jsonrpc":"2.0","id":10,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`,
		`{"jsonrpc":"2.0","id":11,"result":{}}`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"} {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"alpha__count"}}`,
		`{}`, `[]`, `null`, `"`, ``,
	} {
		f.Add([]byte(s))
	}
	exe, err := os.Executable()
	if err != nil {
		f.Fatal(err)
	}
	server := func(name string) *Server {
		return &Server{Name: name, Command: exe, Env: map[string]string{"GATEWAY_TEST_SERVER": "1", "GATEWAY_TEST_RESOURCE": name}}
	}
	alpha, beta := server("alpha"), server("beta")
	alpha.DenyTools = []string{"crash"}
	g, err := New(context.Background(), []*Server{alpha, beta}, Options{Workspace: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(g.Close)
	h := g.Handler("s3cret")
	header := http.Header{"Authorization": {"Bearer s3cret"}}
	f.Fuzz(func(t *testing.T, body []byte) {
		mcptest.CheckPost(t, h, Path, header, body)
	})
}
