package process

import (
	"context"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
)

// Connect implements process.Process/Connect: attach to a running process.
// Its deadline ends only this stream, never the process.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	if _, err := s.user(req.Header()); err != nil {
		return err
	}
	p, err := s.lookup(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	return follow(ctx, p, p.subscribe(), keepaliveInterval(req.Header()), send)
}
