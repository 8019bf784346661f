package filesystem

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
)

// Stat describes one path without following a final symlink (the entry then
// carries the target's type). Missing → not_found, which files.exists()
// turns into false.
func (s *Service) Stat(_ context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	_, path, err := s.userAndPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := statEntry(path, loadIDNames())
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}
