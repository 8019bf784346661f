package process

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
)

// Output chunk sizes, as the reference envd sends them.
const (
	pipeChunk = 32 << 10
	ptyChunk  = 16 << 10
)

// proc is one started process and the streams attached to it.
type proc struct {
	pid    uint32
	config *pb.ProcessConfig
	tag    *string
	cmd    *exec.Cmd

	stdinMu sync.Mutex
	stdin   io.WriteCloser // pipe; nil when stdin is /dev/null or closed
	pty     *os.File       // master; nil for pipe processes

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	end  *pb.ProcessEvent // set once the process has ended
	done chan struct{}    // closed with end
}

// subscriber is one stream attached to a process.
type subscriber struct {
	ch   chan *pb.ProcessEvent
	gone chan struct{} // closed when the stream leaves
}

// subscribe attaches a stream. Output produced before it attached is not
// replayed (as in the reference envd); the end event always arrives.
func (p *proc) subscribe() *subscriber {
	s := &subscriber{ch: make(chan *pb.ProcessEvent, 64), gone: make(chan struct{})}
	p.mu.Lock()
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	return s
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.gone)
}

func (p *proc) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// publish hands an output event to every attached stream. A slow stream
// slows the process's output (backpressure through the pipe), a departed
// one never blocks it.
func (p *proc) publish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// pump copies one output stream into data events until it ends.
func (p *proc) pump(r io.Reader, size int, wrap func([]byte) *pb.ProcessEvent_DataEvent) {
	buf := make([]byte, size)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: wrap(data)}})
		}
		if err != nil {
			return
		}
	}
}

// finish records how the process ended and tells every stream.
func (p *proc) finish(waitErr error) {
	end := &pb.ProcessEvent_EndEvent{}
	st := p.cmd.ProcessState
	switch {
	case st == nil:
		msg := "process could not be waited for"
		if waitErr != nil {
			msg = waitErr.Error()
		}
		end.ExitCode, end.Status, end.Error = -1, msg, &msg
	case st.Exited():
		end.ExitCode, end.Exited, end.Status = int32(st.ExitCode()), true, st.String()
	default:
		// Killed by a signal: the SDK expects -1 and "signal: killed".
		end.ExitCode, end.Status = -1, st.String()
	}
	if end.ExitCode != 0 && end.Error == nil {
		msg := end.Status
		end.Error = &msg
	}
	ev := &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
	p.mu.Lock()
	p.end = ev
	p.mu.Unlock()
	close(p.done)
}

// signal delivers sig to the process's whole process group (it leads its
// own session), so a command's children go with it.
func (p *proc) signal(sig syscall.Signal) error {
	err := syscall.Kill(-int(p.pid), sig)
	if errors.Is(err, syscall.ESRCH) {
		err = syscall.Kill(int(p.pid), sig)
	}
	if errors.Is(err, syscall.ESRCH) && p.ended() {
		return nil
	}
	return err
}

// closeOutputsAfterExit bounds how long output is read once the process
// itself has exited: a background child that inherited its stdout must not
// keep the stream open forever.
const closeOutputsAfterExit = 200 * time.Millisecond
