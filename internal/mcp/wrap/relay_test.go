package wrap

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// fakeProc is a server process: it records its input and ends when told.
type fakeProc struct {
	mu       sync.Mutex
	input    bytes.Buffer
	sends    int
	closed   bool
	sendErr  error
	done     chan struct{}
	endOnce  sync.Once
	res      *sdk.CommandResult
	err      error
	onClose  func(p *fakeProc) // called by CloseStdin
	closedAt int               // sends before CloseStdin
}

func newFakeProc() *fakeProc { return &fakeProc{done: make(chan struct{})} }

func (p *fakeProc) SendStdin(ctx context.Context, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sendErr != nil {
		return p.sendErr
	}
	if p.closed {
		return errors.New("stdin closed")
	}
	p.input.Write(data)
	p.sends++
	return nil
}

func (p *fakeProc) CloseStdin(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.closedAt = p.sends
	f := p.onClose
	p.mu.Unlock()
	if f != nil {
		f(p)
	}
	return nil
}

func (p *fakeProc) Done() <-chan struct{} { return p.done }

func (p *fakeProc) Wait(ctx context.Context) (*sdk.CommandResult, error) {
	<-p.done
	if p.err != nil {
		return nil, p.err
	}
	if p.res.ExitCode != 0 {
		return p.res, &sdk.CommandExitError{CommandResult: *p.res}
	}
	return p.res, nil
}

// exit ends the process with status code (-1 and errText for a signal).
func (p *fakeProc) exit(code int, errText string) {
	p.endOnce.Do(func() {
		p.res = &sdk.CommandResult{ExitCode: code, Error: errText}
		close(p.done)
	})
}

// fail ends the process stream with err (the sandbox went away).
func (p *fakeProc) fail(err error) {
	p.endOnce.Do(func() {
		p.err = err
		close(p.done)
	})
}

func (p *fakeProc) received() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.input.String()
}

func newRelay(p *fakeProc, in io.Reader, out io.Writer) *relay {
	return &relay{proc: p, in: in, out: newClientWriter(out), grace: 300 * time.Millisecond}
}

// runRelay runs r in the background and returns its result's channel.
func runRelay(ctx context.Context, r *relay, lost <-chan error) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- r.run(ctx, lost) }()
	return ch
}

func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case res := <-ch:
		return res
	case <-time.After(5 * time.Second):
		t.Fatal("the relay did not end within 5s")
	}
	return result{}
}

// The client's input reaches the server in order, chunk by chunk as it is
// written (no waiting for lines), then the server's stdin is closed; a
// server that exits 0 then ends the session quietly with 0.
func TestRelayInputInOrderThenEOF(t *testing.T) {
	p := newFakeProc()
	p.onClose = func(p *fakeProc) { p.exit(0, "") }
	pr, pw := io.Pipe()
	ch := runRelay(context.Background(), newRelay(p, pr, io.Discard), nil)

	var want strings.Builder
	for i, chunk := range []string{`{"jsonrpc":"2.0","id":1,`, `"method":"ping"}` + "\n", strings.Repeat("x", 3*chunkSize+17), "\n", `{"id":2}` + "\n"} {
		want.WriteString(chunk)
		if _, err := pw.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// A partial line is forwarded at once.
			deadline := time.Now().Add(2 * time.Second)
			for p.received() != chunk && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if got := p.received(); got != chunk {
				t.Fatalf("a partial line was not forwarded: got %q", got)
			}
		}
	}
	pw.Close()
	res := wait(t, ch)
	if res != (result{}) {
		t.Errorf("result %+v, want exit 0 and no message", res)
	}
	if got := p.received(); got != want.String() {
		t.Errorf("the server received %d bytes, not the %d sent in order", len(got), want.Len())
	}
	if !p.closed || p.closedAt != p.sends {
		t.Errorf("stdin closed %v after %d of %d sends", p.closed, p.closedAt, p.sends)
	}
}

