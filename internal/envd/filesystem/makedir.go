package filesystem

import (
	"context"
	"fmt"
	"os"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// MakeDir is mkdir -p with every created directory owned by the request's
// user. An existing directory is already_exists (files.makeDir() → false);
// an existing non-directory is invalid_argument.
func (s *Service) MakeDir(_ context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, path, err := s.userAndPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return nil, fmt.Errorf("directory %s: %w", path, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("%s exists and is not a directory: %w", path, errdefs.ErrInvalidArgument)
	}
	if err := permissions.MkdirAllAs(path, u, 0o755); err != nil {
		return nil, fmt.Errorf("make directory %s: %w", path, err)
	}
	e, err := statEntry(path, loadIDNames())
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}
