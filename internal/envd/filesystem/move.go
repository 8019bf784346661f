package filesystem

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
)

// Move renames source to destination, creating the destination's missing
// parents (owned by the request's user), and returns the moved entry, which
// files.rename() hands back to the caller.
func (s *Service) Move(_ context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	u, src, err := s.userAndPath(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst, err := permissions.ExpandAndResolve(req.Msg.GetDestination(), u, s.st.DefaultWorkdir())
	if err != nil {
		return nil, err
	}
	// Check the source first so a missing source is not_found even when the
	// destination's parents could not be created.
	if _, err := os.Lstat(src); err != nil {
		return nil, fmt.Errorf("source %s: %w", src, err)
	}
	if err := permissions.MkdirAllAs(filepath.Dir(dst), u, 0o755); err != nil {
		return nil, fmt.Errorf("create parents of %s: %w", dst, err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, fmt.Errorf("move %s to %s: %w", src, dst, err)
	}
	e, err := statEntry(dst, loadIDNames())
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", dst, err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}
