package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeInterpreter is a code interpreter server as protocol.md describes
// it, behind `hutch serve`'s port routing: it checks the routing headers
// and answers each request with the handler the test gives.
type fakeInterpreter struct {
	t      *testing.T
	srv    *httptest.Server
	handle func(w http.ResponseWriter, r *http.Request, body map[string]any)

	mu       sync.Mutex
	requests []string         // "METHOD path"
	bodies   []map[string]any // the JSON bodies, in order
	tokens   []string         // X-Access-Token of each request
	gone     chan struct{}    // closed when a handler saw its client leave
}

func newFakeInterpreter(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body map[string]any)) (*fakeInterpreter, *Sandbox) {
	t.Helper()
	f := &fakeInterpreter{t: t, handle: handle, gone: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	c, err := NewClient(Config{APIKey: "k", APIURL: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	sb := e2bapiSandbox("isbx", "envd-token")
	traffic := "traffic-token"
	sb.TrafficAccessToken = &traffic
	return f, c.newSandbox(sb)
}

func (f *fakeInterpreter) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("E2b-Sandbox-Id") != "isbx" || r.Header.Get("E2b-Sandbox-Port") != "49999" || r.Header.Get("E2b-Traffic-Access-Token") != "traffic-token" {
		f.t.Errorf("%s %s: routing headers %v", r.Method, r.URL.Path, r.Header)
		http.Error(w, "not routed", http.StatusBadGateway)
		return
	}
	var body map[string]any
	if r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		if len(b) > 0 {
			if err := json.Unmarshal(b, &body); err != nil || r.Header.Get("Content-Type") != "application/json" {
				f.t.Errorf("%s: body %q (%s): %v", r.URL.Path, b, r.Header.Get("Content-Type"), err)
			}
		}
	}
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	f.bodies = append(f.bodies, body)
	f.tokens = append(f.tokens, r.Header.Get("X-Access-Token"))
	f.mu.Unlock()
	f.handle(w, r, body)
}

// stream answers /execute with lines, as the server streams them.
func stream(lines ...string) func(w http.ResponseWriter, r *http.Request, body map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		for _, l := range lines {
			io.WriteString(w, l+"\n")
			w.(http.Flusher).Flush()
		}
	}
}

const (
	lineStdout  = `{"type":"stdout","text":"hello\n","timestamp":"2026-01-02T03:04:05.123456Z"}`
	lineStderr  = `{"type":"stderr","text":"careful\n","timestamp":"2026-01-02T03:04:05.5Z"}`
	lineDisplay = `{"type":"result","is_main_result":false,"png":"iVBORw0KGgo=","text":"<Figure size 640x480 with 1 Axes>","chart":{"type":"line","title":"t","elements":[]}}`
	lineMain    = `{"type":"result","is_main_result":true,"text":"42","html":"<b>42</b>","json":{"a":1},"data":{"x":[1,2]},"latex":"$42$","extra":{"application/vnd.custom":"c"},"text/x-other":"o"}`
	lineCount   = `{"type":"number_of_executions","execution_count":7}`
	lineEnd     = `{"type":"end_of_execution"}`
	lineError   = `{"type":"error","name":"ZeroDivisionError","value":"division by zero","traceback":"Traceback (most recent call last):\n  1/0\nZeroDivisionError: division by zero"}`
)

