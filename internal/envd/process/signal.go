package process

import (
	"context"
	"fmt"
	"syscall"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// SendSignal implements process.Process/SendSignal. Like the reference
// envd it knows SIGTERM and SIGKILL; the Start stream then ends with
// exitCode -1.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	if _, err := s.user(req.Header()); err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, errdefs.Mark(fmt.Errorf("signal %v is not supported", req.Msg.GetSignal()), errdefs.ErrNotImplemented)
	}
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	// Ended processes stay findable for Connect, but there is nothing left
	// to signal: the SDK's kill() then returns false.
	if p.ended() {
		return nil, errdefs.Mark(fmt.Errorf("process with pid %d has already ended", p.pid), errdefs.ErrNotFound)
	}
	if err := p.signal(sig); err != nil {
		return nil, errdefs.Mark(err, envderr.ErrInternal)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}
