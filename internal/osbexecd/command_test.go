package osbexecd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestForegroundCommands(t *testing.T) {
	hs := newHarness(t, Options{})
	str := func(s string) *string { return &s }
	tests := []struct {
		name       string
		body       runCommandRequest
		wantTypes  []string // event types other than stdout/stderr
		wantStdout string
		wantStderr string
		wantExit   *int // nil: unknown
		wantTrace  string
		maxTime    time.Duration
	}{
		{name: "output and success", body: runCommandRequest{Command: str("echo hello; echo oops >&2")},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: "hello\n", wantStderr: "oops\n", wantExit: ptr(0)},
		{name: "failure", body: runCommandRequest{Command: str("echo partial; exit 3")},
			wantTypes: []string{"init", "error"}, wantStdout: "partial\n", wantExit: ptr(3), wantTrace: "exit status 3"},
		{name: "not found", body: runCommandRequest{Command: str("no-such-command-here")},
			wantTypes: []string{"init", "error"}, wantExit: ptr(127)},
		{name: "cwd", body: runCommandRequest{Command: str("pwd"), Cwd: "/tmp"},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: "/tmp\n", wantExit: ptr(0)},
		{name: "envs", body: runCommandRequest{Command: str(`printf '%s|%s' "$FOO" "$BAR"`), Envs: map[string]string{"FOO": "a b", "BAR": "$HOME"}},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: "a b|$HOME", wantExit: ptr(0)},
		{name: "default user is root", body: runCommandRequest{Command: str("id -u")},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: "0\n", wantExit: ptr(0)},
		{name: "uid", body: runCommandRequest{Command: str("id -un; id -g"), UID: ptr64(1000)},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: "user\n1000\n", wantExit: ptr(0)},
		{name: "uid and its own gid", body: runCommandRequest{Command: str("id -u"), UID: ptr64(1000), GID: ptr64(1000)},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: "1000\n", wantExit: ptr(0)},
		{name: "argv is not shell-expanded", body: runCommandRequest{Argv: []string{"printf", "%s|", "a b", "$HOME", "*"}},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: "a b|$HOME|*|", wantExit: ptr(0)},
		{name: "timeout", body: runCommandRequest{Command: str("echo started; sleep 30"), Timeout: 700},
			wantTypes: []string{"init", "error"}, wantStdout: "started\n", wantExit: ptr(-1), wantTrace: "timed out: signal: killed", maxTime: 10 * time.Second},
		{name: "large output", body: runCommandRequest{Command: str("head -c 300000 /dev/zero | tr '\\0' x")},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: strings.Repeat("x", 300000), wantExit: ptr(0)},
		{name: "multibyte output", body: runCommandRequest{Command: str(`i=0; while [ $i -lt 20000 ]; do printf 'é€'; i=$((i+1)); done`)},
			wantTypes: []string{"init", "execution_complete"}, wantStdout: strings.Repeat("é€", 20000), wantExit: ptr(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			s, status, body := hs.openStream(context.Background(), "/command", tt.body)
			if s == nil {
				t.Fatalf("status %d: %s", status, body)
			}
			ex := toExecution(s.all(t))
			var types []string
			for _, ty := range ex.types {
				if ty != "stdout" && ty != "stderr" {
					types = append(types, ty)
				}
			}
			if !slices.Equal(types, tt.wantTypes) {
				t.Errorf("events %v, want %v", types, tt.wantTypes)
			}
			if ex.id == "" {
				t.Error("init has no command id")
			}
			if ex.stdout != tt.wantStdout {
				t.Errorf("stdout %.200q, want %.200q", ex.stdout, tt.wantStdout)
			}
			if tt.wantStderr != "" && ex.stderr != tt.wantStderr {
				t.Errorf("stderr %q, want %q", ex.stderr, tt.wantStderr)
			}
			if fmt.Sprint(deref(ex.exitCode)) != fmt.Sprint(deref(tt.wantExit)) {
				t.Errorf("exit code %v, want %v (error %s %v)", deref(ex.exitCode), deref(tt.wantExit), ex.errValue, ex.traceback)
			}
			if tt.wantTrace != "" && !slices.Contains(ex.traceback, tt.wantTrace) {
				t.Errorf("traceback %q, want %q", ex.traceback, tt.wantTrace)
			}
			if tt.maxTime > 0 && time.Since(start) > tt.maxTime {
				t.Errorf("took %s, want under %s", time.Since(start), tt.maxTime)
			}
			// The status agrees with the stream.
			st := hs.waitStatus(ex.id, 5*time.Second)
			if st.ID != ex.id || st.FinishedAt == nil || fmt.Sprint(deref(st.ExitCode)) != fmt.Sprint(deref(tt.wantExit)) {
				t.Errorf("status %+v, want id %s, finished, exit %v", st, ex.id, deref(tt.wantExit))
			}
		})
	}
}

