package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// Files reads, writes and watches a sandbox's files. Relative paths are
// relative to the user's home directory.
type Files struct {
	envd *envdClient
}

// FileType is the kind of a file system entry.
type FileType string

// File types.
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
)

// EntryInfo describes a file, directory or symlink. For a symlink, Type,
// Size and Mode describe its target and SymlinkTarget is set.
type EntryInfo struct {
	Name string   `json:"name"`
	Path string   `json:"path"`
	Type FileType `json:"type"`
	Size int64    `json:"size"`
	// Mode holds the permission bits (0o644).
	Mode os.FileMode `json:"mode"`
	// Permissions is Mode as `ls -l` shows it, e.g. "-rw-r--r--".
	Permissions   string            `json:"permissions"`
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	ModifiedTime  time.Time         `json:"modifiedTime"`
	SymlinkTarget string            `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

func entryOf(e *filesystem.EntryInfo) *EntryInfo {
	if e == nil {
		return nil
	}
	out := &EntryInfo{
		Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(), Mode: os.FileMode(e.GetMode()),
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(), Metadata: e.GetMetadata(),
	}
	if t := e.GetModifiedTime(); t != nil {
		out.ModifiedTime = t.AsTime()
	}
	switch e.GetType() {
	case filesystem.FileType_FILE_TYPE_FILE:
		out.Type = FileTypeFile
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		out.Type = FileTypeDir
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		out.Type = FileTypeSymlink
	}
	return out
}

// FileOptions select the sandbox user a file operation acts as; nil means
// the sandbox's default user.
type FileOptions struct {
	User string
}

func userOf(o *FileOptions) string {
	if o == nil {
		return ""
	}
	return o.User
}

// filesQuery is the query of a /files request.
func filesQuery(path, user string) string {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	if user != "" {
		q.Set("username", user)
	}
	return q.Encode()
}

// Read returns the content of the file at path.
func (f *Files) Read(ctx context.Context, path string, opts *FileOptions) ([]byte, error) {
	ctx, cancel := f.envd.c.requestContext(ctx)
	defer cancel()
	rc, err := f.ReadStream(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, transportError("read "+path, err)
	}
	return b, nil
}

// ReadStream opens the file at path for reading; close it when done. Only
// ctx bounds the transfer (no request timeout applies).
func (f *Files) ReadStream(ctx context.Context, path string, opts *FileOptions) (io.ReadCloser, error) {
	op := "read " + path
	req, err := f.envd.newRequest(ctx, http.MethodGet, "/files", filesQuery(path, userOf(opts)), nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.envd.do(op, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, httpError(op, resp)
	}
	return resp.Body, nil
}

// ReadRange opens length bytes of the file at path, from byte offset on
// (length < 0: to its end), with an HTTP Range request: the rest of the
// file is neither read nor sent. A range of an empty file, or one that
// starts at or past the end, fails with ErrInvalidArgument (the server's
// 416); one that runs past the end is cut there. Close it when done; only
// ctx bounds the transfer. Hutch's addition: E2B's SDKs read whole files.
func (f *Files) ReadRange(ctx context.Context, path string, offset, length int64, opts *FileOptions) (io.ReadCloser, error) {
	op := "read " + path
	if offset < 0 || length == 0 {
		return nil, &Error{Op: op, Kind: ErrInvalidArgument, Message: fmt.Sprintf("no bytes in a range of %d from %d", length, offset)}
	}
	req, err := f.envd.newRequest(ctx, http.MethodGet, "/files", filesQuery(path, userOf(opts)), nil)
	if err != nil {
		return nil, err
	}
	rng := fmt.Sprintf("bytes=%d-", offset)
	if length > 0 {
		rng += fmt.Sprint(offset + length - 1)
	}
	req.Header.Set("Range", rng)
	resp, err := f.envd.do(op, req)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusPartialContent:
		return resp.Body, nil
	case http.StatusOK:
		// A server that ignores Range sends it all: skip to the range.
		if _, err := io.CopyN(io.Discard, resp.Body, offset); err != nil {
			resp.Body.Close()
			return nil, &Error{Op: op, Kind: ErrInvalidArgument, Message: fmt.Sprintf("the file ends before byte %d", offset)}
		}
		if length < 0 {
			return resp.Body, nil
		}
		return struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, length), resp.Body}, nil
	case http.StatusRequestedRangeNotSatisfiable:
		defer resp.Body.Close()
		e := httpError(op, resp)
		e.Kind, e.Message = ErrInvalidArgument, fmt.Sprintf("range %s is not in the file (%s)", rng, e.Message)
		return nil, e
	}
	defer resp.Body.Close()
	return nil, httpError(op, resp)
}

// WriteOptions configure a write.
type WriteOptions struct {
	// User owns the file (and any directories made for it).
	User string
	// Metadata is stored with the file, replacing what it had; keys are
	// lower-cased.
	Metadata map[string]string
}

// WriteInfo describes a written file.
type WriteInfo struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     FileType          `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// WriteEntry is one file of [Files.WriteMany].
type WriteEntry struct {
	Path string
	Data []byte
}

// Write writes data to the file at path, creating it and its parent
// directories, or replacing its content.
func (f *Files) Write(ctx context.Context, path string, data []byte, opts *WriteOptions) (*WriteInfo, error) {
	infos, err := f.writeMultipart(ctx, "write "+path, path, []WriteEntry{{Path: path, Data: data}}, opts)
	if err != nil {
		return nil, err
	}
	return &infos[0], nil
}

// WriteMany writes several files in one request.
func (f *Files) WriteMany(ctx context.Context, entries []WriteEntry, opts *WriteOptions) ([]WriteInfo, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	return f.writeMultipart(ctx, fmt.Sprintf("write %d files", len(entries)), "", entries, opts)
}

func (f *Files) writeMultipart(ctx context.Context, op, path string, entries []WriteEntry, opts *WriteOptions) ([]WriteInfo, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for _, e := range entries {
		h := textproto.MIMEHeader{}
		// The filename is the full target path (spec §3.7), which
		// CreateFormFile would reduce to its base name.
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, e.Path))
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			return nil, &Error{Op: op, Err: err}
		}
		w.Write(e.Data)
	}
	mw.Close()
	return f.upload(ctx, op, path, mw.FormDataContentType(), &body, opts, true)
}

