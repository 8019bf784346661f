package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test binary doubles as the upstream MCP server (a stdio server with
// a few tools), so the gateway runs real processes it can crash.
func TestMain(m *testing.M) {
	if os.Getenv("GATEWAY_TEST_SERVER") != "" {
		testServer()
		return
	}
	os.Exit(m.Run())
}

func testServer() {
	// Like the npm reference servers: the 2025-11-25 era, in which a server
	// asks its client for roots.
	srv := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	var count atomic.Int64
	type none struct{}
	type msg struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "echo"}, func(ctx context.Context, _ *mcp.CallToolRequest, in msg) (*mcp.CallToolResult, msg, error) {
		return nil, in, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "count", Description: "counts calls in this process"}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, map[string]int64, error) {
		return nil, map[string]int64{"n": count.Add(1), "pid": int64(os.Getpid())}, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "env", Description: "the environment"}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, map[string][]string, error) {
		return nil, map[string][]string{"env": os.Environ()}, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "roots", Description: "the client's roots"}, func(ctx context.Context, req *mcp.CallToolRequest, _ none) (*mcp.CallToolResult, map[string][]string, error) {
		res, err := req.Session.ListRoots(ctx, nil)
		if err != nil {
			return nil, nil, err
		}
		var uris []string
		for _, r := range res.Roots {
			uris = append(uris, r.URI)
		}
		return nil, map[string][]string{"roots": uris}, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "crash", Description: "exits"}, func(context.Context, *mcp.CallToolRequest, none) (*mcp.CallToolResult, none, error) {
		os.Exit(3)
		return nil, none{}, nil
	})
	srv.AddResource(&mcp.Resource{URI: "test://" + os.Getenv("GATEWAY_TEST_RESOURCE"), Name: "res"}, func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "from " + os.Getenv("GATEWAY_TEST_RESOURCE")}}}, nil
	})
	srv.Run(context.Background(), &mcp.StdioTransport{})
}

// upstreamServer configures the test binary as server name.
func upstreamServer(t *testing.T, name string, env map[string]string) *Server {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := map[string]string{"GATEWAY_TEST_SERVER": "1", "GATEWAY_TEST_RESOURCE": name}
	for k, v := range env {
		e[k] = v
	}
	return &Server{Name: name, Command: exe, Env: e}
}

