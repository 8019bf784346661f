package process

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// SendInput implements process.Process/SendInput: stdin bytes to a pipe
// process, pty bytes to a terminal.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	if _, err := s.user(req.Header()); err != nil {
		return nil, err
	}
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// CloseStdin implements process.Process/CloseStdin: EOF on a pipe process's
// standard input. A terminal has no such thing (send Ctrl-D instead).
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	if _, err := s.user(req.Header()); err != nil {
		return nil, err
	}
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.pty != nil {
		return nil, errdefs.Mark(errors.New("cannot close the stdin of a PTY process; send Ctrl-D (0x04) instead"), envderr.ErrInternal)
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return nil, errdefs.Mark(errors.New("stdin is not open"), envderr.ErrInternal)
	}
	err = p.stdin.Close()
	p.stdin = nil
	if err != nil {
		return nil, errdefs.Mark(err, envderr.ErrInternal)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// StreamInput implements process.Process/StreamInput: a start message
// selecting the process, then input messages. No E2B SDK uses it (browsers
// cannot stream request bodies); Connect clients that can stream may.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	if _, err := s.user(stream.RequestHeader()); err != nil {
		return nil, err
	}
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := s.lookup(ev.Start.GetProcess())
			if err != nil {
				return nil, err
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, errdefs.Mark(errors.New("input before the start message"), errdefs.ErrFailedPrecondition)
			}
			if err := p.write(ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// write sends input of the kind the process takes. Input of the wrong
// kind, or to a closed stdin, is internal: the reference envd answers so
// and the SDKs raise SandboxError for it.
func (p *proc) write(in *pb.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		if p.pty != nil {
			return errdefs.Mark(errors.New("process is a PTY: send pty input"), envderr.ErrInternal)
		}
		p.stdinMu.Lock()
		defer p.stdinMu.Unlock()
		if p.stdin == nil {
			return errdefs.Mark(errors.New("stdin is not open (start the process with stdin: true)"), envderr.ErrInternal)
		}
		if _, err := p.stdin.Write(v.Stdin); err != nil {
			return errdefs.Mark(err, envderr.ErrInternal)
		}
	case *pb.ProcessInput_Pty:
		if p.pty == nil {
			return errdefs.Mark(errors.New("process has no PTY: send stdin input"), envderr.ErrInternal)
		}
		if _, err := p.pty.Write(v.Pty); err != nil {
			return errdefs.Mark(err, envderr.ErrInternal)
		}
	default:
		return errdefs.Mark(errors.New("no input"), errdefs.ErrInvalidArgument)
	}
	return nil
}