func TestRunCode(t *testing.T) {
	display := Result{Text: "<Figure size 640x480 with 1 Axes>", PNG: "iVBORw0KGgo=", Chart: json.RawMessage(`{"type":"line","title":"t","elements":[]}`)}
	main := Result{Text: "42", HTML: "<b>42</b>", LaTeX: "$42$", JSON: json.RawMessage(`{"a":1}`), Data: json.RawMessage(`{"x":[1,2]}`),
		Extra: map[string]json.RawMessage{"application/vnd.custom": json.RawMessage(`"c"`), "text/x-other": json.RawMessage(`"o"`)}, IsMainResult: true}
	for _, tc := range []struct {
		name      string
		opts      RunCodeOptions
		handle    func(w http.ResponseWriter, r *http.Request, body map[string]any)
		wantBody  map[string]any
		want      *Execution
		wantText  string
		wantKind  error  // nil: RunCode succeeds
		wantMsg   string // in the error's message
		wantCalls []string
	}{
		{
			name:     "output, results and callbacks in order",
			opts:     RunCodeOptions{Envs: map[string]string{"A": "1"}},
			handle:   stream(lineStdout, lineStderr, lineDisplay, lineMain, lineCount, lineEnd),
			wantBody: map[string]any{"code": "print('hello'); 42", "context_id": nil, "language": nil, "env_vars": map[string]any{"A": "1"}},
			want: &Execution{Results: []Result{display, main}, Logs: Logs{Stdout: []string{"hello\n"}, Stderr: []string{"careful\n"}},
				ExecutionCount: 7},
			wantText: "42",
			wantCalls: []string{"stdout hello\n 2026-01-02T03:04:05.123456Z", "stderr careful\n 2026-01-02T03:04:05.5Z",
				"result main=false text,png,chart", "result main=true text,html,latex,json,data,application/vnd.custom,text/x-other"},
		},
		{
			name:     "the language",
			opts:     RunCodeOptions{Language: "javascript"},
			handle:   stream(lineEnd),
			wantBody: map[string]any{"code": "print('hello'); 42", "context_id": nil, "language": "javascript", "env_vars": nil},
			want:     &Execution{Results: []Result{}, Logs: Logs{Stdout: []string{}, Stderr: []string{}}},
		},
		{
			name:     "a context",
			opts:     RunCodeOptions{Context: &CodeContext{ID: "ctx-1", Language: "python", Cwd: "/tmp"}},
			handle:   stream(lineEnd),
			wantBody: map[string]any{"code": "print('hello'); 42", "context_id": "ctx-1", "language": nil, "env_vars": nil},
			want:     &Execution{Results: []Result{}, Logs: Logs{Stdout: []string{}, Stderr: []string{}}},
		},
		{
			name:   "a raised error is the execution's, not RunCode's",
			handle: stream(lineStdout, lineError, lineCount, lineEnd),
			want: &Execution{Results: []Result{}, Logs: Logs{Stdout: []string{"hello\n"}, Stderr: []string{}}, ExecutionCount: 7,
				Error: &ExecutionError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback (most recent call last):\n  1/0\nZeroDivisionError: division by zero"}},
			wantCalls: []string{"stdout hello\n 2026-01-02T03:04:05.123456Z", "error ZeroDivisionError: division by zero"},
		},
		{
			name: "other servers: traceback as lines, timestamps as Unix numbers, unknown types and blank lines",
			handle: stream(`{"type":"stdout","text":"ns","timestamp":1767323045000000000}`, `{"type":"stdout","text":"us","timestamp":1767323045123456}`,
				`{"type":"stderr","text":"ms","timestamp":1767323045123}`, `{"type":"stderr","text":"s","timestamp":1767323045.5}`, ``, `{"type":"heartbeat"}`,
				`{"type":"error","name":"E","value":"v","traceback":["a","b"]}`, lineEnd),
			want: &Execution{Results: []Result{}, Logs: Logs{Stdout: []string{"ns", "us"}, Stderr: []string{"ms", "s"}},
				Error: &ExecutionError{Name: "E", Value: "v", Traceback: "a\nb"}},
			wantCalls: []string{"stdout ns 2026-01-02T03:04:05Z", "stdout us 2026-01-02T03:04:05.123456Z",
				"stderr ms 2026-01-02T03:04:05.123Z", "stderr s 2026-01-02T03:04:05.5Z", "error E: v"},
		},
		{
			name: "an unknown context is ErrNotFound with the server's text",
			opts: RunCodeOptions{Context: &CodeContext{ID: "nope"}},
			handle: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				http.Error(w, "Context nope not found", http.StatusNotFound)
			},
			wantKind: ErrNotFound, wantMsg: "Context nope not found",
		},
		{
			name: "an unknown language is ErrInvalidArgument",
			opts: RunCodeOptions{Language: "cobol"},
			handle: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				http.Error(w, "Unsupported language: cobol", http.StatusBadRequest)
			},
			wantKind: ErrInvalidArgument, wantMsg: "Unsupported language: cobol",
		},
		{
			name: "a sandbox without a code interpreter (the edge's port-closed 502)",
			handle: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, `{"sandboxId":"isbx","message":"The sandbox is running but port is not open","port":49999,"code":502}`)
			},
			wantKind: ErrUnavailable, wantMsg: "runs no code interpreter",
		},
		{
			name: "a sandbox that is gone (the edge's 502)",
			handle: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, `{"sandboxId":"isbx","message":"The sandbox was not found","code":502}`)
			},
			wantKind: ErrNotRunning, wantMsg: "The sandbox was not found",
		},
		{
			name:    "a stream cut before end_of_execution",
			handle:  stream(lineStdout),
			want:    &Execution{Results: []Result{}, Logs: Logs{Stdout: []string{"hello\n"}, Stderr: []string{}}},
			wantMsg: "ended before the execution did", wantCalls: []string{"stdout hello\n 2026-01-02T03:04:05.123456Z"},
		},
		{
			name:    "a malformed line",
			handle:  stream(lineStdout, `{"type":`),
			want:    &Execution{Results: []Result{}, Logs: Logs{Stdout: []string{"hello\n"}, Stderr: []string{}}},
			wantMsg: "malformed execution stream", wantCalls: []string{"stdout hello\n 2026-01-02T03:04:05.123456Z"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, sbx := newFakeInterpreter(t, tc.handle)
			var calls []string
			opts := tc.opts
			opts.OnStdout = func(m OutputMessage) {
				calls = append(calls, fmt.Sprintf("stdout %s %s", m.Line, m.Timestamp.UTC().Format(time.RFC3339Nano)))
			}
			opts.OnStderr = func(m OutputMessage) {
				calls = append(calls, fmt.Sprintf("stderr %s %s", m.Line, m.Timestamp.UTC().Format(time.RFC3339Nano)))
			}
			opts.OnResult = func(r Result) {
				calls = append(calls, fmt.Sprintf("result main=%v %s", r.IsMainResult, strings.Join(r.Formats(), ",")))
			}
			opts.OnError = func(e ExecutionError) { calls = append(calls, "error "+e.Error()) }
			exec, err := sbx.RunCode(t.Context(), "print('hello'); 42", &opts)
			switch {
			case tc.wantMsg == "" && err != nil:
				t.Fatalf("RunCode: %v", err)
			case tc.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantMsg)):
				t.Fatalf("RunCode: error %v, want one saying %q", err, tc.wantMsg)
			case tc.wantKind != nil && !errors.Is(err, tc.wantKind):
				t.Fatalf("RunCode: error %v, want one matching %v", err, tc.wantKind)
			}
			if tc.want != nil {
				if exec == nil {
					t.Fatal("RunCode: no execution")
				}
				if !reflect.DeepEqual(exec, tc.want) {
					got, _ := json.Marshal(exec)
					want, _ := json.Marshal(tc.want)
					t.Errorf("execution\n got %s\nwant %s", got, want)
				}
				if exec.Text() != tc.wantText {
					t.Errorf("Text() = %q, want %q", exec.Text(), tc.wantText)
				}
			} else if exec != nil {
				t.Errorf("an execution with a failed request: %+v", exec)
			}
			if !sameCalls(calls, tc.wantCalls) {
				t.Errorf("callbacks\n got %q\nwant %q", calls, tc.wantCalls)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.requests) != 1 || f.requests[0] != "POST /execute" || f.tokens[0] != "envd-token" {
				t.Errorf("requests %v with tokens %q; want one POST /execute with the envd access token", f.requests, f.tokens)
			}
			if tc.wantBody != nil && !reflect.DeepEqual(f.bodies[0], tc.wantBody) {
				t.Errorf("request body %v, want %v", f.bodies[0], tc.wantBody)
			}
		})
	}
}

