package platform

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/envdtest"
	"github.com/hutch-sandbox/hutch/internal/server/servertest"
	"github.com/hutch-sandbox/hutch/sdk"
)

// The test binary is also the envd of the sandboxes it makes.
func TestMain(m *testing.M) { envdtest.Main(m) }

// hutch is a real control plane in this process, with two API keys.
type hutch struct {
	url        string
	keyA, keyB string
}

func newHutch(t *testing.T) *hutch {
	t.Helper()
	cp := servertest.Start(t, 2)
	return &hutch{url: cp.URL, keyA: cp.Keys[0], keyB: cp.Keys[1]}
}

// session connects an MCP client to a platform server over in-memory
// transports, acting with key.
func (h *hutch) session(t *testing.T, key string) *mcp.ClientSession {
	t.Helper()
	c, err := sdk.NewClient(sdk.Config{APIURL: h.url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{Client: func(context.Context, *mcp.CallToolRequest) (*sdk.Client, error) { return c, nil }})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	if _, err := srv.Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and returns its result; a protocol error fails the
// test (tools report failures as results).
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error %v", tool, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its structured output.
func ok[T any](t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) T {
	t.Helper()
	res := call(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", tool, args, text(res))
	}
	var out T
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", tool, b, err)
	}
	return out
}

// fails calls a tool that must fail with a message containing want.
func fails(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, want string) {
	t.Helper()
	res := call(t, cs, tool, args)
	if !res.IsError || !strings.Contains(text(res), want) {
		t.Errorf("%s(%v) = isError %v %q; want an error containing %q", tool, args, res.IsError, text(res), want)
	}
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestToolsAreDescribed(t *testing.T) {
	srv := NewServer(Options{Client: func(context.Context, *mcp.CallToolRequest) (*sdk.Client, error) { return nil, nil }})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	srv.Connect(ctx, st, nil)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var names []string
	readOnly := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil || tool.Annotations == nil || tool.Annotations.Title == "" {
			t.Errorf("%s: description, input schema, annotations and title are all needed", tool.Name)
		}
		readOnly[tool.Name] = tool.Annotations != nil && tool.Annotations.ReadOnlyHint
		// One type per value: ["null", "array"] is rejected by some clients.
		for _, schema := range []any{tool.InputSchema, tool.OutputSchema} {
			if b, _ := json.Marshal(schema); strings.Contains(string(b), `"type":[`) {
				t.Errorf("%s: a schema names several types: %s", tool.Name, b)
			}
		}
	}
	want := []string{
		"command_interrupt", "command_output", "command_run", "command_start", "create_code_context",
		"file_create_directories", "file_delete", "file_delete_directories", "file_edit", "file_list", "file_move",
		"file_read", "file_replace_contents", "file_search", "file_write", "run_code",
		"sandbox_connect", "sandbox_create", "sandbox_fork", "sandbox_get_endpoint", "sandbox_get_info", "sandbox_get_metrics",
		"sandbox_healthcheck", "sandbox_kill", "sandbox_list", "sandbox_pause", "sandbox_renew",
		"sandbox_resume", "sandbox_snapshot",
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v\nwant %v", names, want)
	}
	for _, n := range []string{"file_read", "file_list", "file_search", "sandbox_list", "sandbox_get_info", "command_output"} {
		if !readOnly[n] {
			t.Errorf("%s is not marked read-only", n)
		}
	}
	for _, n := range []string{"command_run", "file_write", "file_edit", "sandbox_kill"} {
		if readOnly[n] {
			t.Errorf("%s is marked read-only", n)
		}
	}
}

func TestPlatformTools(t *testing.T) {
	h := newHutch(t)
	cs := h.session(t, h.keyA)
	sbx := ok[SandboxInfo](t, cs, "sandbox_create", map[string]any{"metadata": map[string]string{"task": "t1"}, "envs": map[string]string{"GREETING": "hi"}, "timeout_seconds": 600})
	id := sbx.SandboxID
	if id == "" || sbx.State != "running" || sbx.Metadata[MetadataKey] != "true" || sbx.Metadata["task"] != "t1" || sbx.ExpiresInS < 590 {
		t.Fatalf("sandbox_create = %+v", sbx)
	}

	t.Run("command_run", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args map[string]any
			want RunOutput
		}{
			{"python", map[string]any{"command": "python3 -c 'print(6*7)'"}, RunOutput{Stdout: "42\n"}},
			{"exit code is a result", map[string]any{"command": "echo oops >&2; exit 3"}, RunOutput{ExitCode: 3, Stderr: "oops\n"}},
			{"sandbox envs, cwd and user", map[string]any{"command": "echo $GREETING $(pwd) $(whoami)", "cwd": "/tmp", "user": "root"}, RunOutput{Stdout: "hi /tmp root\n"}},
			{"timeout", map[string]any{"command": "echo started; sleep 30", "timeout_seconds": 1}, RunOutput{ExitCode: -1, Stdout: "started\n", TimedOut: true}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				args := map[string]any{"sandbox_id": id}
				for k, v := range tc.args {
					args[k] = v
				}
				if got := ok[RunOutput](t, cs, "command_run", args); got != tc.want {
					t.Errorf("got %+v, want %+v", got, tc.want)
				}
			})
		}
		big := ok[RunOutput](t, cs, "command_run", map[string]any{"sandbox_id": id, "command": "seq 1 100000", "max_output_bytes": 1000})
		if !big.Truncated || !strings.HasPrefix(big.Stdout, "1\n2\n") || !strings.HasSuffix(big.Stdout, "99999\n100000\n") || !strings.Contains(big.Stdout, "bytes left out") || len(big.Stdout) > 1100 {
			t.Errorf("bounded output: truncated %v, %d bytes: %.80q … %.80q", big.Truncated, len(big.Stdout), big.Stdout, big.Stdout[max(0, len(big.Stdout)-80):])
		}
		fails(t, cs, "command_run", map[string]any{"sandbox_id": id, "command": " "}, "command is empty")
		fails(t, cs, "command_run", map[string]any{"sandbox_id": id, "command": "true", "timeout_seconds": 99999}, "timeout_seconds must be between")
	})

	t.Run("background commands", func(t *testing.T) {
		st := ok[StartOutput](t, cs, "command_start", map[string]any{"sandbox_id": id, "command": "echo begin; sleep 0.5; echo end; echo err >&2; exit 4"})
		var out OutputOutput
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out = ok[OutputOutput](t, cs, "command_output", map[string]any{"sandbox_id": id, "command_id": st.CommandID})
			if !out.Running || time.Now().After(deadline) {
				break
			}
		}
		if out.Running || out.ExitCode == nil || *out.ExitCode != 4 || out.Stdout != "begin\nend\n" || out.Stderr != "err\n" {
			t.Errorf("command_output = %+v (exit %v)", out, out.ExitCode)
		}
		long := ok[StartOutput](t, cs, "command_start", map[string]any{"sandbox_id": id, "command": "echo up; sleep 300"})
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			out = ok[OutputOutput](t, cs, "command_output", map[string]any{"sandbox_id": id, "command_id": long.CommandID})
			if out.Stdout == "up\n" || time.Now().After(deadline) {
				break
			}
		}
		if !out.Running || out.ExitCode != nil {
			t.Fatalf("a sleeping command: %+v", out)
		}
		ok[InterruptOutput](t, cs, "command_interrupt", map[string]any{"sandbox_id": id, "command_id": long.CommandID})
		for deadline := time.Now().Add(20 * time.Second); out.Running && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			out = ok[OutputOutput](t, cs, "command_output", map[string]any{"sandbox_id": id, "command_id": long.CommandID})
		}
		if out.Running || out.ExitCode == nil || *out.ExitCode == 0 {
			t.Errorf("after command_interrupt: %+v", out)
		}
		fails(t, cs, "command_output", map[string]any{"sandbox_id": id, "command_id": "../../etc"}, "is not one command_start returned")
		fails(t, cs, "command_output", map[string]any{"sandbox_id": id, "command_id": "cmd_0000000000000000"}, "no command")
	})

	t.Run("files", func(t *testing.T) {
		w := ok[WriteOutput](t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "proj/main.py", "content": "a = 1\nb = 2\nb = 2\n"})
		if w.Path != "/home/user/proj/main.py" || w.Bytes != 18 {
			t.Errorf("file_write = %+v", w)
		}
		res := call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "proj/main.py", "offset": 2, "limit": 1})
		if res.IsError || text(res) != "b = 2\n" {
			t.Errorf("file_read lines 2-2 = %q", text(res))
		}
		fails(t, cs, "file_edit", map[string]any{"sandbox_id": id, "path": "proj/main.py", "old_text": "b = 2", "new_text": "b = 3"}, "occurs 2 times")
		fails(t, cs, "file_edit", map[string]any{"sandbox_id": id, "path": "proj/main.py", "old_text": "c = 9", "new_text": "x"}, "does not occur")
		// A replacement whose result would pass the tools' bound is
		// refused before it is built, and the file stays as it was
		// (review 30, H4: 1 MiB of "a" with 20 bytes for each one).
		ok[WriteOutput](t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "/tmp/big", "content": strings.Repeat("a", 1<<20)})
		fails(t, cs, "file_replace_contents", map[string]any{"sandbox_id": id, "path": "/tmp/big", "old_text": "a", "new_text": strings.Repeat("b", 20)}, "more than the")
		if r := ok[ReadOutput](t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "/tmp/big", "limit": 1}); r.Size != 1<<20 {
			t.Errorf("/tmp/big after the refused replacement: %d bytes, want 1 MiB as written", r.Size)
		}
		if e := ok[ReplaceOutput](t, cs, "file_edit", map[string]any{"sandbox_id": id, "path": "proj/main.py", "old_text": "a = 1", "new_text": "a = 10"}); e.Replacements != 1 {
			t.Errorf("file_edit = %+v", e)
		}
		if r := ok[ReplaceOutput](t, cs, "file_replace_contents", map[string]any{"sandbox_id": id, "path": "proj/main.py", "old_text": "b = 2", "new_text": "b = 3"}); r.Replacements != 2 {
			t.Errorf("file_replace_contents = %+v", r)
		}
		if got := text(call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "/home/user/proj/main.py"})); got != "a = 10\nb = 3\nb = 3\n" {
			t.Errorf("after the edits: %q", got)
		}
		// Binary content comes back as a resource.
		ok[WriteOutput](t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "proj/bin", "content": "AAEC/w==", "encoding": "base64"})
		res = call(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "proj/bin"})
		if er, isRes := res.Content[1].(*mcp.EmbeddedResource); res.IsError || !isRes || string(er.Resource.Blob) != "\x00\x01\x02\xff" || !strings.Contains(text(res), "4 bytes") {
			t.Errorf("binary file_read = %+v", res.Content)
		}
		ok[MakeDirOutput](t, cs, "file_create_directories", map[string]any{"sandbox_id": id, "path": "proj/src/pkg"})
		ok[WriteOutput](t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "proj/src/pkg/x.go", "content": "package x\n"})
		if s := ok[SearchOutput](t, cs, "file_search", map[string]any{"sandbox_id": id, "path": "proj", "pattern": "src/**/*.go"}); !slices.Equal(s.Matches, []string{"/home/user/proj/src/pkg/x.go"}) {
			t.Errorf("file_search src/**/*.go = %+v", s)
		}
		if s := ok[SearchOutput](t, cs, "file_search", map[string]any{"sandbox_id": id, "path": "proj", "pattern": "*.py"}); !slices.Equal(s.Matches, []string{"/home/user/proj/main.py"}) {
			t.Errorf("file_search *.py = %+v", s)
		}
		l := ok[ListFilesOutput](t, cs, "file_list", map[string]any{"sandbox_id": id, "path": "proj", "depth": 3})
		if len(l.Entries) != 5 {
			t.Errorf("file_list depth 3 = %+v", l.Entries)
		}
		ok[Entry](t, cs, "file_move", map[string]any{"sandbox_id": id, "source": "proj/main.py", "destination": "proj/app/main.py"})
		fails(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "proj/main.py"}, "no such file")
		fails(t, cs, "file_delete", map[string]any{"sandbox_id": id, "path": "proj/src"}, "use file_delete_directories")
		if d := ok[DeleteOutput](t, cs, "file_delete_directories", map[string]any{"sandbox_id": id, "path": "proj/src"}); !d.Existed {
			t.Errorf("file_delete_directories = %+v", d)
		}
		if d := ok[DeleteOutput](t, cs, "file_delete", map[string]any{"sandbox_id": id, "path": "proj/bin"}); !d.Existed {
			t.Errorf("file_delete = %+v", d)
		}
		fails(t, cs, "file_delete_directories", map[string]any{"sandbox_id": id, "path": "/"}, "refusing")
		fails(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "proj"}, "is a directory")
	})

	t.Run("sandbox tools", func(t *testing.T) {
		if l := ok[ListOutput](t, cs, "sandbox_list", map[string]any{"metadata": map[string]string{"task": "t1"}}); len(l.Sandboxes) != 1 || l.Sandboxes[0].SandboxID != id {
			t.Errorf("sandbox_list = %+v", l)
		}
		if r := ok[SandboxInfo](t, cs, "sandbox_renew", map[string]any{"sandbox_id": id, "timeout_seconds": 60}); r.ExpiresInS > 61 || r.ExpiresInS < 50 {
			t.Errorf("sandbox_renew 60 s = %+v", r)
		}
		if hc := ok[HealthOutput](t, cs, "sandbox_healthcheck", map[string]any{"sandbox_id": id}); !hc.Running {
			t.Error("sandbox_healthcheck: not running")
		}
		// The server's route to the port (opensandbox_test.go fetches
		// through one).
		ep := ok[EndpointOutput](t, cs, "sandbox_get_endpoint", map[string]any{"sandbox_id": id, "port": 8000})
		if want := h.url + "/v1/sandboxes/" + id + "/proxy/8000/"; ep.URL != want || "http://"+ep.Endpoint+"/" != ep.URL {
			t.Errorf("sandbox_get_endpoint = %+v, want url %s and the same endpoint without its scheme", ep, want)
		}
		if m := ok[MetricsOutput](t, cs, "sandbox_get_metrics", map[string]any{"sandbox_id": id}); len(m.Samples) > 0 && (m.CPUUsedPercentage == nil || m.CPUCount == nil || *m.CPUCount != 1) {
			t.Errorf("sandbox_get_metrics = %+v: want the last sample in OpenSandbox's fields, cpu_used_percentage included", m)
		}

		// Keep, branch and come back.
		snap := ok[SnapshotOutput](t, cs, "sandbox_snapshot", map[string]any{"sandbox_id": id})
		if snap.SnapshotID == "" || len(snap.Names) != 1 {
			t.Errorf("sandbox_snapshot = %+v", snap)
		}
		fromSnap := ok[SandboxInfo](t, cs, "sandbox_create", map[string]any{"template": snap.SnapshotID})
		ok[KillOutput](t, cs, "sandbox_kill", map[string]any{"sandbox_id": fromSnap.SandboxID})
		if c, err := sdk.NewClient(sdk.Config{APIURL: h.url, APIKey: h.keyA}); err == nil {
			if gone, err := c.DeleteSnapshot(context.Background(), snap.SnapshotID); !gone || err != nil {
				t.Errorf("delete the snapshot: %v, %v", gone, err)
			}
		}
		fk := ok[ForkOutput](t, cs, "sandbox_fork", map[string]any{"sandbox_id": id, "count": 2})
		if len(fk.Sandboxes) != 2 || len(fk.Errors) != 0 {
			t.Errorf("sandbox_fork = %+v", fk)
		}
		for _, f := range fk.Sandboxes {
			ok[KillOutput](t, cs, "sandbox_kill", map[string]any{"sandbox_id": f})
		}
		fails(t, cs, "sandbox_fork", map[string]any{"sandbox_id": id, "count": 0}, "count")
		if p := ok[PauseOutput](t, cs, "sandbox_pause", map[string]any{"sandbox_id": id, "keep_memory": false}); !p.Paused {
			t.Errorf("sandbox_pause = %+v", p)
		}
		if p := ok[PauseOutput](t, cs, "sandbox_pause", map[string]any{"sandbox_id": id}); p.Paused {
			t.Errorf("second sandbox_pause = %+v, want already paused", p)
		}
		if r := ok[SandboxInfo](t, cs, "sandbox_resume", map[string]any{"sandbox_id": id, "timeout_seconds": 120}); r.State != "running" {
			t.Errorf("sandbox_resume = %+v", r)
		}
		fails(t, cs, "sandbox_pause", map[string]any{"sandbox_id": "inosuchsandbox00000000"}, "not found")

		// Another key sees none of it.
		other := h.session(t, h.keyB)
		if l := ok[ListOutput](t, other, "sandbox_list", nil); len(l.Sandboxes) != 0 {
			t.Errorf("key B lists %+v", l)
		}
		fails(t, other, "command_run", map[string]any{"sandbox_id": id, "command": "true"}, "not found")
		fails(t, other, "sandbox_kill", map[string]any{"sandbox_id": id}, "not found")

		if k := ok[KillOutput](t, cs, "sandbox_kill", map[string]any{"sandbox_id": id}); !k.Killed {
			t.Error("sandbox_kill: not killed")
		}
		fails(t, cs, "command_run", map[string]any{"sandbox_id": id, "command": "true"}, "not found")
		fails(t, cs, "sandbox_get_info", map[string]any{"sandbox_id": id}, "not found")
		fails(t, cs, "file_read", map[string]any{"sandbox_id": "", "path": "x"}, "sandbox_id is required")
	})
}

