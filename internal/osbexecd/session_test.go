package osbexecd

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestSessions(t *testing.T) {
	hs := newHarness(t, Options{MaxSessions: 3})
	create := func(body string) string {
		t.Helper()
		status, _, b := hs.do("POST", "/session", jsonHeader(), strings.NewReader(body))
		var resp struct {
			SessionID string `json:"session_id"`
		}
		if status != 200 || json.Unmarshal(b, &resp) != nil || resp.SessionID == "" {
			t.Fatalf("create session %s: %d %s", body, status, b)
		}
		return resp.SessionID
	}
	run := func(id string, body map[string]any) execution {
		t.Helper()
		s, status, b := hs.openStream(context.Background(), "/session/"+id+"/run", body)
		if s == nil {
			t.Fatalf("run %v: %d %s", body, status, b)
		}
		return toExecution(s.all(t))
	}

	id := create(`{"cwd": "/tmp/sess"}`)
	steps := []struct {
		body       map[string]any
		wantStdout string
		wantExit   int
	}{
		{map[string]any{"command": "pwd; mkdir -p sub && cd sub; export GREETING='hi there'; UNEXPORTED=1"}, "/tmp/sess\n", 0},
		{map[string]any{"command": `pwd; echo "$GREETING|$UNEXPORTED"`}, "/tmp/sess/sub\nhi there|\n", 0},
		{map[string]any{"command": "pwd", "cwd": "/"}, "/\n", 0},
		{map[string]any{"command": "export MULTI=\"$(printf 'a\\nb')\"; false"}, "", 1},
		{map[string]any{"command": `printf '%s' "$MULTI"; exit 5`}, "a\nb", 5},
		{map[string]any{"command": "cd /; export AFTER_EXIT=1"}, "", 0},
		{map[string]any{"command": "echo $AFTER_EXIT; sleep 30", "timeout": 300}, "1\n", -1},
		{map[string]any{"command": "pwd"}, "/\n", 0},
	}
	for i, st := range steps {
		ex := run(id, st.body)
		if ex.id != id {
			t.Errorf("step %d: init %q, want the session id", i, ex.id)
		}
		if ex.stdout != st.wantStdout || deref(ex.exitCode) != st.wantExit {
			t.Errorf("step %d %v: stdout %q exit %v, want %q %d (%v)", i, st.body["command"], ex.stdout, deref(ex.exitCode), st.wantStdout, st.wantExit, ex.traceback)
		}
	}
	// No state file is left behind.
	if out := hs.mustSh("ls -a /tmp | grep hutch-osb || true"); out != "" {
		t.Errorf("state files left: %q", out)
	}

	empty := create(``)
	if ex := run(empty, map[string]any{"command": "pwd"}); ex.stdout != "/root\n" {
		t.Errorf("a session without cwd starts in the user's home: %q", ex.stdout)
	}
	create(`{}`)
	status, _, b := hs.do("POST", "/session", jsonHeader(), strings.NewReader(`{}`))
	wantError(t, "too many sessions", status, b, 429, codeTooMany)

	// Deleting a session kills its run.
	s, _, _ := hs.openStream(context.Background(), "/session/"+empty+"/run", map[string]any{"command": "echo up; sleep 60"})
	if ev := s.next(t); ev == nil || ev.Type != "init" {
		t.Fatalf("first event %+v", ev)
	}
	if ev := s.next(t); ev == nil || ev.Text != "up\n" {
		t.Fatalf("second event %+v", ev)
	}
	start := time.Now()
	if status, b := hs.json("DELETE", "/session/"+empty, nil); status != 200 {
		t.Fatalf("delete: %d %s", status, b)
	}
	if ex := toExecution(s.all(t)); deref(ex.exitCode) != -1 || time.Since(start) > 5*time.Second {
		t.Errorf("the run of a deleted session: exit %v after %s", deref(ex.exitCode), time.Since(start))
	}

	for _, tc := range []struct {
		name, method, path, body string
		st                       int
		code                     string
	}{
		{"run in a deleted session", "POST", "/session/" + empty + "/run", `{"command": "true"}`, 404, codeContextNotFound},
		{"delete twice", "DELETE", "/session/" + empty, ``, 404, codeContextNotFound},
		{"unknown session", "POST", "/session/nope/run", `{"command": "true"}`, 404, codeContextNotFound},
		{"no command", "POST", "/session/" + id + "/run", `{"cwd": "/"}`, 400, codeInvalidRequest},
		{"bad JSON", "POST", "/session/" + id + "/run", `{`, 400, codeInvalidRequest},
		{"bad create body", "POST", "/session", `[1]`, 400, codeInvalidRequest},
		{"missing cwd", "POST", "/session/" + id + "/run", `{"command": "true", "cwd": "/no/where"}`, 400, codeInvalidRequest},
	} {
		status, _, b := hs.do(tc.method, tc.path, jsonHeader(), strings.NewReader(tc.body))
		wantError(t, tc.name, status, b, tc.st, tc.code)
	}
}

