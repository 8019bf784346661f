package process_test

// The process service, tested against a real envd in a real sandbox with
// the generated connect-go client in JSON mode (as the E2B SDKs speak).

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/envdtest"
)

func TestMain(m *testing.M) { envdtest.Main(m) }

// result is what one Start or Connect stream delivered.
type result struct {
	pid            uint32
	stdout, stderr string
	pty            string
	end            *pb.ProcessEvent_EndEvent
	keepalives     int
	err            error
}

// collect reads a stream of process events to its end.
func collect[T any](stream *connect.ServerStreamForClient[T]) result {
	var r result
	for stream.Receive() {
		msg := any(stream.Msg()).(interface{ GetEvent() *pb.ProcessEvent })
		switch ev := msg.GetEvent().GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			r.pid = ev.Start.GetPid()
		case *pb.ProcessEvent_Data:
			r.stdout += string(ev.Data.GetStdout())
			r.stderr += string(ev.Data.GetStderr())
			r.pty += string(ev.Data.GetPty())
		case *pb.ProcessEvent_End:
			r.end = ev.End
		case *pb.ProcessEvent_Keepalive:
			r.keepalives++
		}
	}
	r.err = stream.Err()
	return r
}

func bash(cmd string) *pb.ProcessConfig {
	return &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}
}

func ptr[T any](v T) *T { return &v }

func basicUser(name string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))
}

func newClient(s *envdtest.Sandbox) processconnect.ProcessClient {
	return processconnect.NewProcessClient(s.Client, s.URL, connect.WithProtoJSON())
}

func run(t *testing.T, c processconnect.ProcessClient, msg *pb.StartRequest, hdr map[string]string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := connect.NewRequest(msg)
	for k, v := range hdr {
		req.Header().Set(k, v)
	}
	stream, err := c.Start(ctx, req)
	if err != nil {
		return result{err: err}
	}
	return collect(stream)
}

func TestStart(t *testing.T) {
	s := envdtest.Start(t)
	c := newClient(s)
	tests := []struct {
		name       string
		msg        *pb.StartRequest
		hdr        map[string]string
		wantOut    string
		wantErr    string
		wantCode   int32
		wantStatus string
		wantConn   connect.Code
	}{
		{name: "output and exit", msg: &pb.StartRequest{Process: bash("echo hi; echo oops >&2; exit 3"), Stdin: ptr(false)},
			wantOut: "hi\n", wantErr: "oops\n", wantCode: 3, wantStatus: "exit status 3"},
		{name: "default user and home", msg: &pb.StartRequest{Process: bash(`echo "$(id -un) $HOME $PWD $USER"`), Stdin: ptr(false)},
			wantOut: "user /home/user /home/user user\n", wantStatus: "exit status 0"},
		{name: "root by basic auth", msg: &pb.StartRequest{Process: bash("id -u; echo $HOME")}, hdr: map[string]string{"Authorization": basicUser("root")},
			wantOut: "0\n/root\n", wantStatus: "exit status 0"},
		{name: "envs and cwd", msg: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", `echo "$FOO $PWD"`}, Envs: map[string]string{"FOO": "bar baz"}, Cwd: ptr("/tmp")}},
			wantOut: "bar baz /tmp\n", wantStatus: "exit status 0"},
		{name: "relative cwd is against home", msg: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "pwd", Cwd: ptr(".")}},
			wantOut: "/home/user\n", wantStatus: "exit status 0"},
		{name: "killed by itself", msg: &pb.StartRequest{Process: bash("kill -KILL $$")}, wantCode: -1, wantStatus: "signal: killed"},
		{name: "missing cwd", msg: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("/nope")}}, wantConn: connect.CodeInvalidArgument},
		{name: "unknown user", msg: &pb.StartRequest{Process: bash("true")}, hdr: map[string]string{"Authorization": basicUser("nobody-here")}, wantConn: connect.CodeUnauthenticated},
		{name: "missing command", msg: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command"}}, wantConn: connect.CodeInvalidArgument},
		{name: "empty command", msg: &pb.StartRequest{Process: &pb.ProcessConfig{}}, wantConn: connect.CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t, c, tc.msg, tc.hdr)
			if tc.wantConn != 0 {
				if connect.CodeOf(r.err) != tc.wantConn {
					t.Fatalf("error = %v, want code %v", r.err, tc.wantConn)
				}
				return
			}
			if r.err != nil {
				t.Fatalf("stream error: %v", r.err)
			}
			if r.pid == 0 || r.end == nil {
				t.Fatalf("stream had no start or no end: %+v", r)
			}
			if r.stdout != tc.wantOut || r.stderr != tc.wantErr {
				t.Errorf("stdout %q stderr %q, want %q %q", r.stdout, r.stderr, tc.wantOut, tc.wantErr)
			}
			if r.end.GetExitCode() != tc.wantCode || r.end.GetStatus() != tc.wantStatus {
				t.Errorf("end = %+v, want exitCode %d status %q", r.end, tc.wantCode, tc.wantStatus)
			}
			if (tc.wantCode != 0) != (r.end.Error != nil) {
				t.Errorf("end.error = %v for exit code %d", r.end.Error, tc.wantCode)
			}
		})
	}
}