func TestCommandRefusals(t *testing.T) {
	hs := newHarness(t, Options{MaxBodyBytes: 4096})
	tests := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"bad JSON", `{"command": `, 400, codeInvalidRequest},
		{"empty body", ``, 400, codeInvalidRequest},
		{"no command", `{"cwd": "/tmp"}`, 400, codeInvalidRequest},
		{"blank command", `{"command": "  "}`, 400, codeInvalidRequest},
		{"command and argv", `{"command": "ls", "argv": ["ls"]}`, 400, codeInvalidRequest},
		{"empty argv[0]", `{"argv": [""]}`, 400, codeInvalidRequest},
		{"negative timeout", `{"command": "ls", "timeout": -1}`, 400, codeInvalidRequest},
		{"gid without uid", `{"command": "ls", "gid": 0}`, 400, codeInvalidRequest},
		{"unknown uid", `{"command": "ls", "uid": 4242}`, 400, codeInvalidRequest},
		{"gid not the user's", `{"command": "ls", "uid": 1000, "gid": 0}`, 400, codeInvalidRequest},
		{"missing cwd", `{"command": "ls", "cwd": "/no/such/dir"}`, 400, codeInvalidRequest},
		{"bad env name", `{"command": "ls", "envs": {"A=B": "x"}}`, 400, codeInvalidRequest},
		{"body too large", `{"command": "` + strings.Repeat("x", 5000) + `"}`, 413, codeTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := hs.do("POST", "/command", jsonHeader(), strings.NewReader(tt.body))
			wantError(t, tt.name, status, body, tt.status, tt.code)
		})
	}
	// Nothing was started: the sandbox keeps no command for them.
	hs.h.mu.Lock()
	st := hs.h.sandboxes[hs.sb.ID]
	hs.h.mu.Unlock()
	if st != nil && len(st.commands) != 0 {
		t.Errorf("refused requests left %d commands", len(st.commands))
	}
}

func TestBackgroundCommand(t *testing.T) {
	hs := newHarness(t, Options{})
	start := time.Now()
	s, status, body := hs.openStream(context.Background(), "/command", map[string]any{
		"command": "echo start; sleep 0.2; echo warn >&2; sleep 0.8; echo done; exit 4", "background": true,
	})
	if s == nil {
		t.Fatalf("status %d: %s", status, body)
	}
	// The SDK stops reading at execution_complete; the stream must end by
	// itself too, before the command does.
	ex := toExecution(s.all(t))
	if !slices.Equal(ex.types, []string{"init", "execution_complete"}) {
		t.Fatalf("events %v, want init and execution_complete only", ex.types)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("the background stream took %s: it waited for the command", d)
	}
	status, b := hs.json("GET", "/command/status/"+ex.id, nil)
	var st commandStatus
	if status != 200 || json.Unmarshal(b, &st) != nil || !st.Running || st.ExitCode != nil || st.FinishedAt != nil {
		t.Errorf("status while running: %d %s", status, b)
	}
	if !strings.Contains(string(b), `"exit_code":null`) || !strings.Contains(string(b), `"finished_at":null`) {
		t.Errorf("a running command's exit_code and finished_at must be null: %s", b)
	}
	st = hs.waitStatus(ex.id, 10*time.Second)
	if deref(st.ExitCode) != 4 || st.Error != "exit status 4" || st.Content != "echo start; sleep 0.2; echo warn >&2; sleep 0.8; echo done; exit 4" {
		t.Errorf("final status %+v", st)
	}

	logs := func(q string) (int, string, string) {
		status, h, b := hs.do("GET", "/command/"+ex.id+"/logs"+q, nil, nil)
		return status, h.Get("EXECD-COMMANDS-TAIL-CURSOR"), string(b)
	}
	all := "start\nwarn\ndone\n"
	tests := []struct {
		query, body, cursor string
	}{
		{"", all, "16"},
		{"?cursor=0", all, "16"},
		{"?cursor=11", "done\n", "16"},
		{"?cursor=16", "", "16"},
		{"?cursor=999", "", "16"},
	}
	for _, tt := range tests {
		status, cursor, body := logs(tt.query)
		if status != 200 || body != tt.body || cursor != tt.cursor {
			t.Errorf("logs%s: %d cursor %q body %q, want cursor %q body %q", tt.query, status, cursor, body, tt.cursor, tt.body)
		}
	}
	status, _, b = hs.do("GET", "/command/"+ex.id+"/logs?cursor=-1", nil, nil)
	wantError(t, "negative cursor", status, b, 400, codeInvalidRequest)

	// A foreground command's output is streamed, not kept.
	fg, _, _ := hs.openStream(context.Background(), "/command", map[string]any{"command": "true"})
	fex := toExecution(fg.all(t))
	status, _, b = hs.do("GET", "/command/"+fex.id+"/logs", nil, nil)
	wantError(t, "foreground logs", status, b, 400, codeInvalidRequest)
	status, b = hs.json("GET", "/command/status/nope", nil)
	wantError(t, "unknown status", status, b, 404, codeContextNotFound)
	status, _, b = hs.do("GET", "/command/nope/logs", nil, nil)
	wantError(t, "unknown logs", status, b, 404, codeContextNotFound)
}