// sameCalls compares callback records, the formats of a result (whose
// Extra keys come in map order) as sets.
func sameCalls(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] == want[i] {
			continue
		}
		g, w := strings.Fields(got[i]), strings.Fields(want[i])
		if len(g) != 3 || len(w) != 3 || g[0] != "result" || g[1] != w[1] || !sameSet(strings.Split(g[2], ","), strings.Split(w[2], ",")) {
			return false
		}
	}
	return true
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}

// TestRunCodeRefusesContextAndLanguage: both is an error before any
// request, as in E2B's SDKs.
func TestRunCodeRefusesContextAndLanguage(t *testing.T) {
	f, sbx := newFakeInterpreter(t, stream(lineEnd))
	_, err := sbx.RunCode(t.Context(), "1", &RunCodeOptions{Language: "python", Context: &CodeContext{ID: "c"}})
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("RunCode with a context and a language: %v, want ErrInvalidArgument", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) != 0 {
		t.Errorf("requests made: %v", f.requests)
	}
}

// TestRunCodeTimeout: when Timeout passes, RunCode cancels the request
// (the server sees its client leave, which is what makes it interrupt the
// cell), returns what arrived with an ErrTimeout that says the execution
// timed out; a context cancelled by the caller is not a timeout.
func TestRunCodeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		cancel   time.Duration // the caller cancels its context after this long; 0: never
		wantKind error
		wantMsg  string
		wantCtx  error
	}{
		{"Timeout", 300 * time.Millisecond, 0, ErrTimeout, "execution timed out after 300ms", context.DeadlineExceeded},
		{"the caller's cancel", time.Minute, 300 * time.Millisecond, nil, "context canceled", context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, sbx := newFakeInterpreter(t, nil)
			f.handle = func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				stream(lineStdout)(w, r, nil)
				select {
				case <-r.Context().Done():
					close(f.gone)
				case <-time.After(30 * time.Second):
					t.Error("the request was not cancelled within 30 s")
				}
			}
			ctx := t.Context()
			if tc.cancel > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				time.AfterFunc(tc.cancel, cancel)
			}
			start := time.Now()
			exec, err := sbx.RunCode(ctx, "while True: pass", &RunCodeOptions{Timeout: tc.timeout})
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.wantMsg) || !errors.Is(err, tc.wantCtx) || (tc.wantKind != nil && !errors.Is(err, tc.wantKind)) {
				t.Fatalf("RunCode: %v; want an error saying %q matching %v", err, tc.wantMsg, tc.wantCtx)
			}
			if tc.wantKind == nil && errors.Is(err, ErrTimeout) {
				t.Errorf("a cancel reported as a timeout: %v", err)
			}
			if took < 250*time.Millisecond || took > 5*time.Second {
				t.Errorf("RunCode returned after %v", took)
			}
			if exec == nil || len(exec.Logs.Stdout) != 1 {
				t.Errorf("execution so far: %+v, want the stdout that arrived", exec)
			}
			select {
			case <-f.gone:
			case <-time.After(5 * time.Second):
				t.Error("the server did not see the request end")
			}
		})
	}
}