func TestStdinAndCloseStdin(t *testing.T) {
	s := envdtest.Start(t)
	c := newClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Stdin: ptr(true)}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	if _, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("abc\n")}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	r := collect(stream)
	if r.err != nil || r.stdout != "abc\n" || r.end.GetExitCode() != 0 {
		t.Errorf("cat: %+v", r)
	}
	// Input to a process that has no stdin pipe fails clearly.
	stream, err = c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: bash("sleep 5"), Stdin: ptr(false)}))
	if err != nil || !stream.Receive() {
		t.Fatal(err)
	}
	sel = &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: stream.Msg().GetEvent().GetStart().GetPid()}}
	_, err = c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
	if connect.CodeOf(err) != connect.CodeInternal {
		t.Errorf("SendInput without stdin = %v, want internal", err)
	}
	c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGKILL}))
	collect(stream)
}

// A background command survives its stream; Connect re-attaches to it.
func TestDisconnectConnectListSignal(t *testing.T) {
	s := envdtest.Start(t)
	c := newClient(s)
	ctx := context.Background()
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.Start(sctx, connect.NewRequest(&pb.StartRequest{Process: bash("trap 'echo got-term; exit 5' TERM; echo started; while :; do sleep 0.05; done"), Stdin: ptr(false)}))
	if err != nil || !stream.Receive() {
		t.Fatalf("start: %v", err)
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	cancel() // the client goes away
	stream.Close()

	time.Sleep(300 * time.Millisecond)
	list, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid {
			found = true
			if p.GetConfig().GetCmd() != "/bin/bash" {
				t.Errorf("listed config = %+v", p.GetConfig())
			}
		}
	}
	if !found {
		t.Fatalf("process %d not listed after its stream closed: %+v", pid, list.Msg)
	}
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	conn, err := c.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan result)
	go func() { done <- collect(conn) }()
	time.Sleep(200 * time.Millisecond)
	if _, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: pb.Signal_SIGNAL_SIGTERM})); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.pid != pid || !strings.Contains(r.stdout, "got-term") || r.end.GetExitCode() != 5 {
		t.Errorf("connected stream: %+v", r)
	}

	_, err = c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("signal to an unknown pid = %v, want not_found", err)
	}
	unknown, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}}))
	if err == nil {
		err = collect(unknown).err
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Connect to an unknown pid = %v, want not_found", err)
	}
}