func TestRelayEnds(t *testing.T) {
	eof := func() io.Reader { return strings.NewReader("") }
	open := func(t *testing.T) io.Reader {
		pr, pw := io.Pipe()
		t.Cleanup(func() { pw.Close() })
		return pr
	}
	tests := []struct {
		name     string
		in       func(t *testing.T) io.Reader
		setup    func(p *fakeProc, cancel context.CancelCauseFunc, lost chan error)
		code     int
		why      string // a substring; "" wants none
		gone     bool
		out      io.Writer
		sendFail error
	}{
		{name: "EOF, server exits non-zero", in: func(*testing.T) io.Reader { return eof() },
			setup: func(p *fakeProc, _ context.CancelCauseFunc, _ chan error) {
				p.onClose = func(p *fakeProc) { p.exit(3, "exit status 3") }
			},
			code: 3, why: "exited with status 3 after the end of its input"},
		{name: "EOF, server killed by a signal", in: func(*testing.T) io.Reader { return eof() },
			setup: func(p *fakeProc, _ context.CancelCauseFunc, _ chan error) {
				p.onClose = func(p *fakeProc) { p.exit(-1, "signal: terminated") }
			},
			code: 143, why: "was killed (signal: terminated)"},
		{name: "EOF, server does not exit", in: func(*testing.T) io.Reader { return eof() },
			code: 0, why: "did not exit within 300ms of the end of its input"},
		{name: "server exits first", in: open,
			setup: func(p *fakeProc, _ context.CancelCauseFunc, _ chan error) { go p.exit(7, "exit status 7") },
			code:  7, why: "exited with status 7 while the client was connected"},
		{name: "server exits 0 first", in: open,
			setup: func(p *fakeProc, _ context.CancelCauseFunc, _ chan error) { go p.exit(0, "") },
			code:  0, why: "exited (status 0) while the client was connected"},
		{name: "SIGTERM", in: open,
			setup: func(_ *fakeProc, cancel context.CancelCauseFunc, _ chan error) {
				go cancel(Signaled{Signal: syscall.SIGTERM})
			},
			code: 143, why: "got SIGTERM"},
		{name: "SIGHUP during the grace", in: func(*testing.T) io.Reader { return eof() },
			setup: func(p *fakeProc, cancel context.CancelCauseFunc, _ chan error) {
				p.onClose = func(*fakeProc) { go cancel(Signaled{Signal: syscall.SIGHUP}) }
			},
			code: 129, why: "got SIGHUP"},
		{name: "stream lost", in: open,
			setup: func(p *fakeProc, _ context.CancelCauseFunc, _ chan error) {
				go p.fail(errors.New("protocol error: unexpected EOF"))
			},
			code: ExitFailure, why: "lost the server: protocol error: unexpected EOF"},
		{name: "sandbox gone (renewal)", in: open,
			setup: func(_ *fakeProc, _ context.CancelCauseFunc, lost chan error) {
				lost <- &sdk.Error{Op: "set timeout", Kind: sdk.ErrNotFound}
			},
			code: ExitFailure, why: "lost the server", gone: true},
		{name: "client output closed", in: open,
			out:  errWriter{syscall.EPIPE},
			code: 141, why: "standard output is closed"},
		{name: "send fails, then the server exits", in: func(*testing.T) io.Reader { return strings.NewReader("{}\n") },
			sendFail: errors.New("process not found"),
			setup: func(p *fakeProc, _ context.CancelCauseFunc, _ chan error) {
				go func() { time.Sleep(50 * time.Millisecond); p.exit(1, "exit status 1") }()
			},
			code: 1, why: "exited with status 1 while the client was connected"},
		{name: "send fails, the server does not end", in: func(*testing.T) io.Reader { return strings.NewReader("{}\n") },
			sendFail: errors.New("unavailable"),
			code:     ExitFailure, why: "lost the server: sending to the server: unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakeProc()
			p.sendErr = tc.sendFail
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			lost := make(chan error, 1)
			if tc.setup != nil {
				tc.setup(p, cancel, lost)
			}
			out := tc.out
			if out == nil {
				out = io.Discard
			}
			r := newRelay(p, tc.in(t), out)
			if tc.out != nil {
				// The server writes to a client that went away.
				r.out.Write([]byte("{}\n"))
			}
			res := wait(t, runRelay(ctx, r, lost))
			if res.code != tc.code || res.gone != tc.gone {
				t.Errorf("result %+v, want code %d, gone %v", res, tc.code, tc.gone)
			}
			if (tc.why == "") != (res.why == "") || !strings.Contains(res.why, tc.why) {
				t.Errorf("why %q, want %q", res.why, tc.why)
			}
		})
	}
}

type errWriter struct{ err error }

func (w errWriter) Write(p []byte) (int, error) { return 0, w.err }

// Output is written whole and in order; after a failure it is dropped and
// broken is closed once.
func TestClientWriter(t *testing.T) {
	var buf bytes.Buffer
	w := newClientWriter(&buf)
	w.Write([]byte("a\n"))
	w.Write([]byte("b\n"))
	if buf.String() != "a\nb\n" {
		t.Errorf("wrote %q", buf.String())
	}
	select {
	case <-w.broken:
		t.Fatal("broken without a failure")
	default:
	}
	f := newClientWriter(errWriter{syscall.EPIPE})
	for range 3 {
		if n, err := f.Write([]byte("x")); n != 1 || err != nil {
			t.Errorf("Write after a failure: %d, %v (the server's stream must not fail)", n, err)
		}
	}
	<-f.broken
	if !errors.Is(f.Err(), syscall.EPIPE) {
		t.Errorf("Err %v", f.Err())
	}
}

// wrap's lines start on a line of their own, with the prefix.
func TestStderrWriter(t *testing.T) {
	var buf bytes.Buffer
	w := newStderr(&buf)
	w.Write([]byte("server: partial"))
	w.say("lost %s", "it")
	w.Write([]byte("server: whole\n"))
	w.say("done")
	want := "server: partial\nhutch mcp wrap: lost it\nserver: whole\nhutch mcp wrap: done\n"
	if buf.String() != want {
		t.Errorf("stderr:\n%q\nwant\n%q", buf.String(), want)
	}
}

func TestParseFile(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want File
		err  bool
	}{
		{spec: "server.py:/home/user/server.py", want: File{"server.py", "/home/user/server.py"}},
		{spec: "./a:b:/tmp/x", want: File{"./a:b", "/tmp/x"}},
		{spec: "dir:/srv/", want: File{"dir", "/srv/"}},
		{spec: "nocolon", err: true},
		{spec: ":/tmp/x", err: true},
		{spec: "x:", err: true},
	} {
		got, err := ParseFile(tc.spec)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseFile(%q) = %+v, %v", tc.spec, got, err)
		}
	}
}

func TestCommandLineAndTruncate(t *testing.T) {
	if got := CommandLine([]string{"npx -y x && y"}); got != "npx -y x && y" {
		t.Errorf("one word: %q", got)
	}
	if got := CommandLine([]string{"python3", "-c", "print('hi there')"}); got != `python3 -c 'print('\''hi there'\'')'` {
		t.Errorf("words: %q", got)
	}
	if got := truncate("short", 10); got != "short" {
		t.Errorf("truncate: %q", got)
	}
	long := strings.Repeat("é", 200)
	got := truncate(long, MaxCommandMetadata)
	if len(got) > MaxCommandMetadata || !strings.HasSuffix(got, "…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("truncate: %d bytes %q", len(got), got)
	}
}
