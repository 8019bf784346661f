package osbexecd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	procpb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/envdtest"
)

func TestMain(m *testing.M) { envdtest.Main(m) }

// harness is a Handler serving one real sandbox (its envd with an access
// token, as OpenSandbox's sandboxes are made) behind an httptest server,
// which the tests call as the OpenSandbox SDK does.
type harness struct {
	t     *testing.T
	sb    *envdtest.Sandbox
	h     *Handler
	url   string
	token string
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	return newHarnessVia(t, opts, nil)
}

// newHarnessVia is newHarness whose handler reaches envd through
// wrap(transport) (nil: the transport itself).
func newHarnessVia(t *testing.T, opts Options, wrap func(http.RoundTripper) http.RoundTripper) *harness {
	t.Helper()
	sb := envdtest.Start(t)
	token := "osb-test-token"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := envdapi.NewClient(sb.Client.Transport).Init(ctx, envdapi.InitRequest{AccessToken: &token}); err != nil {
		t.Fatalf("init envd: %v", err)
	}
	h := New(opts)
	e := Envd{Transport: sb.Client.Transport, Token: token}
	if wrap != nil {
		e.Transport = wrap(e.Transport)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.Serve(w, r, sb.ID, e)
	}))
	t.Cleanup(func() {
		srv.Close()
		h.Forget(sb.ID)
	})
	return &harness{t: t, sb: sb, h: h, url: srv.URL, token: token}
}

// do sends a request and returns the status, headers and body.
func (hs *harness) do(method, path string, header http.Header, body io.Reader) (int, http.Header, []byte) {
	hs.t.Helper()
	req, err := http.NewRequest(method, hs.url+path, body)
	if err != nil {
		hs.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		hs.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		hs.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// json sends v as JSON (nil: no body).
func (hs *harness) json(method, path string, v any) (int, []byte) {
	hs.t.Helper()
	var body io.Reader
	h := http.Header{}
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			hs.t.Fatal(err)
		}
		body = bytes.NewReader(b)
		h.Set("Content-Type", "application/json")
	}
	status, _, b := hs.do(method, path, h, body)
	return status, b
}

// wantError checks an answer is status with execd's error shape and code
// ("" for any code).
func wantError(t *testing.T, what string, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d (body %s)", what, status, wantStatus, body)
		return
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" || e.Message == "" {
		t.Errorf("%s: body %q is not execd's error shape {code, message}", what, body)
		return
	}
	if wantCode != "" && e.Code != wantCode {
		t.Errorf("%s: code %q, want %q (%s)", what, e.Code, wantCode, e.Message)
	}
}

// sseEvent is a decoded execd stream event.
type sseEvent struct {
	Type          string `json:"type"`
	Text          string `json:"text"`
	ExecutionTime *int64 `json:"execution_time"`
	Timestamp     int64  `json:"timestamp"`
	Error         *struct {
		EName     string   `json:"ename"`
		EValue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// stream is an open event stream.
type stream struct {
	resp   *http.Response
	sc     *bufio.Scanner
	cancel context.CancelFunc
}

// openStream posts body to path with the SDK's SSE headers; a non-200
// answer is returned as status and body instead.
func (hs *harness) openStream(ctx context.Context, path string, body any) (*stream, int, []byte) {
	hs.t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		hs.t.Fatalf("POST %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return nil, resp.StatusCode, rb
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		hs.t.Errorf("Content-Type %q, want text/event-stream", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	return &stream{resp: resp, sc: sc, cancel: cancel}, 200, nil
}

// next returns the next event other than a ping, or nil at the end.
func (s *stream) next(t *testing.T) *sseEvent {
	t.Helper()
	for s.sc.Scan() {
		line := s.sc.Text()
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			if line != "" {
				t.Errorf("stream line %q is not an SSE data line", line)
			}
			continue
		}
		var ev sseEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		if ev.Timestamp == 0 {
			t.Errorf("event %q has no timestamp", data)
		}
		if ev.Type == "ping" {
			continue
		}
		return &ev
	}
	return nil
}

// all reads the stream to its end.
func (s *stream) all(t *testing.T) []sseEvent {
	t.Helper()
	defer s.close()
	var out []sseEvent
	for ev := s.next(t); ev != nil; ev = s.next(t) {
		out = append(out, *ev)
	}
	return out
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// execution is what the Python SDK's dispatcher makes of a stream:
// Execution {id, logs, error, complete} and the exit code it infers.
type execution struct {
	id             string
	stdout, stderr string
	errName        string
	errValue       string
	traceback      []string
	complete       bool
	exitCode       *int
	types          []string
}

func toExecution(events []sseEvent) execution {
	var ex execution
	for _, ev := range events {
		ex.types = append(ex.types, ev.Type)
		switch ev.Type {
		case "init":
			ex.id = ev.Text
		case "stdout":
			ex.stdout += ev.Text
		case "stderr":
			ex.stderr += ev.Text
		case "error":
			if ev.Error != nil {
				ex.errName, ex.errValue, ex.traceback = ev.Error.EName, ev.Error.EValue, ev.Error.Traceback
			}
		case "execution_complete":
			ex.complete = true
		}
	}
	// infer_foreground_exit_code
	if ex.errName != "" {
		var n int
		if err := json.Unmarshal([]byte(ex.errValue), &n); err == nil {
			ex.exitCode = &n
		}
	} else if ex.complete {
		zero := 0
		ex.exitCode = &zero
	}
	return ex
}

// sh runs script in the sandbox as root straight through envd (not the
// handler), for the tests to check what a request did.
func (hs *harness) sh(script string) (string, int) {
	hs.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	no := false
	req := connect.NewRequest(&procpb.StartRequest{Process: &procpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, Stdin: &no})
	req.Header().Set(envdapi.HeaderAccessToken, hs.token)
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	st, err := processconnect.NewProcessClient(hs.sb.Client, "http://envd").Start(ctx, req)
	if err != nil {
		hs.t.Fatalf("sh %q: %v", script, err)
	}
	defer st.Close()
	var out bytes.Buffer
	for st.Receive() {
		ev := st.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			out.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			return out.String(), int(end.GetExitCode())
		}
	}
	hs.t.Fatalf("sh %q: %v", script, st.Err())
	return "", -1
}

// mustSh is sh that fails the test unless script exits 0.
func (hs *harness) mustSh(script string) string {
	hs.t.Helper()
	out, code := hs.sh(script)
	if code != 0 {
		hs.t.Fatalf("sh %q: exit %d: %s", script, code, out)
	}
	return out
}

// query encodes repeated path parameters as httpx does.
func query(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return "?" + v.Encode()
}

// waitStatus polls GET /command/status/{id} until running is false.
func (hs *harness) waitStatus(id string, within time.Duration) commandStatus {
	hs.t.Helper()
	deadline := time.Now().Add(within)
	for {
		status, b := hs.json("GET", "/command/status/"+id, nil)
		if status != 200 {
			hs.t.Fatalf("status of %s: %d %s", id, status, b)
		}
		var st commandStatus
		if err := json.Unmarshal(b, &st); err != nil {
			hs.t.Fatal(err)
		}
		if !st.Running {
			return st
		}
		if time.Now().After(deadline) {
			hs.t.Fatalf("command %s still running after %s", id, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }
