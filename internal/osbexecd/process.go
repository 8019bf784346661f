package osbexecd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	procpb "github.com/hutch-sandbox/hutch/api/gen/process"
)

// killGrace is how long after a command's own timeout envd's deadline
// (Connect-Timeout-Ms of the Start call) kills it as a backstop, should
// the host's kill not get through.
const killGrace = 5 * time.Second

// procEvent is one thing a followed process produced, in order.
type procEvent struct {
	stdout, stderr []byte
	end            *procpb.ProcessEvent_EndEvent
	err            error // the stream broke before the end
}

// startedProcess is a process envd started for a request, with the stream
// that reports it.
type startedProcess struct {
	ec       *envdClient
	tag      string
	pid      uint32
	started  time.Time
	stream   *connect.ServerStreamForClient[procpb.StartResponse]
	cancel   context.CancelFunc
	timedOut atomic.Bool
}

// startProcess starts cfg in the sandbox as ec's user, tagged tag, and
// waits for envd's start event. The stream lives on ctx — the sandbox's,
// not the request's, so that a client going away does not cut what the
// host learns of the process. With a timeout the host kills the process
// then (see watchTimeout), and envd at timeout+killGrace.
func startProcess(ctx context.Context, ec *envdClient, cfg *procpb.ProcessConfig, tag string, timeout time.Duration) (*startedProcess, error) {
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, timeout+killGrace)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	no := false
	req := connect.NewRequest(&procpb.StartRequest{Process: cfg, Tag: &tag, Stdin: &no})
	ec.header(req.Header())
	started := time.Now()
	stream, err := ec.process().Start(ctx, req)
	if err != nil {
		cancel()
		return nil, classify("start the command", err)
	}
	if !stream.Receive() {
		err := stream.Err()
		stream.Close()
		cancel()
		if err == nil {
			err = errors.New("envd ended the stream before the process started")
		}
		return nil, classify("start the command", err)
	}
	start := stream.Msg().GetEvent().GetStart()
	if start == nil {
		stream.Close()
		cancel()
		return nil, fmt.Errorf("start the command: envd's first event was not the start")
	}
	return &startedProcess{ec: ec, tag: tag, pid: start.GetPid(), started: started, stream: stream, cancel: cancel}, nil
}

// follow reads the process's stream to its end, handing each event to
// handle; the last is its end or the stream's error. It releases the
// stream.
func (p *startedProcess) follow(handle func(procEvent)) {
	defer p.cancel()
	defer p.stream.Close()
	for p.stream.Receive() {
		ev := p.stream.Msg().GetEvent()
		switch {
		case ev.GetData() != nil:
			d := ev.GetData()
			if len(d.GetStdout()) > 0 || len(d.GetStderr()) > 0 {
				handle(procEvent{stdout: d.GetStdout(), stderr: d.GetStderr()})
			}
		case ev.GetEnd() != nil:
			handle(procEvent{end: ev.GetEnd()})
			return
		}
	}
	err := p.stream.Err()
	if err == nil {
		err = errors.New("envd ended the stream before the process ended")
	}
	handle(procEvent{err: classify("following the command", err)})
}

// kill sends sig to the process's group, on ctx.
func (p *startedProcess) kill(ctx context.Context, sig procpb.Signal) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.ec.signal(ctx, p.tag, sig)
}

// watchTimeout kills the process after timeout (none when 0); the
// returned stop ends the watch.
func (p *startedProcess) watchTimeout(ctx context.Context, timeout time.Duration) (stop func() bool) {
	if timeout <= 0 {
		return func() bool { return false }
	}
	t := time.AfterFunc(timeout, func() {
		p.timedOut.Store(true)
		_ = p.kill(ctx, procpb.Signal_SIGNAL_SIGKILL)
	})
	return t.Stop
}

