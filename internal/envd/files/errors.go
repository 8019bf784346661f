package files

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
)

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
		envderr.Write(w.ResponseWriter, w.status, strings.TrimSpace(w.msg.String()))
	}
}
