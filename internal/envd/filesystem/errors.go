package filesystem

import (
	"context"
	"errors"
	"os"
	"syscall"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// toConnectError maps an error from the OS, errdefs or permissions to the
// Connect code the SDKs turn into the right exception (§3.11). It is the only
// place codes are chosen, so handlers just wrap with context and return.
func toConnectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(codeOf(err), err)
}

func codeOf(err error) connect.Code {
	switch {
	// Before not-found: ErrUnknownUser also wraps errdefs.ErrNotFound, but an
	// unknown user is an authentication failure to the SDK.
	case errors.Is(err, permissions.ErrUnknownUser):
		return connect.CodeUnauthenticated
	// ENOTDIR means a path component is a file: the path does not exist, and
	// files.exists() must then say false rather than throw.
	case errors.Is(err, os.ErrNotExist), errors.Is(err, errdefs.ErrNotFound), errors.Is(err, syscall.ENOTDIR):
		return connect.CodeNotFound
	case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EINVAL):
		return connect.CodeInvalidArgument
	case errors.Is(err, errdefs.ErrAlreadyExists), errors.Is(err, os.ErrExist):
		return connect.CodeAlreadyExists
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS):
		return connect.CodePermissionDenied
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	default:
		return connect.CodeInternal
	}
}
