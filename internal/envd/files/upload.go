package files

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/klauspost/compress/gzip"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Metadata limits (spec §3.7). A key may be 246 bytes because
// "user.e2b." + 246 bytes is XATTR_NAME_MAX (255).
const (
	metadataHeaderPrefix = "x-metadata-"
	xattrPrefix          = "user.e2b."
	maxMetadataKey       = 246
	maxMetadataTotal     = 4096
)

// newFileMode is the mode of a file an upload creates: what the reference's
// 0666 gives under the usual umask 022. A replaced file keeps its own mode.
const newFileMode fs.FileMode = 0o644

// entryInfo is one element of the upload reply (spec §3.7).
type entryInfo struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// upload serves POST /files. Every file of the request is first staged in a
// temporary file beside its target; only when the whole request has been
// read are they renamed into place, so a bad part, an oversized body or a
// dropped connection leaves the targets as they were.
func (s *service) upload(w http.ResponseWriter, r *http.Request, u *permissions.User, pathParam string) {
	meta, err := parseMetadata(r.Header)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var body io.Reader = r.Body
	if s.maxUpload > 0 {
		body = http.MaxBytesReader(w, r.Body, s.maxUpload)
	}
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(body)
		if err != nil {
			s.fail(w, r, readError(fmt.Errorf("gzip request body: %w", err)))
			return
		}
		defer zr.Close()
		body = zr
	default:
		s.fail(w, r, fmt.Errorf("unsupported Content-Encoding %q; supported: gzip, identity: %w", enc, errdefs.ErrInvalidArgument))
		return
	}
	if s.maxUpload > 0 {
		// The raw body is capped above; this caps what it decodes to.
		body = &limitReader{r: body, left: s.maxUpload, limit: s.maxUpload}
	}

	var staged []*stagedFile
	defer func() {
		for _, sf := range staged {
			sf.discard()
		}
	}()
	stage := func(target string, src io.Reader) error {
		for _, sf := range staged {
			if sf.path == target {
				return fmt.Errorf("cannot upload several files to the same path %q: %w", target, errdefs.ErrInvalidArgument)
			}
		}
		sf, err := stageFile(target, src, u, meta)
		if err != nil {
			return err
		}
		staged = append(staged, sf)
		return nil
	}
	resolve := func(p string) (string, error) {
		return permissions.ExpandAndResolve(p, u, s.st.DefaultWorkdir())
	}

	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		mediaType = ""
	}
	switch mediaType {
	case "multipart/form-data":
		boundary := params["boundary"]
		if boundary == "" {
			s.fail(w, r, fmt.Errorf("multipart/form-data without a boundary: %w", errdefs.ErrInvalidArgument))
			return
		}
		if err := s.uploadMultipart(multipart.NewReader(body, boundary), pathParam, resolve, stage); err != nil {
			s.fail(w, r, err)
			return
		}
	case "application/octet-stream":
		if pathParam == "" {
			s.fail(w, r, fmt.Errorf("the path query parameter is required for application/octet-stream uploads: %w", errdefs.ErrInvalidArgument))
			return
		}
		target, err := resolve(pathParam)
		if err == nil {
			err = stage(target, body)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
	default:
		s.fail(w, r, fmt.Errorf("unsupported Content-Type %q; use multipart/form-data or application/octet-stream: %w", r.Header.Get("Content-Type"), errdefs.ErrInvalidArgument))
		return
	}

	reply := make([]entryInfo, 0, len(staged))
	for _, sf := range staged {
		if err := sf.commit(); err != nil {
			s.fail(w, r, fmt.Errorf("moving upload into place at %q: %w", sf.path, err))
			return
		}
		reply = append(reply, entryInfo{Path: sf.path, Name: filepath.Base(sf.path), Type: "file", Metadata: meta})
		s.log.Debug("file uploaded", "path", sf.path, "user", u.Name)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(reply)
}

// uploadMultipart stages every part named "file" (spec §3.7). The target is
// pathParam when given, else the part's filename parameter exactly as sent:
// the SDKs put the full target path there.
func (s *service) uploadMultipart(mr *multipart.Reader, pathParam string, resolve func(string) (string, error), stage func(string, io.Reader) error) error {
	files := 0
	for {
		part, err := mr.NextPart()
		// Only a bare io.EOF is the closing boundary; a body cut short
		// comes back as an error wrapping io.EOF and must fail.
		if err == io.EOF { //nolint:errorlint // see above
			break
		}
		if err != nil {
			return readError(fmt.Errorf("reading multipart body: %w", err))
		}
		if part.FormName() != "file" {
			continue // NextPart skips the rest of this part
		}
		name := pathParam
		if name == "" {
			if name, err = rawFileName(part.Header); err != nil {
				return err
			}
		}
		target, err := resolve(name)
		if err != nil {
			return err
		}
		if err := stage(target, part); err != nil {
			return err
		}
		files++
	}
	if files == 0 {
		return fmt.Errorf("the multipart body has no part named \"file\": %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// rawFileName returns a part's filename parameter without the directory
// stripping that multipart.Part.FileName does, since it carries the full
// target path.
func rawFileName(h textproto.MIMEHeader) (string, error) {
	_, params, err := mime.ParseMediaType(h.Get("Content-Disposition"))
	if err != nil {
		return "", fmt.Errorf("part Content-Disposition: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	name := params["filename"]
	if name == "" {
		return "", fmt.Errorf("a file part has no filename and there is no path query parameter: %w", errdefs.ErrInvalidArgument)
	}
	return name, nil
}

// parseMetadata collects X-Metadata-<key> headers into the xattrs to set
// (spec §3.7). It returns nil when there are none, which clears a replaced
// file's metadata: the new inode simply has none.
func parseMetadata(h http.Header) (map[string]string, error) {
	var meta map[string]string
	total := 0
	for name, values := range h {
		lower := strings.ToLower(name)
		if !strings.HasPrefix(lower, metadataHeaderPrefix) {
			continue
		}
		key := lower[len(metadataHeaderPrefix):]
		// Repeated headers combine as a list, as HTTP defines them.
		value := strings.Join(values, ", ")
		switch {
		case key == "":
			return nil, fmt.Errorf("metadata header %q has an empty key: %w", name, errdefs.ErrInvalidArgument)
		case len(key) > maxMetadataKey:
			return nil, fmt.Errorf("metadata key %q is longer than %d bytes: %w", key, maxMetadataKey, errdefs.ErrInvalidArgument)
		case !printableASCII(key) || !printableASCII(value):
			return nil, fmt.Errorf("metadata %q must be printable ASCII: %w", key, errdefs.ErrInvalidArgument)
		}
		total += len(key) + len(value)
		if total > maxMetadataTotal {
			return nil, fmt.Errorf("metadata is larger than %d bytes: %w", maxMetadataTotal, errdefs.ErrInvalidArgument)
		}
		if meta == nil {
			meta = map[string]string{}
		}
		meta[key] = value
	}
	return meta, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// stagedFile is a fully written temporary file waiting to be renamed over
// its target.
type stagedFile struct {
	path string // target as requested, reported to the client
	dest string // where the rename goes: path with a final symlink followed
	tmp  string // "" once committed or discarded
}

// stageFile writes src into a new temporary file next to target's real
// location, owned by u, carrying meta as user.e2b.* xattrs. On any error the
// temporary file is gone and target untouched. Parents of target are created
// owned by u, as the SDK's files.write promises.
func stageFile(target string, src io.Reader, u *permissions.User, meta map[string]string) (_ *stagedFile, err error) {
	if err := permissions.MkdirAllAs(filepath.Dir(target), u, 0o755); err != nil {
		return nil, fmt.Errorf("creating parent directories of %q: %w", target, err)
	}
	dest, err := followSymlinks(target)
	if err != nil {
		return nil, err
	}
	mode := newFileMode
	switch fi, err := os.Stat(dest); {
	case err == nil && fi.IsDir():
		return nil, fmt.Errorf("path %q is a directory: %w", target, errdefs.ErrInvalidArgument)
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("path %q is not a regular file: %w", target, errdefs.ErrInvalidArgument)
	case err == nil:
		mode = fi.Mode().Perm() // overwriting keeps the file's mode, as truncation would
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}

	f, tmp, err := createTemp(filepath.Dir(dest), filepath.Base(dest))
	if err != nil {
		return nil, fmt.Errorf("creating a temporary file for %q: %w", target, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	// Chown before Chmod: a chown may clear mode bits.
	if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
		return nil, fmt.Errorf("giving %q to %s: %w", target, u.Name, err)
	}
	if err := f.Chmod(mode); err != nil {
		return nil, err
	}
	fw := &fileWriter{f: f}
	if _, err := io.CopyBuffer(fw, src, make([]byte, copyBufSize)); err != nil {
		if fw.err != nil {
			return nil, fmt.Errorf("writing %q: %w", target, fw.err)
		}
		return nil, readError(err)
	}
	if err := setMetadata(f, meta); err != nil {
		return nil, fmt.Errorf("setting metadata on %q: %w", target, err)
	}
	// Close reports deferred write errors on some filesystems (NFS, quota).
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		f = nil
		return nil, fmt.Errorf("writing %q: %w", target, err)
	}
	return &stagedFile{path: target, dest: dest, tmp: tmp}, nil
}

// commit renames the staged file over its target. A rename within one
// directory is atomic: readers see the old file or the new one, never a mix.
func (sf *stagedFile) commit() error {
	if err := os.Rename(sf.tmp, sf.dest); err != nil {
		sf.discard()
		return err
	}
	sf.tmp = ""
	return nil
}

// discard removes the temporary file unless it was committed.
func (sf *stagedFile) discard() {
	if sf.tmp != "" {
		os.Remove(sf.tmp)
		sf.tmp = ""
	}
}

// followSymlinks resolves a final-component symlink chain at p, because an
// upload to a symlink writes the file it points to, as the reference's
// open(O_TRUNC) does, instead of replacing the link. A dangling link
// resolves to the missing file it names.
func followSymlinks(p string) (string, error) {
	for range 40 { // the kernel's own limit on links in a lookup
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return p, nil // a missing path is simply created; other errors surface later
		}
		link, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(p), link)
		}
		p = filepath.Clean(link)
	}
	return "", fmt.Errorf("path %q: %w", p, syscall.ELOOP)
}

// uploadTempMarker is part of every upload's temporary file name.
const uploadTempMarker = ".hutch-upload-"

// IsUploadTemp reports whether a file name (no directory) is one of the
// temporary files uploads are written to before they are renamed into
// place; the filesystem watcher hides them.
func IsUploadTemp(name string) bool {
	i := strings.LastIndex(name, uploadTempMarker)
	if !strings.HasPrefix(name, ".") || i < 1 {
		return false
	}
	suffix := name[i+len(uploadTempMarker):]
	_, err := hex.DecodeString(suffix)
	return len(suffix) == 16 && err == nil
}

// createTemp creates ".<name>.hutch-upload-<random>" exclusively in dir. It
// lives in the target's directory so the final rename stays within one
// filesystem, and starts with a dot so directory listings hide it.
func createTemp(dir, name string) (*os.File, string, error) {
	if len(name) > 200 {
		name = name[:200] // keep the temporary name within NAME_MAX (255)
	}
	for range 10 {
		var rnd [8]byte
		_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails on Linux
		tmp := filepath.Join(dir, "."+name+uploadTempMarker+hex.EncodeToString(rnd[:]))
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, tmp, err
	}
	return nil, "", fmt.Errorf("no free temporary name in %q: %w", dir, fs.ErrExist)
}

// setMetadata stores meta as user.e2b.<key> xattrs, in sorted order so that
// a failure is reproducible.
func setMetadata(f *os.File, meta map[string]string) error {
	if len(meta) == 0 {
		return nil
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var setErr error
	if err := rc.Control(func(fd uintptr) {
		for _, k := range keys {
			if setErr = unix.Fsetxattr(int(fd), xattrPrefix+k, []byte(meta[k]), 0); setErr != nil {
				setErr = &fs.PathError{Op: "setxattr", Path: xattrPrefix + k, Err: setErr}
				return
			}
		}
	}); err != nil {
		return err
	}
	return setErr
}

// fileWriter remembers a write error, so that a failed copy can be blamed on
// the disk (500, 507) or on the request (400, 413) correctly.
type fileWriter struct {
	f   *os.File
	err error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// readError classifies a failure to read the request: too large stays 413,
// anything else (bad gzip, broken multipart, client gone) is the client's
// problem, 400.
func readError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return fmt.Errorf("request body is larger than %d bytes: %w", tooBig.Limit, err)
	}
	return fmt.Errorf("reading request body: %v: %w", err, errdefs.ErrInvalidArgument)
}

// limitReader fails with *http.MaxBytesError once more than limit bytes were
// read, so an oversized decoded body maps to 413 like an oversized raw one.
type limitReader struct {
	r     io.Reader
	left  int64
	limit int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, &http.MaxBytesError{Limit: l.limit}
	}
	// Read at most one byte past the limit, enough to detect it.
	if most := l.left + 1; most > 0 && int64(len(p)) > most {
		p = p[:most]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return n + int(l.left), &http.MaxBytesError{Limit: l.limit}
	}
	return n, err
}
