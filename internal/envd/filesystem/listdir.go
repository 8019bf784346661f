package filesystem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// ListDir lists path down to depth levels (0 is taken as 1, since proto3
// cannot tell an unset depth from 0). The listed directory itself may be a
// symlink, which is followed; symlinks below it are reported but not
// descended into, so link cycles cannot make the walk endless. Entry paths
// are under the requested path, not under the symlink's target.
func (s *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	_, path, err := s.userAndPath(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("list %s: not a directory: %w", path, errdefs.ErrInvalidArgument)
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	entries := []*pb.EntryInfo{}
	if err := listInto(ctx, &entries, path, depth, loadIDNames()); err != nil {
		return nil, fmt.Errorf("list %s: %w", path, err)
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}

// listInto appends the entries of dir, recursing into real subdirectories
// while depth allows. Entries that vanish mid-listing are skipped: a listing
// of a changing directory is a snapshot, not an error. Unreadable
// subdirectories are skipped for the same reason; only the top level must
// be readable.
func listInto(ctx context.Context, out *[]*pb.EntryInfo, dir string, depth int, names *idNames) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := filepath.Join(dir, de.Name())
		fi, err := de.Info()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		*out = append(*out, entryFromInfo(p, fi, names))
		if depth > 1 && fi.IsDir() {
			if err := listInto(ctx, out, p, depth-1, names); err != nil &&
				!errors.Is(err, os.ErrNotExist) && !errors.Is(err, os.ErrPermission) {
				return err
			}
		}
	}
	return nil
}
