package files

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"syscall"

	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// errUnauthorized marks a request whose token or signature is missing, wrong
// or expired. It is local because only this HTTP edge authenticates this way;
// statusOf turns it into 401, which the SDKs raise as AuthenticationError.
var errUnauthorized = errors.New("unauthorized")

// errorBody is envd's REST error body (spec §3.6). Code repeats the HTTP
// status as an integer because the JS SDK reads body.code.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError is the one place that writes the envd REST error body, so every
// failure of /files looks the same to the SDKs whatever produced it. It drops
// headers that a download may already have set for the content it will now
// not send.
func writeError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	for _, k := range []string{"Content-Length", "Content-Encoding", "Content-Disposition", "Last-Modified", "Etag", "Accept-Ranges"} {
		h.Del(k)
	}
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	// An error here means the client is gone; there is nobody left to tell.
	_ = json.NewEncoder(w).Encode(errorBody{Code: status, Message: msg})
}

// statusOf maps an error class to its HTTP status once, at this edge, so the
// handlers only wrap errors and never pick statuses branch by branch. The
// order matters: an unknown user also wraps errdefs.ErrNotFound but must be
// 401, as envd answers "unauthenticated" for it.
func statusOf(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, errUnauthorized), errors.Is(err, permissions.ErrUnknownUser):
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
	case errors.Is(err, errdefs.ErrNotImplemented):
		return http.StatusNotImplemented
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// errorBodyWriter sits between http.ServeContent and the client. ServeContent
// reports its own failures (416 for a bad Range, 412 for a failed
// precondition) with http.Error as text/plain; this writer holds such a reply
// back and lets finish rewrite it as the JSON error body, so that "one error
// shape everywhere" also holds for the replies net/http writes for us.
type errorBodyWriter struct {
	http.ResponseWriter
	status int // non-zero once an error status was held back
	msg    bytes.Buffer
}

func (w *errorBodyWriter) WriteHeader(code int) {
	if code >= 400 {
		w.status = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *errorBodyWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		if w.msg.Len() < 1024 {
			w.msg.Write(p)
		}
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// ReadFrom keeps net/http's sendfile path for ServeContent's copy, which a
// plain wrapper would hide.
func (w *errorBodyWriter) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok && w.status == 0 {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{w}, r)
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *errorBodyWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the held-back error, if any, as the JSON error body.
func (w *errorBodyWriter) finish() {
	if w.status != 0 {
		writeError(w.ResponseWriter, w.status, strings.TrimSpace(w.msg.String()))
	}
}