// WriteStream writes everything r yields to the file at path, streaming
// it: large files never sit in memory. Only ctx bounds the transfer.
func (f *Files) WriteStream(ctx context.Context, path string, r io.Reader, opts *WriteOptions) (*WriteInfo, error) {
	infos, err := f.upload(ctx, "write "+path, path, "application/octet-stream", r, opts, false)
	if err != nil {
		return nil, err
	}
	return &infos[0], nil
}

func (f *Files) upload(ctx context.Context, op, path, contentType string, body io.Reader, opts *WriteOptions, bounded bool) ([]WriteInfo, error) {
	if opts == nil {
		opts = &WriteOptions{}
	}
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = f.envd.c.requestContext(ctx)
		defer cancel()
	}
	req, err := f.envd.newRequest(ctx, http.MethodPost, "/files", filesQuery(path, opts.User), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range opts.Metadata {
		req.Header.Set("X-Metadata-"+k, v)
	}
	resp, err := f.envd.do(op, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, httpError(op, resp)
	}
	var infos []WriteInfo
	if err := json.NewDecoder(resp.Body).Decode(&infos); err != nil || len(infos) == 0 {
		return nil, &Error{Op: op, Message: "malformed response from the sandbox", Err: err}
	}
	return infos, nil
}

// ListDirOptions configure [Files.List].
type ListDirOptions struct {
	// Depth lists this many levels below the directory; 0 means 1.
	Depth int
	// User lists as this sandbox user.
	User string
}

// List returns the entries of the directory at path.
func (f *Files) List(ctx context.Context, path string, opts *ListDirOptions) ([]EntryInfo, error) {
	if opts == nil {
		opts = &ListDirOptions{}
	}
	depth := max(opts.Depth, 1)
	res, err := unary(ctx, f.envd, "list "+path, f.envd.fs.ListDir, &filesystem.ListDirRequest{Path: path, Depth: uint32(depth)}, opts.User)
	if err != nil {
		return nil, err
	}
	out := make([]EntryInfo, 0, len(res.GetEntries()))
	for _, e := range res.GetEntries() {
		if info := entryOf(e); info.Type != "" {
			out = append(out, *info)
		}
	}
	return out, nil
}