func TestParseConfig(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		want         []Server
		err          string
	}{
		{name: "catalog", config: `{"memory":{},"filesystem":{"paths":["/home/user","/tmp"]}}`, want: []Server{
			{Name: "filesystem", Command: "mcp-server-filesystem", Args: []string{"/home/user", "/tmp"}},
			{Name: "memory", Command: "mcp-server-memory"},
		}},
		{name: "secrets become the server's env", config: `{"githubOfficial":{"githubPersonalAccessToken":"ghp_x"}}`, want: []Server{
			{Name: "githubOfficial", Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-github"}, Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}, Download: "npx @modelcontextprotocol/server-github"},
		}},
		{name: "plain command with tool lists", config: `{"py":{"command":"python3","args":["s.py"],"env":{"K":"v"},"allowTools":["a"],"denyTools":["b"]}}`, want: []Server{
			{Name: "py", Command: "python3", Args: []string{"s.py"}, Env: map[string]string{"K": "v"}, AllowTools: []string{"a"}, DenyTools: []string{"b"}},
		}},
		{name: "github form", config: `{"github/acme/tools.mcp":{"runCmd":"node dist/index.js","installCmd":"npm ci","envs":{"T":"1"}}}`, want: []Server{
			{Name: "acme-tools-mcp", Command: "/bin/sh", Args: []string{"-c", "node dist/index.js"}, Env: map[string]string{"T": "1"}, Dir: "/opt/mcp/github/acme/tools.mcp",
				Install:  "test -d /opt/mcp/github/acme/tools.mcp/.git || git clone --depth 1 https://github.com/acme/tools.mcp /opt/mcp/github/acme/tools.mcp && cd /opt/mcp/github/acme/tools.mcp && npm ci",
				Download: "https://github.com/acme/tools.mcp"},
		}},
		{name: "missing secret", config: `{"notion":{}}`, err: `"internalIntegrationToken" is required`},
		{name: "unknown field", config: `{"exa":{"apiKey":"k","nope":1}}`, err: `unknown field "nope"`},
		{name: "filesystem without paths", config: `{"filesystem":{"paths":[]}}`, err: `"paths" must be a non-empty list`},
		{name: "unknown server without command", config: `{"mystery":{}}`, err: `not in the catalog`},
		{name: "bad name", config: `{"a__b":{"command":"x"}}`, err: `not a usable name`},
		{name: "bad github key", config: `{"github/x":{"runCmd":"y"}}`, err: `github/<owner>/<repo>`},
		{name: "github without runCmd", config: `{"github/a/b":{}}`, err: `runCmd is required`},
		{name: "empty", config: `{}`, err: `names no MCP server`},
		{name: "not an object", config: `[1]`, err: `not a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(tc.config))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var gotV []Server
			for _, s := range got {
				if len(s.Env) == 0 {
					s.Env = nil
				}
				gotV = append(gotV, *s)
			}
			a, _ := json.Marshal(gotV)
			b, _ := json.Marshal(tc.want)
			if string(a) != string(b) {
				t.Errorf("got  %s\nwant %s", a, b)
			}
		})
	}
}

// connect starts a gateway of servers behind an httptest listener and
// connects a client with token.
func startGateway(t *testing.T, servers ...*Server) (*Gateway, *httptest.Server) {
	t.Helper()
	ws := t.TempDir()
	g, err := New(context.Background(), servers, Options{Workspace: ws, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	hs := httptest.NewServer(g.Handler("s3cret"))
	t.Cleanup(hs.Close)
	return g, hs
}

type bearerRT string

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func client(t *testing.T, url, token string) (*mcp.ClientSession, error) {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url + Path, HTTPClient: &http.Client{Transport: bearerRT(token)}}, nil)
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func callJSON(t *testing.T, cs *mcp.ClientSession, tool string, args any) (map[string]any, *mcp.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	return out, res
}

func TestGateway(t *testing.T) {
	a := upstreamServer(t, "alpha", map[string]string{"ALPHA_SECRET": "a-only"})
	a.DenyTools = []string{"crash"}
	b := upstreamServer(t, "beta", map[string]string{"BETA_SECRET": "b-only"})
	g, hs := startGateway(t, a, b)
	ctx := context.Background()

	if _, err := client(t, hs.URL, "wrong"); err == nil {
		t.Error("a wrong token connected")
	}
	cs, err := client(t, hs.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := []string{"alpha__count", "alpha__echo", "alpha__env", "alpha__roots", "beta__count", "beta__crash", "beta__echo", "beta__env", "beta__roots"}
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v (alpha's crash denied)", names, want)
	}

	if out, _ := callJSON(t, cs, "alpha__echo", map[string]any{"text": "hi"}); out["text"] != "hi" {
		t.Errorf("echo = %v", out)
	}
	// One process per server: a counter keeps counting across calls and
	// clients, in one pid.
	first, _ := callJSON(t, cs, "alpha__count", nil)
	other, err := client(t, hs.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	second, _ := callJSON(t, other, "alpha__count", nil)
	if second["n"].(float64) != first["n"].(float64)+1 || second["pid"] != first["pid"] {
		t.Errorf("count across clients: %v then %v; want one process counting on", first, second)
	}
	// Concurrent calls from two clients on the one stdio stream.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs
			if i%2 == 1 {
				c = other
			}
			text := strings.Repeat("x", i)
			res, err := c.CallTool(ctx, &mcp.CallToolParams{Name: "beta__echo", Arguments: map[string]any{"text": text}})
			if err != nil || res.IsError {
				t.Errorf("concurrent echo %d: %v", i, err)
				return
			}
			b, _ := json.Marshal(res.StructuredContent)
			if !strings.Contains(string(b), `"`+text+`"`) {
				t.Errorf("concurrent echo %d got %s", i, b)
			}
		}()
	}
	wg.Wait()

	// Secrets reach their own server only.
	envA, _ := callJSON(t, cs, "alpha__env", nil)
	envB, _ := callJSON(t, cs, "beta__env", nil)
	ja, _ := json.Marshal(envA)
	jb, _ := json.Marshal(envB)
	if !strings.Contains(string(ja), "ALPHA_SECRET=a-only") || strings.Contains(string(ja), "BETA_SECRET") || strings.Contains(string(jb), "ALPHA_SECRET") {
		t.Errorf("environments leak: alpha %s, beta %s", ja, jb)
	}
	if strings.Contains(string(ja), "GATEWAY_ACCESS_TOKEN") {
		t.Error("a server sees the gateway's token")
	}
	// roots/list is answered by the gateway with the workspace.
	if roots, res := callJSON(t, cs, "beta__roots", nil); !strings.Contains(toJSON(roots), "file://"+g.ups[0].workspace) {
		t.Errorf("roots = %v (%s)", roots, errorText(res))
	}
	// Resources keep their URIs and are routed to their server.
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://beta"})
	if err != nil || rr.Contents[0].Text != "from beta" {
		t.Errorf("read test://beta = %+v, %v", rr, err)
	}

	// A crash: the call in flight fails as a tool error, the server comes
	// back, and state starts over in a new process.
	if _, res := callJSON(t, cs, "beta__crash", nil); !res.IsError {
		t.Error("the crashing call did not fail")
	}
	var after map[string]any
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, res := callJSON(t, cs, "beta__count", nil)
		if !res.IsError {
			after = out
			break
		}
		if txt := errorText(res); !strings.Contains(txt, "restart") {
			t.Errorf("while down: %q does not say the server restarts", txt)
		}
		if time.Now().After(deadline) {
			t.Fatal("beta never came back")
		}
	}
	if after["n"].(float64) != 1 {
		t.Errorf("after the restart: %v, want a fresh process", after)
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func errorText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestGatewayRefuses(t *testing.T) {
	ctx := context.Background()
	// Two servers offering one resource URI: the first keeps it.
	a := upstreamServer(t, "one", map[string]string{"GATEWAY_TEST_RESOURCE": "same"})
	b := upstreamServer(t, "two", map[string]string{"GATEWAY_TEST_RESOURCE": "same"})
	g, err := New(ctx, []*Server{a, b}, Options{})
	if err != nil {
		t.Fatalf("two servers with one resource URI: %v", err)
	}
	g.Close()
	// Exposed names that collide are refused.
	names := map[string]string{}
	if err := claim(names, "tool", "x__y", "x"); err != nil {
		t.Fatal(err)
	}
	if err := claim(names, "tool", "x__y", "z"); err == nil || !strings.Contains(err.Error(), "collides") {
		t.Errorf("a second x__y: %v", err)
	}
	// A server that must download says so when there is no internet.
	noNet := func(context.Context) error { return os.ErrDeadlineExceeded }
	if _, err := New(ctx, []*Server{{Name: "notion", Command: "npx", Download: "npx @notionhq/notion-mcp-server"}}, Options{DownloadCheck: noNet}); err == nil || !strings.Contains(err.Error(), "cannot reach the internet") {
		t.Errorf("download without internet: %v", err)
	}
}

func TestHTTPAuth(t *testing.T) {
	_, hs := startGateway(t, upstreamServer(t, "solo", nil))
	// A refusal is a JSON-RPC error object with its status, the bearer
	// check's and the MCP SDK's alike (wantCode 0: a success).
	for _, tc := range []struct {
		name, auth  string
		contentType string
		want        int
		wantCode    int64
	}{
		{"none", "", "application/json", http.StatusUnauthorized, -32001},
		{"wrong", "Bearer nope", "application/json", http.StatusUnauthorized, -32001},
		{"basic", "Basic czNjcmV0", "application/json", http.StatusUnauthorized, -32001},
		{"right", "Bearer s3cret", "application/json", http.StatusOK, 0},
		{"right, not JSON", "Bearer s3cret", "text/plain", http.StatusUnsupportedMediaType, -32600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", hs.URL+Path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
			req.Header.Set("Content-Type", tc.contentType)
			req.Header.Set("Accept", "application/json, text/event-stream")
			// Through Hutch's proxy the Host is the sandbox's public name.
			req.Host = "50005-isandbox.hutch.test"
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if tc.wantCode == 0 {
				return
			}
			var got struct {
				JSONRPC string `json:"jsonrpc"`
				Error   struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &got); err != nil || got.JSONRPC != "2.0" || got.Error.Code != tc.wantCode || got.Error.Message == "" ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("body %q (%s), want a JSON-RPC error %d", body, resp.Header.Get("Content-Type"), tc.wantCode)
			}
		})
	}
}

// TestServerDownAtStart: a server that cannot start does not stop the
// gateway: /health reports it down with the reason, a call of its tools is
// a tool error saying so, and the others serve.
func TestServerDownAtStart(t *testing.T) {
	a := upstreamServer(t, "alpha", nil)
	ghost := &Server{Name: "ghost", Command: "/no/such/server"}
	g, hs := startGateway(t, a, ghost)
	st := g.Status(context.Background())
	if len(st) != 2 || st[1].Name != "ghost" || st[1].Running || !strings.Contains(st[1].LastError, "/no/such/server") {
		t.Errorf("status = %+v, want ghost down with its command in the error", st)
	}
	cs, err := client(t, hs.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if _, res := callJSON(t, cs, "alpha__count", nil); res.IsError {
		t.Errorf("alpha__count failed: %v", errorText(res))
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ghost__anything", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(errorText(res), "has not started") || !strings.Contains(errorText(res), "/no/such/server") {
		t.Errorf("ghost__anything: %v, %+v", err, res)
	}
}

// TestServerStartsLater: a server whose command appears after the gateway
// started is started by the retries, and its tools are served then.
func TestServerStartsLater(t *testing.T) {
	late := upstreamServer(t, "late", nil)
	exe := late.Command
	late.Command = filepath.Join(t.TempDir(), "server")
	g, hs := startGateway(t, upstreamServer(t, "alpha", nil), late)
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(late.Command+".tmp", b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(late.Command+".tmp", late.Command); err != nil {
		t.Fatal(err)
	}
	cs, err := client(t, hs.URL, "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "late__count", Arguments: map[string]any{}})
		if err == nil && !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("late__count after 30 s: %v %+v; status %+v", err, res, g.Status(context.Background()))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := g.Status(context.Background()); !st[1].Running {
		t.Errorf("status %+v: late not running", st)
	}
}