func TestInterrupt(t *testing.T) {
	hs := newHarness(t, Options{})
	background := func(cmd string) string {
		s, status, body := hs.openStream(context.Background(), "/command", map[string]any{"command": cmd, "background": true})
		if s == nil {
			t.Fatalf("status %d: %s", status, body)
		}
		return toExecution(s.all(t)).id
	}
	tests := []struct {
		name     string
		cmd      string
		wantExit int
		minTime  time.Duration // SIGKILL comes after execd's grace
	}{
		{"SIGTERM handled", `trap 'echo got term; exit 7' TERM; echo ready; while :; do sleep 0.1; done`, 7, 0},
		{"SIGTERM ignored: SIGKILL", `trap '' TERM; echo ready; while :; do sleep 0.1; done`, -1, interruptWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := background(tt.cmd)
			// Wait until its trap is set.
			for deadline := time.Now().Add(5 * time.Second); ; {
				_, _, b := hs.do("GET", "/command/"+id+"/logs", nil, nil)
				if strings.Contains(string(b), "ready") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the command never said ready")
				}
				time.Sleep(20 * time.Millisecond)
			}
			start := time.Now()
			status, b := hs.json("DELETE", "/command"+query("id", id), nil)
			if status != 200 {
				t.Fatalf("interrupt: %d %s", status, b)
			}
			if d := time.Since(start); d < tt.minTime {
				t.Errorf("interrupt returned after %s, before the grace of %s", d, tt.minTime)
			}
			st := hs.waitStatus(id, 2*time.Second)
			if deref(st.ExitCode) != tt.wantExit {
				t.Errorf("exit %v (%s), want %d", deref(st.ExitCode), st.Error, tt.wantExit)
			}
			// Interrupting again is a no-op.
			if status, b := hs.json("DELETE", "/command"+query("id", id), nil); status != 200 {
				t.Errorf("second interrupt: %d %s", status, b)
			}
		})
	}

	t.Run("foreground stream ends with the signal", func(t *testing.T) {
		s, status, body := hs.openStream(context.Background(), "/command", map[string]any{"command": "echo up; sleep 60"})
		if s == nil {
			t.Fatalf("status %d: %s", status, body)
		}
		init := s.next(t)
		if init == nil || init.Type != "init" {
			t.Fatalf("first event %+v, want init", init)
		}
		if out := s.next(t); out == nil || out.Text != "up\n" {
			t.Fatalf("second event %+v, want stdout up", out)
		}
		if status, b := hs.json("DELETE", "/command"+query("id", init.Text), nil); status != 200 {
			t.Fatalf("interrupt: %d %s", status, b)
		}
		ex := toExecution(s.all(t))
		if deref(ex.exitCode) != -1 || !slices.Contains(ex.traceback, "signal: terminated") {
			t.Errorf("after interrupt: exit %v traceback %q, want -1 and signal: terminated", deref(ex.exitCode), ex.traceback)
		}
	})

	status, b := hs.json("DELETE", "/command", nil)
	wantError(t, "no id", status, b, 400, codeMissingQuery)
	status, b = hs.json("DELETE", "/command?id=nope", nil)
	wantError(t, "unknown id", status, b, 404, codeContextNotFound)
}