// exitOf returns the exit code and error text execd reports for end: a
// process killed by a signal has exit code -1, as Go's ExitCode() (and so
// execd) says.
func (p *startedProcess) exitOf(end *procpb.ProcessEvent_EndEvent) (int, string) {
	code := int(end.GetExitCode())
	if end.GetExited() && code == 0 {
		return 0, ""
	}
	msg := end.GetStatus()
	if msg == "" {
		msg = end.GetError()
	}
	if p.timedOut.Load() {
		msg = "timed out: " + msg
	}
	return code, msg
}

// endEvent is the event that closes a stream: execution_complete for exit
// 0, else an error whose evalue is the exit code, as execd sends.
func (p *startedProcess) endEvent(end *procpb.ProcessEvent_EndEvent) streamEvent {
	code, msg := p.exitOf(end)
	if code == 0 && msg == "" {
		ms := time.Since(p.started).Milliseconds()
		return streamEvent{Type: eventComplete, ExecutionTime: &ms}
	}
	return streamEvent{Type: eventErr, Error: &eventError{EName: "CommandExecError", EValue: strconv.Itoa(code), Traceback: []string{msg}}}
}

// brokenEvent is the event for a stream that broke: the exit code is not
// known, so evalue is not a number.
func brokenEvent(err error) streamEvent {
	return streamEvent{Type: eventErr, Error: &eventError{EName: "CommandExecError", EValue: err.Error(), Traceback: []string{err.Error()}}}
}

// eventPipe carries a followed process's events to the request streaming
// them, until that request leaves.
type eventPipe struct {
	ch     chan procEvent
	detach chan struct{}
	once   sync.Once
}

func newEventPipe() *eventPipe {
	return &eventPipe{ch: make(chan procEvent, 16), detach: make(chan struct{})}
}

// deliver passes ev on, or drops it once the request has left.
func (ep *eventPipe) deliver(ev procEvent) {
	select {
	case ep.ch <- ev:
	case <-ep.detach:
	}
}

// leave tells the follower the request is gone.
func (ep *eventPipe) leave() { ep.once.Do(func() { close(ep.detach) }) }

// streamForeground sends a foreground process's output as events until
// its end, which it returns (nil when the stream broke or the client
// left). When the client goes away mid-stream the process is killed —
// what execd does: its foreground command runs on the request's context,
// whose cancellation kills the command's process group. (Background
// commands are not tied to a request and keep running.)
func streamForeground(r *http.Request, s *sseWriter, p *startedProcess, ep *eventPipe, sandboxCtx context.Context) *procpb.ProcessEvent_EndEvent {
	defer ep.leave()
	var outCarry, errCarry utf8Carry
	ping := time.NewTicker(pingInterval)
	defer ping.Stop()
	gone := func() {
		_ = p.kill(sandboxCtx, procpb.Signal_SIGNAL_SIGKILL)
	}
	for {
		select {
		case ev := <-ep.ch:
			var err error
			switch {
			case ev.end != nil || ev.err != nil:
				if t := outCarry.flush(); t != "" {
					err = s.send(streamEvent{Type: eventStdout, Text: t})
				}
				if t := errCarry.flush(); t != "" && err == nil {
					err = s.send(streamEvent{Type: eventStderr, Text: t})
				}
				if err != nil {
					return ev.end
				}
				if ev.err != nil {
					_ = s.send(brokenEvent(ev.err))
					return nil
				}
				_ = s.send(p.endEvent(ev.end))
				return ev.end
			case len(ev.stdout) > 0:
				if t := outCarry.text(ev.stdout); t != "" {
					err = s.send(streamEvent{Type: eventStdout, Text: t})
				}
			case len(ev.stderr) > 0:
				if t := errCarry.text(ev.stderr); t != "" {
					err = s.send(streamEvent{Type: eventStderr, Text: t})
				}
			}
			if err != nil {
				gone()
				return nil
			}
		case <-ping.C:
			if s.send(streamEvent{Type: eventPing, Text: "pong"}) != nil {
				gone()
				return nil
			}
		case <-r.Context().Done():
			gone()
			return nil
		}
	}
}
