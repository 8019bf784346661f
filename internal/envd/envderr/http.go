package envderr

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"syscall"

	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Status is the HTTP status envd's REST endpoints answer err with. The
// first rule that matches wins:
//
//   - nil: 200;
//   - ErrInternal: 500;
//   - ErrUnauthenticated, permissions.ErrUnknownUser: 401, as the
//     reference envd answers an unknown user (before 404: an unknown user
//     also wraps errdefs.ErrNotFound);
//   - *http.MaxBytesError: 413;
//   - ENOSPC, EDQUOT: 507 (the SDKs' NotEnoughSpaceError);
//   - errdefs.ErrInvalidArgument, ENOTDIR, EISDIR, ENAMETOOLONG, ELOOP:
//     400. Unlike [Code], ENOTDIR is a bad request here: writing below a
//     file cannot succeed (a download classifies a path below a file as
//     errdefs.ErrNotFound where it looks the path up, and gets 404);
//   - errdefs.ErrNotFound, fs.ErrNotExist: 404;
//   - fs.ErrPermission, EROFS: 403;
//   - errdefs.ErrAlreadyExists: 409;
//   - errdefs.ErrFailedPrecondition: 409, as the control plane answers it;
//   - errdefs.ErrNotImplemented: 501;
//   - errdefs.ErrUnavailable: 503;
//   - errdefs.ErrResourceExhausted: 429 (RateLimitError);
//   - anything else: 500.
func Status(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrInternal):
		return http.StatusInternalServerError
	case errors.Is(err, ErrUnauthenticated), errors.Is(err, permissions.ErrUnknownUser):
		return http.StatusUnauthorized
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return http.StatusInsufficientStorage
	case errors.Is(err, errdefs.ErrInvalidArgument),
		errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		return http.StatusBadRequest
	case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return http.StatusForbidden
	case errors.Is(err, errdefs.ErrAlreadyExists):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return http.StatusConflict
	case errors.Is(err, errdefs.ErrNotImplemented):
		return http.StatusNotImplemented
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return http.StatusTooManyRequests
	default:
		return http.StatusInternalServerError
	}
}

// Write answers a REST request with status and envd's error body,
// envdapi.Error: {"code":status,"message":msg} and a newline, as
// application/json (the code repeats the status because the JS SDK reads
// body.code). It is the only writer of that body, so every REST failure
// looks the same to the SDKs whatever produced it. It drops the headers a
// download may already have set for the content it will now not send, and
// must be called before anything else is written to w. A write error
// means the client has gone, so there is nobody to tell and Write returns
// nothing.
func Write(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	for _, k := range []string{"Content-Length", "Content-Encoding", "Content-Disposition", "Last-Modified", "Etag", "Accept-Ranges"} {
		h.Del(k)
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(envdapi.Error{Code: status, Message: msg})
}

// WriteError answers a REST request with err: the status [Status] chooses
// and err's text as the message. It returns the status, for the log.
func WriteError(w http.ResponseWriter, err error) int {
	status := Status(err)
	Write(w, status, err.Error())
	return status
}