// TestClientDisconnect: as execd, a foreground command dies with its
// request; a background one does not.
func TestClientDisconnect(t *testing.T) {
	hs := newHarness(t, Options{})
	s, status, body := hs.openStream(context.Background(), "/command", map[string]any{"command": "echo $$ > /tmp/fg.pid; echo up; sleep 120"})
	if s == nil {
		t.Fatalf("status %d: %s", status, body)
	}
	init := s.next(t)
	if ev := s.next(t); init == nil || ev == nil || ev.Text != "up\n" {
		t.Fatalf("events %+v %+v", init, ev)
	}
	s.close() // the client goes away
	st := hs.waitStatus(init.Text, 5*time.Second)
	if deref(st.ExitCode) != -1 || st.Error != "signal: killed" {
		t.Errorf("after disconnect: %+v, want killed", st)
	}
	pid := strings.TrimSpace(hs.mustSh("cat /tmp/fg.pid"))
	if out, code := hs.sh("kill -0 " + pid); code == 0 {
		t.Errorf("the foreground command's shell %s still runs after the client left (%s)", pid, out)
	}

	bg, _, _ := hs.openStream(context.Background(), "/command", map[string]any{"command": "sleep 1; echo survived", "background": true})
	id := bg.next(t).Text
	bg.close()
	st = hs.waitStatus(id, 10*time.Second)
	_, _, b := hs.do("GET", "/command/"+id+"/logs", nil, nil)
	if deref(st.ExitCode) != 0 || string(b) != "survived\n" {
		t.Errorf("background command after disconnect: %+v logs %q", st, b)
	}
}

// TestBackgroundLogBounds runs commands whose output is over the bounds:
// the sandbox keeps the last part of each command's output (from the
// last MaxCommandLog/2 bytes to MaxCommandLog), and the output of as many
// commands as MaxSandboxLog/MaxCommandLog; the logs say what went.
func TestBackgroundLogBounds(t *testing.T) {
	hs := newHarness(t, Options{MaxCommandLog: 1000, MaxSandboxLog: 1500})
	run := func(cmd string) string {
		s, status, body := hs.openStream(context.Background(), "/command", map[string]any{"command": cmd, "background": true})
		if s == nil {
			t.Fatalf("status %d: %s", status, body)
		}
		id := toExecution(s.all(t)).id
		hs.waitStatus(id, 10*time.Second)
		return id
	}
	first := run(`i=0; while [ $i -lt 500 ]; do printf '%09d\n' $i; i=$((i+1)); done`) // 5000 bytes
	_, h, b := hs.do("GET", "/command/"+first+"/logs", nil, nil)
	note, rest, _ := strings.Cut(string(b), "\n")
	if !strings.Contains(note, "4500 bytes of earlier output were dropped") || rest != string(seq(450, 500)) {
		t.Errorf("logs over the command bound: note %q, rest %d bytes starting %.20q", note, len(rest), rest)
	}
	if h.Get("EXECD-COMMANDS-TAIL-CURSOR") != "5000" {
		t.Errorf("cursor %q, want 5000", h.Get("EXECD-COMMANDS-TAIL-CURSOR"))
	}
	_, _, b = hs.do("GET", "/command/"+first+"/logs?cursor=4990", nil, nil)
	if string(b) != "000000499\n" {
		t.Errorf("logs from 4990: %q", b)
	}
	// The files are root's, out of the commands' users' reach.
	if got := hs.mustSh("cd /run/hutch-osb && stat -c '%U %a' . " + first + " " + first + "/9"); got != "root 711\nroot 711\nroot 600\n" {
		t.Errorf("owners and modes of the log files: %q", got)
	}
	// A second command's output puts the sandbox over 1500: the first
	// (finished) command's output goes.
	second := run(`i=0; while [ $i -lt 80 ]; do printf '%09d\n' $i; i=$((i+1)); done`)
	_, _, b = hs.do("GET", "/command/"+second+"/logs", nil, nil)
	if string(b) != string(seq(0, 80)) {
		t.Errorf("second command's logs: %d bytes %.40q", len(b), b)
	}
	_, _, b = hs.do("GET", "/command/"+first+"/logs", nil, nil)
	if !strings.HasPrefix(string(b), "[hutch: 5000 bytes of earlier output were dropped") || strings.Count(string(b), "\n") != 1 {
		t.Errorf("first command's logs after the sandbox bound: %q", b)
	}
	if got := hs.mustSh("ls /run/hutch-osb"); got != second+"\n" {
		t.Errorf("the sandbox keeps log directories %q, want only the second command's", got)
	}
}

