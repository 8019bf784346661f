package platform

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// codeHutch is a control plane and a code interpreter in one fake: it
// knows sandbox "icode" (a code interpreter on port 49999, answering by
// the code it is given) and "ibase" (nothing on 49999: the edge's
// port-closed 502), and records the /execute bodies.
type codeHutch struct {
	t    *testing.T
	srv  *httptest.Server
	mu   sync.Mutex
	runs []map[string]any
	gone chan struct{} // closed when a blocked execution's client left
}

const tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

func newCodeHutch(t *testing.T) *codeHutch {
	h := &codeHutch{t: t, gone: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *codeHutch) serve(w http.ResponseWriter, r *http.Request) {
	if port := r.Header.Get("E2b-Sandbox-Port"); port != "" {
		if port != "49999" {
			http.Error(w, "unexpected port "+port, http.StatusTeapot)
			return
		}
		if r.Header.Get("E2b-Sandbox-Id") != "icode" {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, `{"sandboxId":"ibase","message":"The sandbox is running but port is not open","port":49999,"code":502}`)
			return
		}
		h.interpreter(w, r)
		return
	}
	if id, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v2/sandboxes/"), "/connect"); ok && r.Method == "POST" {
		if id != "icode" && id != "ibase" {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"code":404,"message":"sandbox \"`+id+`\" not found"}`)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"sandboxID": id, "templateID": "code-interpreter-v1", "envdVersion": "0.6.4", "envdAccessToken": "tok", "clientID": "x"})
		return
	}
	http.NotFound(w, r) // the audit report, whose failure is only logged
}

func (h *codeHutch) interpreter(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	if r.URL.Path == "/contexts" && r.Method == "POST" {
		lang, _ := body["language"].(string)
		if lang == "" {
			lang = "python"
		}
		cwd, _ := body["cwd"].(string)
		if cwd == "" {
			cwd = "/home/user"
		}
		if lang == "cobol" {
			http.Error(w, "Unsupported language: cobol", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"id": "ctx-" + lang, "language": lang, "cwd": cwd})
		return
	}
	if r.URL.Path != "/execute" {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	h.runs = append(h.runs, body)
	h.mu.Unlock()
	switch {
	case body["context_id"] == "nope":
		http.Error(w, "Context nope not found", http.StatusNotFound)
		return
	case body["language"] == "cobol":
		http.Error(w, "Unsupported language: cobol", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	send := func(lines ...string) {
		for _, l := range lines {
			io.WriteString(w, l+"\n")
		}
		w.(http.Flusher).Flush()
	}
	const end = `{"type":"number_of_executions","execution_count":3}` + "\n" + `{"type":"end_of_execution"}`
	switch body["code"] {
	case "1+1":
		send(`{"type":"result","is_main_result":true,"text":"2"}`, end)
	case "plot":
		send(`{"type":"stdout","text":"hi\n","timestamp":"2026-01-01T00:00:00Z"}`,
			`{"type":"result","is_main_result":false,"text":"<Figure>","png":"`+tinyPNG+`","chart":{"type":"line","elements":[]}}`,
			`{"type":"result","is_main_result":true,"text":"df","html":"<table/>","data":{"a":[1]},"application/x-custom":{"k":1}}`, end)
	case "1/0":
		send(`{"type":"stdout","text":"before\n","timestamp":"2026-01-01T00:00:00Z"}`,
			`{"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":"\u001b[0;31mTraceback\u001b[0m (most recent call last):\n  1/0\nZeroDivisionError: division by zero"}`, end)
	case "big":
		send(`{"type":"stdout","text":"`+strings.Repeat("x", 100000)+`","timestamp":"2026-01-01T00:00:00Z"}`, end)
	case "sleep":
		send(`{"type":"stdout","text":"started\n","timestamp":"2026-01-01T00:00:00Z"}`)
		select {
		case <-r.Context().Done():
			close(h.gone)
		case <-time.After(30 * time.Second):
			h.t.Error("the execution was not cancelled within 30 s")
		}
	default:
		send(end)
	}
}

// session is an MCP client connected to a platform server acting on the
// fake.
func (h *codeHutch) session(t *testing.T) *mcp.ClientSession {
	c, err := sdk.NewClient(sdk.Config{APIURL: h.srv.URL, APIKey: "e2b_test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{Client: func(context.Context, *mcp.CallToolRequest) (*sdk.Client, error) { return c, nil }})
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.Connect(t.Context(), st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestRunCodeTool(t *testing.T) {
	h := newCodeHutch(t)
	cs := h.session(t)
	for _, tc := range []struct {
		name      string
		args      map[string]any
		isError   bool
		want      RunCodeOutput
		wantText  string         // in the result's text content
		wantBody  map[string]any // the /execute request, when one is made
		wantImage bool
	}{
		{name: "the main result's text", args: map[string]any{"code": "1+1"},
			want:     RunCodeOutput{Stdout: "", Stderr: "", Text: "2", ExecutionCount: 3, Results: []CodeResult{{IsMainResult: true, Formats: []string{"text"}, Text: "2"}}},
			wantBody: map[string]any{"code": "1+1", "context_id": nil, "language": nil, "env_vars": nil}},
		{name: "language, envs and context travel", args: map[string]any{"code": "x", "language": "javascript", "envs": map[string]string{"A": "b"}},
			want:     RunCodeOutput{ExecutionCount: 3, Results: []CodeResult{}},
			wantBody: map[string]any{"code": "x", "context_id": nil, "language": "javascript", "env_vars": map[string]any{"A": "b"}}},
		{name: "a context", args: map[string]any{"code": "x", "context_id": "ctx-python"},
			want:     RunCodeOutput{ExecutionCount: 3, Results: []CodeResult{}},
			wantBody: map[string]any{"code": "x", "context_id": "ctx-python", "language": nil, "env_vars": nil}},
		{name: "display data: an image attached, formats listed", args: map[string]any{"code": "plot"}, wantImage: true,
			want: RunCodeOutput{Stdout: "hi\n", Text: "df", ExecutionCount: 3, Results: []CodeResult{
				{Formats: []string{"text", "png", "chart"}, Text: "<Figure>", Chart: map[string]any{"type": "line", "elements": []any{}}, Attached: map[string]string{"png": "content[1]"}},
				{IsMainResult: true, Formats: []string{"text", "html", "data", "application/x-custom"}, Text: "df", HTML: "<table/>", Data: map[string]any{"a": []any{1.0}},
					Extra: map[string]any{"application/x-custom": map[string]any{"k": 1.0}}},
			}}},
		{name: "a raised error is an error result with its traceback, colours removed", args: map[string]any{"code": "1/0"}, isError: true,
			want: RunCodeOutput{Stdout: "before\n", ExecutionCount: 3, Results: []CodeResult{},
				Error: &CodeError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback (most recent call last):\n  1/0\nZeroDivisionError: division by zero"}},
			wantText: "the code raised ZeroDivisionError: division by zero\nTraceback (most recent call last)"},
		{name: "bounded output", args: map[string]any{"code": "big", "max_output_bytes": 1000},
			want: RunCodeOutput{Stdout: strings.Repeat("x", 500) + "\n[… 99000 bytes left out …]\n" + strings.Repeat("x", 500), ExecutionCount: 3, Results: []CodeResult{}, Truncated: true}},
		{name: "an unknown context", args: map[string]any{"code": "1", "context_id": "nope"}, isError: true, wantText: "no context nope in sandbox icode"},
		{name: "an unknown language", args: map[string]any{"code": "1", "language": "cobol"}, isError: true, wantText: `language "cobol" refused`},
		{name: "language and context", args: map[string]any{"code": "1", "language": "python", "context_id": "c"}, isError: true, wantText: "not both"},
		{name: "empty code", args: map[string]any{"code": " "}, isError: true, wantText: "code is empty"},
		{name: "a bad timeout", args: map[string]any{"code": "1", "timeout_seconds": 7200}, isError: true, wantText: "timeout_seconds must be between"},
		{name: "an unknown sandbox", args: map[string]any{"sandbox_id": "inope", "code": "1"}, isError: true, wantText: "sandbox inope not found"},
		{name: "a sandbox without a code interpreter", args: map[string]any{"sandbox_id": "ibase", "code": "1"}, isError: true, wantText: "runs no code interpreter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.mu.Lock()
			h.runs = nil
			h.mu.Unlock()
			args := map[string]any{"sandbox_id": "icode"}
			for k, v := range tc.args {
				args[k] = v
			}
			res := call(t, cs, "run_code", args)
			if res.IsError != tc.isError || !strings.Contains(text(res), tc.wantText) {
				t.Fatalf("isError %v, text %q; want isError %v and text containing %q", res.IsError, text(res), tc.isError, tc.wantText)
			}
			if tc.want.Results != nil {
				var got RunCodeOutput
				b, _ := json.Marshal(res.StructuredContent)
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					w, _ := json.Marshal(tc.want)
					t.Errorf("structured content\n got %s\nwant %s", b, w)
				}
			}
			if tc.wantImage {
				img, ok := res.Content[1].(*mcp.ImageContent)
				if !ok || img.MIMEType != "image/png" || !strings.HasPrefix(string(img.Data), "\x89PNG") {
					t.Errorf("content[1] = %#v, want the PNG as image content", res.Content[1])
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if tc.wantBody != nil && (len(h.runs) != 1 || !reflect.DeepEqual(h.runs[0], tc.wantBody)) {
				t.Errorf("/execute bodies %v, want %v", h.runs, tc.wantBody)
			}
		})
	}
}

// TestRunCodeToolTimeout: past timeout_seconds the execution's request is
// cancelled (the interpreter sees its client leave and interrupts the
// cell); the call is an error result with the output so far.
func TestRunCodeToolTimeout(t *testing.T) {
	h := newCodeHutch(t)
	cs := h.session(t)
	start := time.Now()
	res := call(t, cs, "run_code", map[string]any{"sandbox_id": "icode", "code": "sleep", "timeout_seconds": 1})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("run_code took %v with timeout_seconds 1", took)
	}
	var out RunCodeOutput
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &out)
	if !res.IsError || !out.TimedOut || out.Stdout != "started\n" || !strings.Contains(text(res), "interrupted") {
		t.Errorf("isError %v, %s, text %q; want a timed-out error result with the output so far", res.IsError, b, text(res))
	}
	select {
	case <-h.gone:
	case <-time.After(5 * time.Second):
		t.Error("the interpreter did not see the request end")
	}
}

func TestCreateCodeContextTool(t *testing.T) {
	h := newCodeHutch(t)
	cs := h.session(t)
	got := ok[CodeContextOutput](t, cs, "create_code_context", map[string]any{"sandbox_id": "icode", "language": "javascript", "cwd": "/tmp"})
	if got != (CodeContextOutput{ContextID: "ctx-javascript", Language: "javascript", Cwd: "/tmp"}) {
		t.Errorf("create_code_context = %+v", got)
	}
	if got := ok[CodeContextOutput](t, cs, "create_code_context", map[string]any{"sandbox_id": "icode"}); got != (CodeContextOutput{ContextID: "ctx-python", Language: "python", Cwd: "/home/user"}) {
		t.Errorf("create_code_context with defaults = %+v", got)
	}
	fails(t, cs, "create_code_context", map[string]any{"sandbox_id": "icode", "language": "cobol"}, `language "cobol" refused`)
	fails(t, cs, "create_code_context", map[string]any{"sandbox_id": "ibase"}, "runs no code interpreter")
}