// The Start call's deadline (Connect-Timeout-Ms) kills the process.
func TestStartDeadlineKillsProcess(t *testing.T) {
	s := envdtest.Start(t)
	c := newClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: bash("sleep 30"), Stdin: ptr(false)}))
	if err != nil {
		t.Fatal(err)
	}
	r := collect(stream)
	if connect.CodeOf(r.err) != connect.CodeDeadlineExceeded {
		t.Errorf("stream error = %v, want deadline_exceeded", r.err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		list, err := c.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
		if err == nil && len(list.Msg.GetProcesses()) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Error("the process outlived its Start deadline")
}

func TestKeepalive(t *testing.T) {
	s := envdtest.Start(t)
	c := newClient(s)
	req := connect.NewRequest(&pb.StartRequest{Process: bash("sleep 2.5"), Stdin: ptr(false)})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(stream); r.err != nil || r.keepalives < 1 {
		t.Errorf("keepalives = %d (err %v), want at least 1 over 2.5 s idle with a 1 s interval", r.keepalives, r.err)
	}
}

func TestPTY(t *testing.T) {
	s := envdtest.Start(t)
	c := newClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Envs: map[string]string{"TERM": "xterm-256color"}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	}))
	if err != nil || !stream.Receive() {
		t.Fatal(err)
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	input := func(s string) {
		if _, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(s)}}})); err != nil {
			t.Fatal(err)
		}
	}
	// Read the terminal as it goes, to resize only after the first answer.
	var mu sync.Mutex
	var screen strings.Builder
	done := make(chan result)
	go func() {
		var r result
		for stream.Receive() {
			switch ev := stream.Msg().GetEvent().GetEvent().(type) {
			case *pb.ProcessEvent_Data:
				mu.Lock()
				screen.Write(ev.Data.GetPty())
				mu.Unlock()
			case *pb.ProcessEvent_End:
				r.end = ev.End
			}
		}
		r.err = stream.Err()
		done <- r
	}()
	waitFor := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			ok := strings.Contains(screen.String(), want)
			mu.Unlock()
			if ok {
				return
			}
		}
		t.Fatalf("terminal never showed %q", want)
	}
	input("echo size=$(stty size) tty=$(tty)\n")
	waitFor("size=24 80 tty=/dev/pts/")
	if _, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 30}}})); err != nil {
		t.Fatal(err)
	}
	input("echo resized=$(stty size); exit 7\n")
	r := <-done
	mu.Lock()
	out := screen.String()
	mu.Unlock()
	if r.err != nil || !strings.Contains(out, "resized=30 100") || r.end.GetExitCode() != 7 {
		t.Errorf("pty session: err %v end %+v output:\n%s", r.err, r.end, out)
	}
	// A terminal has no stdin to close.
	_, err = c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	if err == nil {
		t.Error("CloseStdin on a PTY process succeeded")
	}
}