func TestPingMetricsAndRouting(t *testing.T) {
	hs := newHarness(t, Options{MetricsInterval: 200 * time.Millisecond})
	if status, _, b := hs.do("GET", "/ping", nil, nil); status != 200 {
		t.Errorf("ping: %d %s", status, b)
	}
	status, b := hs.json("GET", "/metrics", nil)
	var m metricsBody
	if status != 200 || json.Unmarshal(b, &m) != nil {
		t.Fatalf("metrics: %d %s", status, b)
	}
	for _, k := range []string{"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"} {
		if !strings.Contains(string(b), `"`+k+`"`) {
			t.Errorf("metrics lack %s: %s", k, b)
		}
	}
	if m.CPUCount < 1 || m.MemTotalMiB <= 0 || m.MemUsedMiB <= 0 || m.MemUsedMiB > m.MemTotalMiB || time.Since(time.UnixMilli(m.Timestamp)) > time.Minute {
		t.Errorf("metrics %+v", m)
	}

	// /metrics/watch: events until the client leaves.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.url+"/metrics/watch", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("watch: %v %v", err, resp)
	}
	sc := bufio.NewScanner(resp.Body)
	var stamps []int64
	for len(stamps) < 3 && sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var ev metricsBody
			if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.CPUCount < 1 {
				t.Fatalf("watch event %q", data)
			}
			stamps = append(stamps, ev.Timestamp)
		}
	}
	cancel()
	resp.Body.Close()
	if len(stamps) != 3 || stamps[2] <= stamps[0] {
		t.Errorf("watch events %v", stamps)
	}

	for _, tc := range []struct {
		method, path string
		st           int
		code         string
	}{
		{"GET", "/nope", 404, codeNotFound},
		{"GET", "/", 404, codeNotFound},
		{"GET", "/files/upload", 405, codeMethodNotAllowed},
		{"PUT", "/command", 405, codeMethodNotAllowed},
		{"POST", "/code", 501, codeNotSupported},
		{"POST", "/code/context", 501, codeNotSupported},
		{"GET", "/code/contexts?language=python", 501, codeNotSupported},
		{"DELETE", "/code/contexts/abc", 501, codeNotSupported},
		{"POST", "/pty", 501, codeNotSupported},
		{"POST", "/command/operations", 501, codeNotSupported},
		{"GET", "/execution/instance", 501, codeNotSupported},
		{"POST", "/v1/isolated/session", 503, codeNotSupported},
		{"GET", "/v1/filesystem/0/0/files/info?path=/", 501, codeNotSupported},
	} {
		status, _, b := hs.do(tc.method, tc.path, nil, nil)
		wantError(t, tc.method+" "+tc.path, status, b, tc.st, tc.code)
	}
	status, b = hs.json("GET", "/v1/isolated/capabilities", nil)
	if status != 200 || !strings.Contains(string(b), `"available":false`) {
		t.Errorf("capabilities: %d %s", status, b)
	}
}

// TestSandboxGone: requests for a sandbox whose envd does not answer are
// 503 in execd's shape, and its command records go with Forget.
func TestSandboxGone(t *testing.T) {
	h := New(Options{})
	rt := http.RoundTripper(roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errConnRefused }))
	for _, path := range []string{"/ping", "/files/download?path=/etc/hosts", "/files/info?path=/"} {
		w := newRecorder()
		h.Serve(w, httpRequest("GET", path), "gone", Envd{Transport: rt})
		wantError(t, path, w.Code, w.Body.Bytes(), 503, codeUnavailable)
	}
	w := newRecorder()
	h.Serve(w, httptest.NewRequest("POST", "/command", strings.NewReader(`{"command": "true"}`)), "gone", Envd{Transport: rt})
	wantError(t, "POST /command", w.Code, w.Body.Bytes(), 503, codeUnavailable)
	h.mu.Lock()
	kept := len(h.sandboxes)
	h.mu.Unlock()
	if kept != 1 {
		t.Errorf("a command request keeps state for its sandbox: %d sandboxes", kept)
	}
	h.Forget("gone")
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sandboxes) != 0 {
		t.Errorf("Forget left %d sandboxes", len(h.sandboxes))
	}
}
