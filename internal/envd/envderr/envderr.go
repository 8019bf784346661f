// Package envderr is where envd's errors meet its wires, once. Handlers
// classify an error where it arises (an errdefs class, a class of this
// package or permissions.ErrUnknownUser, wrapped with %w or attached with
// errdefs.Mark; or the OS error itself) and return it. This package then
// chooses what the client sees: a Connect code for the process and
// filesystem services ([Code], [ToConnect], [Interceptor]), or an HTTP
// status and envd's {"code","message"} body for the REST endpoints
// ([Status], [Write]). Nothing else in envd picks a code or writes an error
// body.
//
// The two mappings differ only where the SDKs read the two wires
// differently; [Code] and [Status] each say where.
package envderr

import "errors"

// Classes that only envd's edges know. The rest are errdefs'.
var (
	// ErrUnauthenticated means the request's credentials (access token or
	// URL signature) are missing, wrong or expired: unauthenticated, 401
	// (AuthenticationError in the SDKs).
	ErrUnauthenticated = errors.New("unauthorized")
	// ErrInternal marks a failure of envd or of the OS that the client can
	// do nothing about, whatever the error it marks wraps: starting a
	// command that fails with ENOENT (its interpreter is missing) is
	// internal, not not_found. Attach it with errdefs.Mark to keep the
	// message as it is.
	ErrInternal = errors.New("internal error")
)