// Bad input gets a Connect error in the protocol's shape, never a crash.
func TestMalformedRequests(t *testing.T) {
	s := envdtest.Start(t)
	tests := []struct {
		name, path, ctype, body string
		wantStatus              int
		wantCode                string
	}{
		{"unary bad json", "/process.Process/List", "application/json", "{not json", 400, "invalid_argument"},
		{"unary wrong type", "/process.Process/SendSignal", "application/json", `{"signal": {"x": 1}}`, 400, "invalid_argument"},
		{"unknown method", "/process.Process/Nope", "application/json", "{}", 404, ""},
		// A stream's errors travel in its end-of-stream envelope (flag 0x02).
		{"stream truncated envelope", "/process.Process/Start", "application/connect+json", "\x00\x00\x00\x00\x10{}", 200, "\x02\x00\x00\x00"},
		{"stream bad json", "/process.Process/Start", "application/connect+json", "\x00\x00\x00\x00\x03{x}", 200, `"code":"invalid_argument"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", s.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.ctype)
			req.Header.Set("Connect-Protocol-Version", "1")
			resp, err := s.Client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || !bytes.Contains(body, []byte(tc.wantCode)) {
				t.Errorf("got %d %q, want %d and code %q", resp.StatusCode, body, tc.wantStatus, tc.wantCode)
			}
		})
	}
	// envd is still alive.
	if _, err := newClient(s).List(context.Background(), connect.NewRequest(&pb.ListRequest{})); err != nil {
		t.Errorf("List after bad input: %v", err)
	}
}

func TestAccessToken(t *testing.T) {
	s := envdtest.Start(t)
	resp, err := s.Client.Post(s.URL+"/init", "application/json", strings.NewReader(`{"accessToken":"secret-token","envVars":{"SANDBOX_WIDE":"yes"}}`))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("/init: %v %v", resp, err)
	}
	c := newClient(s)
	_, err = c.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnauthenticated {
		t.Errorf("List without a token = %v, want unauthenticated", err)
	}
	req := connect.NewRequest(&pb.StartRequest{Process: bash("echo $SANDBOX_WIDE"), Stdin: ptr(false)})
	req.Header().Set("X-Access-Token", "secret-token")
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := collect(stream); r.err != nil || r.stdout != "yes\n" {
		t.Errorf("with the token: %+v", r)
	}
	resp, err = s.Client.Get(s.URL + "/health")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("/health needs no token: %v %v", resp, err)
	}
	hreq, _ := http.NewRequest("GET", s.URL+"/envs", nil)
	resp, err = s.Client.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 401 || !strings.Contains(string(body), `"code":401`) {
		t.Errorf("/envs without a token: %d %s", resp.StatusCode, body)
	}
}

// TestErrorCodesAndMessages pins the Connect code and the message of every
// error the process service answers: the SDKs turn the codes into their
// exception classes (not_found into kill() == false, invalid_argument into
// InvalidArgumentError, …) and show the messages, some of which are the
// reference envd's own words.
func TestErrorCodesAndMessages(t *testing.T) {
	s := envdtest.Start(t)
	c := newClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pidSel := func(pid uint32) *pb.ProcessSelector {
		return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	}
	// start runs cmd and returns its pid and the stream to end it with.
	start := func(req *pb.StartRequest) (uint32, *connect.ServerStreamForClient[pb.StartResponse]) {
		t.Helper()
		stream, err := c.Start(ctx, connect.NewRequest(req))
		if err != nil || !stream.Receive() {
			t.Fatalf("start: %v %v", err, stream.Err())
		}
		return stream.Msg().GetEvent().GetStart().GetPid(), stream
	}
	pipe, pipeStream := start(&pb.StartRequest{Process: bash("sleep 30"), Stdin: ptr(false)})
	term, termStream := start(&pb.StartRequest{Process: bash("sleep 30"), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}})
	ended, endedStream := start(&pb.StartRequest{Process: bash("true"), Stdin: ptr(false)})
	collect(endedStream)
	defer func() {
		for _, pid := range []uint32{pipe, term} {
			c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(pid), Signal: pb.Signal_SIGNAL_SIGKILL}))
		}
		collect(pipeStream)
		collect(termStream)
	}()
	stdin := func(b string) *pb.ProcessInput {
		return &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(b)}}
	}
	ptyIn := func(b string) *pb.ProcessInput { return &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(b)}} }
	startErr := func(req *pb.StartRequest, hdr map[string]string) func() error {
		return func() error { return run(t, c, req, hdr).err }
	}

	tests := []struct {
		name   string
		call   func() error
		code   connect.Code
		msg    string // the whole message, or its start when prefix
		prefix bool
	}{
		{"empty command", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{}}, nil),
			connect.CodeInvalidArgument, "process.cmd is empty", false},
		{"command not in PATH", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command"}}, nil),
			connect.CodeInvalidArgument, `exec: "no-such-command": executable file not found in $PATH`, false},
		{"command path not executable", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/no/such/command"}}, nil),
			connect.CodeInvalidArgument, `exec: "/no/such/command": no such executable file`, false},
		{"missing cwd", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("/nope")}}, nil),
			connect.CodeInvalidArgument, "cwd '/nope' does not exist", false},
		// What execve cannot carry is the client's mistake (review 6: a NUL
		// in an env answered internal).
		{"NUL in an env value", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Envs: map[string]string{"A": "b\x00c"}}}, nil),
			connect.CodeInvalidArgument, `process.envs: value of "A" contains NUL`, false},
		{"NUL in an env name", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Envs: map[string]string{"A\x00": "b"}}}, nil),
			connect.CodeInvalidArgument, `process.envs: name "A\x00" must be non-empty, without '=' or NUL`, false},
		{"= in an env name", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Envs: map[string]string{"A=B": "c"}}}, nil),
			connect.CodeInvalidArgument, `process.envs: name "A=B" must be non-empty, without '=' or NUL`, false},
		{"NUL in an argument", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Args: []string{"ok", "x\x00"}}}, nil),
			connect.CodeInvalidArgument, "process.args[1] contains NUL", false},
		{"bad ~ in cwd", startErr(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("~other")}}, nil),
			connect.CodeInvalidArgument, `path "~other": only ~ and ~/ are expanded: invalid argument`, false},
		{"unknown user", startErr(&pb.StartRequest{Process: bash("true")}, map[string]string{"Authorization": basicUser("nobody-here")}),
			connect.CodeUnauthenticated, `user "nobody-here": unknown user`, true},
		{"garbled user header", func() error {
			req := connect.NewRequest(&pb.ListRequest{})
			req.Header().Set("Authorization", "Bearer x")
			_, err := c.List(ctx, req)
			return err
		}, connect.CodeUnauthenticated, "unknown user: authorization header is not Basic: invalid argument", false},
		{"connect to an unknown pid", func() error {
			stream, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: pidSel(999999)}))
			if err == nil {
				err = collect(stream).err
			}
			return err
		}, connect.CodeNotFound, "process with pid 999999 not found", false},
		{"connect to an unknown tag", func() error {
			stream, err := c.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "nope"}}}))
			if err == nil {
				err = collect(stream).err
			}
			return err
		}, connect.CodeNotFound, `process with tag "nope" not found`, false},
		{"no selector", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Input: stdin("x")}))
			return err
		}, connect.CodeInvalidArgument, "no process selector", false},
		{"unsupported signal", func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(pipe), Signal: pb.Signal_SIGNAL_UNSPECIFIED}))
			return err
		}, connect.CodeUnimplemented, "signal SIGNAL_UNSPECIFIED is not supported", false},
		{"signal to an unknown pid", func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(999999), Signal: pb.Signal_SIGNAL_SIGKILL}))
			return err
		}, connect.CodeNotFound, "process with pid 999999 not found", false},
		{"signal to an ended process", func() error {
			_, err := c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSel(ended), Signal: pb.Signal_SIGNAL_SIGKILL}))
			return err
		}, connect.CodeNotFound, fmt.Sprintf("process with pid %d has already ended", ended), false},
		{"no input", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(pipe)}))
			return err
		}, connect.CodeInvalidArgument, "no input", false},
		{"stdin not open", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(pipe), Input: stdin("x")}))
			return err
		}, connect.CodeInternal, "stdin is not open (start the process with stdin: true)", false},
		{"pty input to a pipe process", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(pipe), Input: ptyIn("x")}))
			return err
		}, connect.CodeInternal, "process has no PTY: send stdin input", false},
		{"stdin input to a PTY", func() error {
			_, err := c.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSel(term), Input: stdin("x")}))
			return err
		}, connect.CodeInternal, "process is a PTY: send pty input", false},
		{"close stdin that is not open", func() error {
			_, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: pidSel(pipe)}))
			return err
		}, connect.CodeInternal, "stdin is not open", false},
		{"close the stdin of a PTY", func() error {
			_, err := c.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: pidSel(term)}))
			return err
		}, connect.CodeInternal, "cannot close the stdin of a PTY process; send Ctrl-D (0x04) instead", false},
		{"resize a pipe process", func() error {
			_, err := c.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: pidSel(pipe), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 10, Rows: 10}}}))
			return err
		}, connect.CodeInternal, "process has no PTY to resize", false},
		{"stream input before its start", func() error {
			stream := c.StreamInput(ctx)
			stream.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: stdin("x")}}})
			_, err := stream.CloseAndReceive()
			return err
		}, connect.CodeFailedPrecondition, "input before the start message", false},
		{"start deadline", func() error {
			dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer dcancel()
			stream, err := c.Start(dctx, connect.NewRequest(&pb.StartRequest{Process: bash("sleep 30"), Stdin: ptr(false)}))
			if err == nil {
				err = collect(stream).err
			}
			return err
		}, connect.CodeDeadlineExceeded, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var cerr *connect.Error
			if !errors.As(err, &cerr) {
				t.Fatalf("got %v, want a Connect error %v", err, tc.code)
			}
			msg := cerr.Message()
			if cerr.Code() != tc.code || (tc.prefix && !strings.HasPrefix(msg, tc.msg)) || (!tc.prefix && msg != tc.msg) {
				t.Errorf("got %v %q, want %v %q", cerr.Code(), msg, tc.code, tc.msg)
			}
		})
	}
}
