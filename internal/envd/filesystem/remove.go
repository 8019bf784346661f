package filesystem

import (
	"context"
	"fmt"
	"os"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
)

// Remove deletes path and everything below it. A missing path is success,
// like the reference envd's remove-all: the caller's goal is already met.
func (s *Service) Remove(_ context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	_, path, err := s.userAndPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(path); err != nil {
		return nil, fmt.Errorf("remove %s: %w", path, err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}
