// Package files serves envd's plain-HTTP /files endpoint: GET streams a file
// out of the sandbox, POST writes one or more files into it. E2B's SDKs use
// it for files.read, files.write and signed upload/download URLs, so the
// wire behaviour follows E2B's envd to the byte (specs/e2b-protocol.md
// §3.6, §3.7, §3.9): token or URL-signature auth, ?username= user
// selection, multipart and octet-stream (optionally gzip) uploads, and the
// {"code","message"} JSON error body.
//
// Where this package deliberately differs from the reference envd, it is to
// be safer: an upload goes to a temporary file that is renamed over the
// target only when complete, so a failed or aborted upload never leaves a
// partial file behind, and a multi-file upload commits only once every file
// arrived.
package files

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// DefaultMaxUploadBytes is the request body limit when Options leaves it
// zero. It is large because SDK users upload datasets and archives; uploads
// stream to disk, so the limit guards the disk, not memory.
const DefaultMaxUploadBytes int64 = 10 << 30

// Options tunes the endpoint. The zero value is ready to use.
type Options struct {
	// MaxUploadBytes caps both the request body of an upload and the bytes
	// it decodes to (a gzip body may expand); beyond it the upload fails
	// with 413 and nothing is written. Zero means DefaultMaxUploadBytes;
	// negative means no limit.
	MaxUploadBytes int64
}

// Handle mounts /files on mux with the default Options: GET (and HEAD)
// downloads, POST uploads, any other method gets 405 with the JSON error
// body. st is read on every request, so a token or default user set later by
// /init applies at once. A nil logger discards.
func Handle(mux *http.ServeMux, st *config.State, logger *slog.Logger) {
	HandleOptions(mux, st, logger, Options{})
}

// HandleOptions is Handle with explicit Options.
func HandleOptions(mux *http.ServeMux, st *config.State, logger *slog.Logger, opts Options) {
	mux.Handle("/files", newService(st, logger, opts))
}

// service is the /files handler. It holds no per-request state, so one value
// serves concurrent requests.
type service struct {
	st        *config.State
	log       *slog.Logger
	maxUpload int64 // <= 0: no limit
	now       func() time.Time
}

func newService(st *config.State, logger *slog.Logger, opts Options) *service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	limit := opts.MaxUploadBytes
	if limit == 0 {
		limit = DefaultMaxUploadBytes
	}
	return &service{st: st, log: logger, maxUpload: limit, now: time.Now}
}

// ServeHTTP authenticates, resolves the user, then dispatches by method.
// Auth comes first so that an unauthenticated caller learns nothing about
// users or paths.
func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var op string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		op = envdapi.OpRead
	case http.MethodPost:
		op = envdapi.OpWrite
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		envderr.Write(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on /files", r.Method))
		return
	}
	q := r.URL.Query()
	if err := authorize(r, q, s.st.Token(), op, s.now()); err != nil {
		s.fail(w, r, err)
		return
	}
	u, err := permissions.Resolve(q.Get("username"), s.st.DefaultUser())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if op == envdapi.OpRead {
		s.download(w, r, u, q.Get("path"))
	} else {
		s.upload(w, r, u, q.Get("path"))
	}
}

// fail answers err with the JSON error body and the status its class maps
// to (envderr.Status). Server-side failures are logged because the client
// cannot act on them.
func (s *service) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := envderr.WriteError(w, err)
	if status >= 500 {
		s.log.Error("files request failed", "method", r.Method, "path", r.URL.Query().Get("path"), "status", status, "err", err)
	} else {
		s.log.Debug("files request refused", "method", r.Method, "path", r.URL.Query().Get("path"), "status", status, "err", err)
	}
}
