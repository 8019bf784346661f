package wrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// process is the server's process as the relay drives it
// (*sdk.CommandHandle).
type process interface {
	SendStdin(ctx context.Context, data []byte) error
	CloseStdin(ctx context.Context) error
	Done() <-chan struct{}
	Wait(ctx context.Context) (*sdk.CommandResult, error)
}

// chunkSize bounds one SendStdin: stdio MCP is newline-delimited JSON-RPC,
// but the relay forwards bytes as they come, never waiting for a line.
const chunkSize = 64 << 10

// result is how a session ended.
type result struct {
	// code is the exit status.
	code int
	// why explains an end that was not the client's doing; empty when
	// the client closed its end and the server exited 0.
	why string
	// gone: the sandbox no longer exists (nothing to kill).
	gone bool
}

// relay carries one session between the client and the server's process.
type relay struct {
	proc  process
	in    io.Reader
	out   *clientWriter
	grace time.Duration
	// explainLoss says why the server's stream failed and whether the
	// sandbox is gone; nil uses the error's text.
	explainLoss func(error) (why string, gone bool)
}

// run relays until the session ends: the client's input ends (then the
// server's standard input is closed, and it has grace to exit), the server
// exits, ctx is cancelled (with a Signaled cause for a signal), the
// client's output breaks, or the sandbox is lost (lost receives, or the
// process stream fails).
func (r *relay) run(ctx context.Context, lost <-chan error) result {
	input := make(chan error, 1)
	go r.pump(ctx, input)
	select {
	case err := <-input:
		if err != nil {
			return r.sendFailed(ctx, lost, err)
		}
		return r.drain(ctx, lost)
	case <-r.proc.Done():
		return r.exited(false)
	case <-ctx.Done():
		return interrupted(ctx)
	case <-r.out.broken:
		return result{code: 128 + int(syscall.SIGPIPE), why: fmt.Sprintf("standard output is closed (the client went away: %v)", r.out.Err())}
	case err := <-lost:
		return r.lost(err)
	}
}

// pump sends the client's input to the server in order, chunk by chunk as
// it arrives; it reports nil at the end of the input (or a failure to
// read it: the client is gone either way), or the failure to send.
func (r *relay) pump(ctx context.Context, done chan<- error) {
	buf := make([]byte, chunkSize)
	for {
		n, err := r.in.Read(buf)
		if n > 0 {
			if serr := r.proc.SendStdin(ctx, buf[:n]); serr != nil {
				done <- serr
				return
			}
		}
		if err != nil {
			done <- nil
			return
		}
	}
}

// drain ends a session whose input ended: it closes the server's standard
// input and gives it grace to exit.
func (r *relay) drain(ctx context.Context, lost <-chan error) result {
	cctx, cancel := context.WithTimeout(ctx, max(r.grace, 5*time.Second))
	r.proc.CloseStdin(cctx) // fails only when the server is gone already
	cancel()
	timer := time.NewTimer(r.grace)
	defer timer.Stop()
	select {
	case <-r.proc.Done():
		return r.exited(true)
	case <-timer.C:
		return result{why: fmt.Sprintf("the server did not exit within %v of the end of its input", r.grace)}
	case <-ctx.Done():
		return interrupted(ctx)
	case err := <-lost:
		return r.lost(err)
	}
}

// sendFailed ends a session whose input could not be sent: usually the
// server has just exited, which says more.
func (r *relay) sendFailed(ctx context.Context, lost <-chan error, err error) result {
	timer := time.NewTimer(r.grace)
	defer timer.Stop()
	select {
	case <-r.proc.Done():
		return r.exited(false)
	case <-timer.C:
		return r.lost(fmt.Errorf("sending to the server: %w", err))
	case <-ctx.Done():
		return interrupted(ctx)
	case err := <-lost:
		return r.lost(err)
	}
}

// exited ends a session whose server exited (or whose process stream
// failed); afterEOF says whether the client had closed its end.
func (r *relay) exited(afterEOF bool) result {
	_, err := r.proc.Wait(context.Background())
	var ce *sdk.CommandExitError
	switch {
	case err == nil:
		if afterEOF {
			return result{}
		}
		return result{why: "the server exited (status 0) while the client was connected"}
	case errors.As(err, &ce):
		code := ce.CommandResult.ShellStatus()
		if afterEOF {
			return result{code: code, why: "the server " + describe(ce.CommandResult) + " after the end of its input"}
		}
		return result{code: code, why: "the server " + describe(ce.CommandResult) + " while the client was connected"}
	}
	return r.lost(err)
}

// lost ends a session whose sandbox or process stream failed.
func (r *relay) lost(err error) result {
	if r.explainLoss != nil {
		why, gone := r.explainLoss(err)
		return result{code: ExitFailure, why: why, gone: gone}
	}
	return result{code: ExitFailure, why: "lost the server: " + oneLine(err.Error()), gone: errors.Is(err, sdk.ErrNotFound)}
}

// interrupted ends a session whose context was cancelled.
func interrupted(ctx context.Context) result {
	var sig Signaled
	if errors.As(context.Cause(ctx), &sig) {
		return result{code: 128 + int(sig.Signal), why: sig.Error()}
	}
	return result{code: ExitFailure, why: "stopped: " + context.Cause(ctx).Error()}
}

// describe says how a command ended: "exited with status N" or "was
// killed (signal: killed)".
func describe(res sdk.CommandResult) string {
	if res.ExitCode >= 0 {
		return fmt.Sprintf("exited with status %d", res.ExitCode)
	}
	if res.Error != "" {
		return "was killed (" + res.Error + ")"
	}
	return "was killed"
}

// clientWriter is the client's standard output: each chunk of the
// server's output is written whole, in order. The first failure (the
// client went away) closes broken; later output is dropped.
type clientWriter struct {
	mu     sync.Mutex
	w      io.Writer
	err    error
	broken chan struct{}
}

func newClientWriter(w io.Writer) *clientWriter {
	return &clientWriter{w: w, broken: make(chan struct{})}
}

func (c *clientWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return len(p), nil
	}
	n, err := c.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		c.err = err
		close(c.broken)
	}
	return len(p), nil
}

// Err is the failure that broke the writer.
func (c *clientWriter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// stderrWriter is the client's standard error, shared by the server's
// standard error and wrap's own lines, which start on a line of their own
// and with Prefix. Failures to write are ignored: standard error is not
// part of the protocol.
type stderrWriter struct {
	mu      sync.Mutex
	w       io.Writer
	midLine bool
}

func newStderr(w io.Writer) *stderrWriter {
	if w == nil {
		w = io.Discard
	}
	return &stderrWriter{w: w}
}

func (s *stderrWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Write(p)
	s.midLine = p[len(p)-1] != '\n'
	return len(p), nil
}

func (s *stderrWriter) say(format string, args ...any) {
	var b bytes.Buffer
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.midLine {
		b.WriteByte('\n')
	}
	b.WriteString(Prefix)
	fmt.Fprintf(&b, format, args...)
	b.WriteByte('\n')
	s.w.Write(b.Bytes())
	s.midLine = false
}