// TestCodeContexts: create, list, restart and remove, the JSON they send
// and read, and 404s as ErrNotFound; none sends the envd token (only
// /execute does).
func TestCodeContexts(t *testing.T) {
	contexts := map[string]CodeContext{"python-default": {ID: "python-default", Language: "python", Cwd: "/home/user"}}
	var mu sync.Mutex
	f, sbx := newFakeInterpreter(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/contexts/"), "/restart")
		switch {
		case r.Method == "POST" && r.URL.Path == "/contexts":
			c := CodeContext{ID: fmt.Sprintf("ctx-%d", len(contexts)), Language: "python", Cwd: "/home/user"}
			if l, ok := body["language"].(string); ok {
				c.Language = l
			}
			if d, ok := body["cwd"].(string); ok {
				c.Cwd = d
			}
			contexts[c.ID] = c
			json.NewEncoder(w).Encode(c)
		case r.Method == "GET" && r.URL.Path == "/contexts":
			list := []CodeContext{}
			for _, c := range contexts {
				list = append(list, c)
			}
			json.NewEncoder(w).Encode(list)
		case contexts[id].ID == "":
			http.Error(w, "Context "+id+" not found", http.StatusNotFound)
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/restart"):
			w.WriteHeader(http.StatusOK)
		case r.Method == "DELETE":
			delete(contexts, id)
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, "no route", http.StatusMethodNotAllowed)
		}
	})
	ctx := t.Context()
	js, err := sbx.CreateCodeContext(ctx, "javascript", "/tmp")
	if err != nil || *js != (CodeContext{ID: "ctx-1", Language: "javascript", Cwd: "/tmp"}) {
		t.Fatalf("CreateCodeContext(javascript, /tmp) = %+v, %v", js, err)
	}
	def, err := sbx.CreateCodeContext(ctx, "", "")
	if err != nil || *def != (CodeContext{ID: "ctx-2", Language: "python", Cwd: "/home/user"}) {
		t.Fatalf("CreateCodeContext() = %+v, %v", def, err)
	}
	if list, err := sbx.ListCodeContexts(ctx); err != nil || len(list) != 3 {
		t.Errorf("ListCodeContexts = %+v, %v", list, err)
	}
	if err := sbx.RestartCodeContext(ctx, js.ID); err != nil {
		t.Errorf("RestartCodeContext: %v", err)
	}
	if err := sbx.RemoveCodeContext(ctx, js.ID); err != nil {
		t.Errorf("RemoveCodeContext: %v", err)
	}
	for what, err := range map[string]error{
		"RemoveCodeContext again": sbx.RemoveCodeContext(ctx, js.ID),
		"RestartCodeContext":      sbx.RestartCodeContext(ctx, "nope"),
	} {
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "not found") {
			t.Errorf("%s of an unknown context: %v, want ErrNotFound with the server's text", what, err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	wantBodies := []map[string]any{{"language": "javascript", "cwd": "/tmp"}, {"language": nil, "cwd": nil}}
	if !reflect.DeepEqual(f.bodies[:2], wantBodies) {
		t.Errorf("create bodies %v, want %v", f.bodies[:2], wantBodies)
	}
	want := []string{"POST /contexts", "POST /contexts", "GET /contexts", "POST /contexts/ctx-1/restart", "DELETE /contexts/ctx-1"}
	if !reflect.DeepEqual(f.requests[:5], want) {
		t.Errorf("requests %v, want %v first", f.requests, want)
	}
	for i, tok := range f.tokens {
		if tok != "" {
			t.Errorf("%s sent the envd access token", f.requests[i])
		}
	}
}

// TestResultJSON: a Result marshals back into the protocol's keys.
func TestResultJSON(t *testing.T) {
	var r Result
	if err := json.Unmarshal([]byte(lineMain), &r); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("round trip: %s → %+v (%v), want %+v", b, back, err, r)
	}
}