// GetInfo describes the entry at path; ErrNotFound if there is none.
func (f *Files) GetInfo(ctx context.Context, path string, opts *FileOptions) (*EntryInfo, error) {
	res, err := unary(ctx, f.envd, "stat "+path, f.envd.fs.Stat, &filesystem.StatRequest{Path: path}, userOf(opts))
	if err != nil {
		return nil, err
	}
	return entryOf(res.GetEntry()), nil
}

// Exists reports whether something exists at path.
func (f *Files) Exists(ctx context.Context, path string, opts *FileOptions) (bool, error) {
	_, err := f.GetInfo(ctx, path, opts)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Remove removes the file or directory tree at path; removing nothing is
// not an error.
func (f *Files) Remove(ctx context.Context, path string, opts *FileOptions) error {
	_, err := unary(ctx, f.envd, "remove "+path, f.envd.fs.Remove, &filesystem.RemoveRequest{Path: path}, userOf(opts))
	return err
}

// Rename moves oldPath to newPath, creating newPath's parent directories.
func (f *Files) Rename(ctx context.Context, oldPath, newPath string, opts *FileOptions) (*EntryInfo, error) {
	res, err := unary(ctx, f.envd, "rename "+oldPath, f.envd.fs.Move, &filesystem.MoveRequest{Source: oldPath, Destination: newPath}, userOf(opts))
	if err != nil {
		return nil, err
	}
	return entryOf(res.GetEntry()), nil
}

// MakeDir creates the directory at path and its parents. It returns false,
// and no error, when the directory exists already.
func (f *Files) MakeDir(ctx context.Context, path string, opts *FileOptions) (bool, error) {
	_, err := unary(ctx, f.envd, "make directory "+path, f.envd.fs.MakeDir, &filesystem.MakeDirRequest{Path: path}, userOf(opts))
	if errors.Is(err, ErrAlreadyExists) {
		return false, nil
	}
	return err == nil, err
}

// URLOptions configure a signed file URL.
type URLOptions struct {
	// User is the sandbox user the transfer acts as; empty means the
	// default user.
	User string
	// Expires limits the URL's validity to this long from now; 0 means it
	// does not expire.
	Expires time.Duration
}

// DownloadURL returns a URL from which anyone can GET the file at path,
// signed with the sandbox's access token. No request is made.
func (s *Sandbox) DownloadURL(path string, opts *URLOptions) (string, error) {
	return s.fileURL(path, "read", opts)
}

// UploadURL returns a URL to which anyone can POST a file for path
// (multipart, field "file"), signed with the sandbox's access token.
func (s *Sandbox) UploadURL(path string, opts *URLOptions) (string, error) {
	return s.fileURL(path, "write", opts)
}

func (s *Sandbox) fileURL(path, op string, opts *URLOptions) (string, error) {
	if opts == nil {
		opts = &URLOptions{}
	}
	q := url.Values{}
	if opts.User != "" {
		q.Set("username", opts.User)
	}
	if path != "" {
		q.Set("path", path)
	}
	if s.EnvdAccessToken != "" {
		var exp int64
		if opts.Expires > 0 {
			exp = time.Now().Add(opts.Expires).Unix()
			q.Set("signature_expiration", fmt.Sprint(exp))
		}
		q.Set("signature", envdapi.Sign(path, op, opts.User, s.EnvdAccessToken, exp))
	} else if opts.Expires > 0 {
		return "", &Error{Op: "sign URL", Kind: ErrInvalidArgument, Message: "the sandbox has no access token to sign an expiring URL with"}
	}
	base := s.envd.base
	// The URL names /files at the root of the host, whatever path the
	// base has (as E2B's SDKs build it).
	if u, err := url.Parse(base); err == nil {
		u.Path, u.RawQuery = "/files", q.Encode()
		return u.String(), nil
	}
	return strings.TrimRight(base, "/") + "/files?" + q.Encode(), nil
}
