package files

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// copyBufSize is the chunk size for streaming files; big enough for
// throughput, small enough that many concurrent transfers stay cheap.
const copyBufSize = 256 << 10

// download serves GET /files (spec §3.7). Regular files only: a FIFO would
// block the handler and a device could stream forever.
func (s *service) download(w http.ResponseWriter, r *http.Request, u *permissions.User, path string) {
	if path == "" {
		s.fail(w, r, fmt.Errorf("the path query parameter is required: %w", errdefs.ErrInvalidArgument))
		return
	}
	resolved, err := permissions.ExpandAndResolve(path, u, s.st.DefaultWorkdir())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		s.fail(w, r, notExist(resolved, err))
		return
	}
	if err := checkReadable(resolved, fi); err != nil {
		s.fail(w, r, err)
		return
	}
	enc := negotiateEncoding(r.Header.Values("Accept-Encoding"))
	if enc == "" {
		envderr.Write(w, http.StatusNotAcceptable, "none of the encodings in Accept-Encoding is supported; supported: gzip, identity")
		return
	}
	f, err := os.Open(resolved)
	if err != nil {
		s.fail(w, r, notExist(resolved, err))
		return
	}
	defer f.Close()
	// Check the opened file again: the path may have been replaced between
	// the Stat and the Open.
	if fi, err = f.Stat(); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkReadable(resolved, fi); err != nil {
		s.fail(w, r, err)
		return
	}

	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", contentDisposition(filepath.Base(resolved)))
	h.Add("Vary", "Accept-Encoding")

	var body io.ReadSeeker = f
	if fi.Size() == 0 && r.Method != http.MethodHead {
		// Size 0 is either an empty file, for which the SDK wants
		// Content-Length: 0, or a pseudo-file (/proc, /sys) whose size is
		// unknown until read. One read tells them apart.
		first := make([]byte, 32<<10)
		n, err := io.ReadFull(f, first)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			s.fail(w, r, err)
			return
		}
		if n > 0 {
			s.stream(w, fi.ModTime(), enc, io.MultiReader(bytes.NewReader(first[:n]), f))
			return
		}
		body = bytes.NewReader(nil)
	}
	// Ranges need identity encoding; a client asking for one (undici sends
	// Accept-Encoding: gzip always) gets the range rather than a whole
	// gzipped file. Empty bodies and HEAD are not worth compressing.
	if enc == "gzip" && fi.Size() > 0 && r.Method != http.MethodHead && r.Header.Get("Range") == "" {
		s.stream(w, fi.ModTime(), enc, f)
		return
	}
	ew := &errorBodyWriter{ResponseWriter: w}
	http.ServeContent(ew, r, filepath.Base(resolved), fi.ModTime(), body)
	ew.finish()
}

// stream sends src with status 200 and no Content-Length, gzip-compressed
// when enc is "gzip". A failure midway aborts the connection, so the client
// sees a broken transfer rather than a complete-looking truncated file.
func (s *service) stream(w http.ResponseWriter, mod time.Time, enc string, src io.Reader) {
	if !mod.IsZero() && mod.Unix() > 0 {
		w.Header().Set("Last-Modified", mod.UTC().Format(http.TimeFormat))
	}
	w.Header().Del("Content-Length")
	var dst io.Writer = w
	var gw *gzip.Writer
	if enc == "gzip" {
		w.Header().Set("Content-Encoding", "gzip")
		gw, _ = gzip.NewWriterLevel(w, gzip.BestSpeed) // BestSpeed is a valid level: no error
		dst = gw
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.CopyBuffer(dst, src, make([]byte, copyBufSize)); err != nil {
		s.log.Debug("files download aborted", "err", err)
		panic(http.ErrAbortHandler)
	}
	if gw != nil {
		if err := gw.Close(); err != nil {
			panic(http.ErrAbortHandler)
		}
	}
}

// notExist turns "no such file" and "a parent is not a directory" into one
// 404 with the resolved path, which is what a caller of files.read needs.
func notExist(path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("path %q does not exist: %w", path, errdefs.ErrNotFound)
	}
	return err
}

// checkReadable refuses what GET /files does not serve: directories (400, as
// the reference) and other non-regular files.
func checkReadable(path string, fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return fmt.Errorf("path %q is a directory: %w", path, errdefs.ErrInvalidArgument)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("path %q is not a regular file: %w", path, errdefs.ErrInvalidArgument)
	}
	return nil
}

// negotiateEncoding picks "gzip" or "identity" from Accept-Encoding
// (RFC 9110 §12.5.3), or "" when the client accepts neither. Identity is
// acceptable unless excluded explicitly (identity;q=0, or *;q=0 without an
// identity entry); gzip wins ties, and over an unlisted identity, because it
// saves bandwidth.
func negotiateEncoding(values []string) string {
	gzipQ, identityQ, starQ := -1.0, -1.0, -1.0
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(item, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding == "" {
				continue
			}
			q := 1.0
			if k, val, ok := strings.Cut(strings.TrimSpace(params), "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				parsed, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || parsed < 0 || parsed > 1 {
					continue // malformed entries are ignored
				}
				q = parsed
			}
			switch coding {
			case "gzip", "x-gzip":
				gzipQ = q
			case "identity":
				identityQ = q
			case "*":
				starQ = q
			}
		}
	}
	if gzipQ < 0 && starQ >= 0 {
		gzipQ = starQ
	}
	if identityQ < 0 {
		// Unlisted identity stays acceptable, but as the last resort: a
		// client that lists gzip at any q prefers it to nothing listed.
		identityQ = 0.0001
		if starQ == 0 {
			identityQ = 0
		}
	}
	switch {
	case gzipQ > 0 && gzipQ >= identityQ:
		return "gzip"
	case identityQ > 0:
		return "identity"
	case gzipQ > 0:
		return "gzip"
	}
	return ""
}

// contentDisposition formats `inline; filename="<name>"` with the name as a
// quoted-string (RFC 9110), which mime.FormatMediaType would leave unquoted
// for token-only names. Names with bytes outside printable ASCII get an ASCII
// fallback plus an RFC 8187 filename* parameter, as browsers expect.
func contentDisposition(name string) string {
	ascii := true
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			ascii = false
			break
		}
	}
	if ascii {
		return `inline; filename="` + quoteEscape(name) + `"`
	}
	var fallback, ext strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c > 0x7e {
			fallback.WriteByte('_')
		} else {
			fallback.WriteByte(c)
		}
		if isAttrChar(c) {
			ext.WriteByte(c)
		} else {
			fmt.Fprintf(&ext, "%%%02X", c)
		}
	}
	return `inline; filename="` + quoteEscape(fallback.String()) + `"; filename*=UTF-8''` + ext.String()
}

func quoteEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}

// isAttrChar reports whether c may appear unencoded in an RFC 8187 value.
func isAttrChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$&+-.^_`|~", c) >= 0
}
