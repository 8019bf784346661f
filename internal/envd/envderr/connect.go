package envderr

import (
	"context"
	"errors"
	"os"
	"syscall"

	"connectrpc.com/connect"

	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Code is the Connect code the SDKs must see for err (shared/specs/
// e2b-protocol.md §3.11: not_found becomes NotFoundError, or false from
// files.exists() and commands.kill(); invalid_argument InvalidArgumentError;
// unauthenticated AuthenticationError; deadline_exceeded and canceled
// TimeoutError; anything else SandboxError). The first rule that matches
// wins:
//
//   - a *connect.Error in the chain: its own code;
//   - ErrInternal: internal;
//   - permissions.ErrUnknownUser, ErrUnauthenticated: unauthenticated
//     (before not_found: an unknown user also wraps errdefs.ErrNotFound);
//   - errdefs.ErrNotFound, fs.ErrNotExist, ENOTDIR: not_found (a path
//     below a file does not exist, and files.exists() must say false);
//   - errdefs.ErrInvalidArgument, EISDIR, ENAMETOOLONG, EINVAL:
//     invalid_argument;
//   - errdefs.ErrAlreadyExists, fs.ErrExist: already_exists;
//   - fs.ErrPermission, EROFS: permission_denied;
//   - errdefs.ErrFailedPrecondition: failed_precondition;
//   - errdefs.ErrNotImplemented: unimplemented;
//   - errdefs.ErrResourceExhausted: resource_exhausted (RateLimitError);
//   - context.DeadlineExceeded: deadline_exceeded;
//   - context.Canceled: canceled;
//   - anything else, errdefs.ErrUnavailable included: internal. The SDKs
//     read unavailable as "the sandbox is gone" (TimeoutError, or
//     SandboxNotFoundError at a stream's start), which a failure inside a
//     running envd never means.
//
// Code(nil) is connect.Code(0), which is no code.
func Code(err error) connect.Code {
	var ce *connect.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, ErrInternal):
		return connect.CodeInternal
	case errors.Is(err, permissions.ErrUnknownUser), errors.Is(err, ErrUnauthenticated):
		return connect.CodeUnauthenticated
	case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return connect.CodeNotFound
	case errors.Is(err, errdefs.ErrInvalidArgument), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.EINVAL):
		return connect.CodeInvalidArgument
	case errors.Is(err, errdefs.ErrAlreadyExists), errors.Is(err, os.ErrExist):
		return connect.CodeAlreadyExists
	case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS):
		return connect.CodePermissionDenied
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return connect.CodeFailedPrecondition
	case errors.Is(err, errdefs.ErrNotImplemented):
		return connect.CodeUnimplemented
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return connect.CodeResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	default:
		return connect.CodeInternal
	}
}

// ToConnect returns err as a *connect.Error with the code [Code] chooses
// and err's own text as its message; a *connect.Error in err's chain is
// returned as it is. ToConnect(nil) is nil.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(Code(err), err)
}

// Interceptor returns the Connect interceptor that passes every error a
// handler returns through [ToConnect], so that handlers only classify and
// wrap their errors. Each envd Connect service is mounted with
// connect.WithInterceptors(envderr.Interceptor()). It changes nothing
// else: requests and responses pass through untouched, and it does not
// act on clients.
func Interceptor() connect.Interceptor { return interceptor{} }

type interceptor struct{}

func (interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		if err != nil {
			return resp, ToConnect(err)
		}
		return resp, nil
	}
}

func (interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return ToConnect(next(ctx, conn))
	}
}