// countingTransport counts the bytes of envd's answers.
type countingTransport struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestBackgroundOutputStaysInSandbox: what a background command writes
// stays in the sandbox until a client asks for it; the host reads only
// what GET /command/{id}/logs answers. (The output is random, so that
// envd's compression does not hide what crosses.)
func TestBackgroundOutputStaysInSandbox(t *testing.T) {
	var ct *countingTransport
	hs := newHarnessVia(t, Options{}, func(rt http.RoundTripper) http.RoundTripper {
		ct = &countingTransport{rt: rt}
		return ct
	})
	before := ct.n.Load()
	s, status, body := hs.openStream(context.Background(), "/command", map[string]any{
		"command": `head -c 30000000 /dev/urandom | base64 -w0; printf '\nend\n' >&2`, "background": true,
	})
	if s == nil {
		t.Fatalf("status %d: %s", status, body)
	}
	id := toExecution(s.all(t)).id
	st := hs.waitStatus(id, 60*time.Second)
	if deref(st.ExitCode) != 0 {
		t.Fatalf("status %+v", st)
	}
	if got := ct.n.Load() - before; got > 1<<20 {
		t.Errorf("the host read %d MiB from envd while a background command wrote 40 MB nobody asked for", got>>20)
	}
	before = ct.n.Load()
	_, h, b := hs.do("GET", "/command/"+id+"/logs?cursor=0", nil, nil)
	note, rest, _ := strings.Cut(string(b), "\n")
	out, ok := strings.CutSuffix(rest, "\nend\n")
	if !strings.Contains(note, "bytes of earlier output were dropped") || !ok || strings.Contains(out, "\n") || len(rest) < 512<<10 || len(rest) > 1<<20 {
		t.Errorf("logs: note %q, then %d bytes ending %q", note, len(rest), rest[max(0, len(rest)-20):])
	}
	if c := h.Get("EXECD-COMMANDS-TAIL-CURSOR"); c != "40000005" {
		t.Errorf("cursor %q, want 40000005", c)
	}
	if got := ct.n.Load() - before; got > 2<<20 {
		t.Errorf("reading the logs took %d MiB from envd", got>>20)
	}
}

// TestBackgroundAsUser: a background command of another user writes its
// output, and cannot reach the kept files of any command.
func TestBackgroundAsUser(t *testing.T) {
	hs := newHarness(t, Options{})
	run := func(body map[string]any) string {
		s, status, b := hs.openStream(context.Background(), "/command", body)
		if s == nil {
			t.Fatalf("status %d: %s", status, b)
		}
		id := toExecution(s.all(t)).id
		hs.waitStatus(id, 10*time.Second)
		return id
	}
	secret := run(map[string]any{"command": "echo secret", "background": true})
	id := run(map[string]any{"command": `id -un
cat /run/hutch-osb/` + secret + `/0 >/dev/null 2>&1 || echo no read
ls /run/hutch-osb >/dev/null 2>&1 || echo no list
{ : > /run/hutch-osb/x; } 2>/dev/null || echo no write`, "background": true, "uid": 1000})
	if _, _, b := hs.do("GET", "/command/"+id+"/logs", nil, nil); string(b) != "user\nno read\nno list\nno write\n" {
		t.Errorf("logs of a command as uid 1000: %q", b)
	}
	if _, _, b := hs.do("GET", "/command/"+secret+"/logs", nil, nil); string(b) != "secret\n" {
		t.Errorf("logs of the first command: %q", b)
	}
}

// TestBackgroundOutputOrder: stdout and stderr of a background command
// are kept in the order the command wrote them.
func TestBackgroundOutputOrder(t *testing.T) {
	hs := newHarness(t, Options{})
	s, status, body := hs.openStream(context.Background(), "/command", map[string]any{
		"command": `i=0; while [ $i -lt 300 ]; do echo o$i; echo e$i >&2; i=$((i+1)); done`, "background": true,
	})
	if s == nil {
		t.Fatalf("status %d: %s", status, body)
	}
	id := toExecution(s.all(t)).id
	hs.waitStatus(id, 10*time.Second)
	_, _, b := hs.do("GET", "/command/"+id+"/logs", nil, nil)
	var want strings.Builder
	for i := range 300 {
		fmt.Fprintf(&want, "o%d\ne%d\n", i, i)
	}
	if string(b) != want.String() {
		t.Errorf("logs are not in the order written: %.80q", b)
	}
}

func seq(from, to int) []byte {
	var b []byte
	for i := from; i < to; i++ {
		b = fmt.Appendf(b, "%09d\n", i)
	}
	return b
}

func ptr(n int) *int       { return &n }
func ptr64(n int64) *int64 { return &n }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