// TestHTTPKeys: over HTTP each bearer key acts as itself; no key or a
// wrong one is 401; a foreign Origin is refused.
func TestHTTPKeys(t *testing.T) {
	h := newHutch(t)
	handler, err := NewHTTPHandler(HTTPOptions{Config: sdk.Config{APIURL: h.url}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	defer srv.Close()
	connect := func(key string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: headerRT{"Authorization": "Bearer " + key}}
		return mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc}, nil)
	}
	a, err := connect(h.keyA)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	made := ok[SandboxInfo](t, a, "sandbox_create", nil)
	b, err := connect(h.keyB)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if l := ok[ListOutput](t, b, "sandbox_list", nil); len(l.Sandboxes) != 0 {
		t.Errorf("key B sees %+v", l.Sandboxes)
	}
	fails(t, b, "sandbox_kill", map[string]any{"sandbox_id": made.SandboxID}, "not found")
	ok[KillOutput](t, a, "sandbox_kill", map[string]any{"sandbox_id": made.SandboxID})

	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	keyA := map[string]string{"Authorization": "Bearer " + h.keyA}
	// Every refusal is a JSON-RPC error object (no id: the request was not
	// read) with a meaningful status, whoever refused: the auth
	// middleware, the transport or the body limit.
	for _, tc := range []struct {
		name         string
		method, body string
		header       map[string]string
		want         int
		wantCode     int64
	}{
		{"no key", "POST", list, nil, http.StatusUnauthorized, -32001},
		{"wrong key", "POST", list, map[string]string{"Authorization": "Bearer e2b_" + strings.Repeat("0", 40)}, http.StatusUnauthorized, -32001},
		{"foreign origin", "POST", list, map[string]string{"Authorization": "Bearer " + h.keyA, "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, -32600},
		{"body too large", "POST", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"` + strings.Repeat("x", MaxBodyBytes) + `"}}`, keyA, http.StatusRequestEntityTooLarge, -32600},
		{"not JSON", "POST", `{"jsonrpc":`, keyA, http.StatusBadRequest, -32600},
		{"no GET stream", "GET", "", keyA, http.StatusMethodNotAllowed, -32600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.header {
				req.Header.Set(k, v)
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
			var got struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &got); err != nil || got.JSONRPC != "2.0" || got.ID != nil || got.Error.Code != tc.wantCode || got.Error.Message == "" ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("body %q (%s), want a JSON-RPC error %d without an id", body, resp.Header.Get("Content-Type"), tc.wantCode)
			}
			if tc.want == http.StatusUnauthorized && !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without a Bearer challenge: %q", resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
}

type headerRT map[string]string

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestLineRange(t *testing.T) {
	for _, tc := range []struct {
		text              string
		offset, limit, mx int
		want              string
		start, end, total int
		truncated         bool
	}{
		{"a\nb\nc\n", 0, 0, 100, "a\nb\nc\n", 1, 3, 3, false},
		{"a\nb\nc", 2, 1, 100, "b\n", 2, 2, 3, false},
		{"a\nb\nc\n", 3, 10, 100, "c\n", 3, 3, 3, false},
		{"a\nb\nc\n", 9, 0, 100, "", 9, 8, 3, false},
		{"aaaa\nbbbb\ncccc\n", 0, 0, 10, "aaaa\nbbbb\n", 1, 2, 3, true},
		{"", 0, 0, 10, "", 1, 0, 0, false},
	} {
		got, start, end, total, tr := lineRange(tc.text, tc.offset, tc.limit, tc.mx)
		if got != tc.want || start != tc.start || end != tc.end || total != tc.total || tr != tc.truncated {
			t.Errorf("lineRange(%q, %d, %d, %d) = %q %d %d %d %v", tc.text, tc.offset, tc.limit, tc.mx, got, start, end, total, tr)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, rel string
		want         bool
	}{
		{"*.py", "a/b/c.py", true},
		{"*.py", "c.go", false},
		{"src/**/*.go", "src/x.go", true},
		{"src/**/*.go", "src/a/b/x.go", true},
		{"src/**/*.go", "lib/x.go", false},
		{"**/test_*.py", "a/test_x.py", true},
		{"a/*.txt", "a/b/c.txt", false},
	} {
		if got := globMatch(tc.pattern, tc.rel); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pattern, tc.rel, got)
		}
	}
}

func TestBoundedOutput(t *testing.T) {
	b := newBounded(10)
	for _, c := range "abcdefghijklmnopqrstuvwxyz" {
		b.Write([]byte(string(c)))
	}
	if got := b.String(); got != "abcde\n[… 16 bytes left out …]\nvwxyz" {
		t.Errorf("bounded = %q", got)
	}
	small := newBounded(10)
	small.Write([]byte("hello"))
	if small.String() != "hello" || small.cut != 0 {
		t.Errorf("small = %q", small.String())
	}
}

// TestHTTPEras: one /mcp endpoint serves the stateless 2026-07-28
// revision and legacy initialize clients, with the status codes the spec
// asks for.
func TestHTTPEras(t *testing.T) {
	h := newHutch(t)
	handler, err := NewHTTPHandler(HTTPOptions{Config: sdk.Config{APIURL: h.url}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler)
	defer srv.Close()
	modernMeta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	for _, tc := range []struct {
		name, method, body string
		header             map[string]string
		status             int
		want               string
	}{
		{"modern discover", "POST", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + modernMeta + `}}`,
			map[string]string{"Mcp-Method": "server/discover", "MCP-Protocol-Version": "2026-07-28"}, 200, `"supportedVersions":["2026-07-28","2025-11-25"`},
		{"modern tools/list", "POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + modernMeta + `}}`,
			map[string]string{"Mcp-Method": "tools/list", "MCP-Protocol-Version": "2026-07-28"}, 200, `"resultType":"complete"`},
		{"modern call with a mismatched Mcp-Name", "POST", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_list","arguments":{},` + modernMeta + `}}`,
			map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "file_read", "MCP-Protocol-Version": "2026-07-28"}, 400, `-32020`},
		{"legacy initialize", "POST", `{"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
			nil, 200, `"protocolVersion":"2025-11-25"`},
		{"unsupported version", "POST", `{"jsonrpc":"2.0","id":5,"method":"tools/list","params":{}}`,
			map[string]string{"MCP-Protocol-Version": "1999-01-01"}, 400, ``},
		{"no GET stream", "GET", ``, nil, 405, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+h.keyA)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body strings.Builder
			io.Copy(&body, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(body.String(), tc.want) {
				t.Errorf("%d %s\nwant %d containing %s", resp.StatusCode, body.String(), tc.status, tc.want)
			}
		})
	}
}
