package process

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"github.com/creack/pty"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Update implements process.Process/Update: resize a process's terminal.
func (s *Service) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	if _, err := s.user(req.Header()); err != nil {
		return nil, err
	}
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if p.pty == nil {
			return nil, errdefs.Mark(errors.New("process has no PTY to resize"), envderr.ErrInternal)
		}
		if err := pty.Setsize(p.pty, &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())}); err != nil {
			return nil, errdefs.Mark(err, envderr.ErrInternal)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}
