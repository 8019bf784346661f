package osbexecd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
)

// maxUploadFiles bounds the files of one upload.
const maxUploadFiles = 1000

// maxPendingMetadata bounds the metadata parts of one upload held while
// they wait for their file parts (execd pairs the n-th metadata part with
// the n-th file part, so a client may send them all first): their paths,
// owners and groups together.
const maxPendingMetadata = 1 << 20

// fileMetadata is execd's FileMetadata, the JSON part before each file.
type fileMetadata struct {
	Path  string `json:"path"`
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

// errEnvdAnswered stops the copy into envd's request once envd has
// answered it.
var errEnvdAnswered = errors.New("envd answered before the upload was sent")

// upload is POST /files/upload: multipart parts "metadata" (JSON
// {path, owner, group, mode}) each followed by its "file" part, any
// number of pairs. The parts are streamed on into one multipart upload to
// envd's /files, which writes every file beside its target and renames
// them into place only once the whole body has arrived, so a bad part, a
// body too large or a client gone midway leaves every target as it was
// (directories the upload needed may have been made). Then the owner and
// mode of each file are set as its metadata says.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, c *call) {
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/form-data" || params["boundary"] == "" {
		fail(w, &apiError{http.StatusBadRequest, codeInvalidFile, "the body must be multipart/form-data with a boundary"})
		return
	}
	in := multipart.NewReader(http.MaxBytesReader(w, r.Body, h.opts.MaxUploadBytes), params["boundary"])

	pr, pw := io.Pipe()
	out := multipart.NewWriter(pw)
	type answer struct {
		resp *http.Response
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		hdr := http.Header{"Content-Type": {out.FormDataContentType()}}
		resp, err := h.client(c, "").files(r.Context(), http.MethodPost, "", hdr, pr)
		pr.CloseWithError(errEnvdAnswered)
		answered <- answer{resp, err}
	}()

	ops, err := transcodeUpload(in, out, h.namesChecker(r.Context(), c))
	if err == nil {
		err = out.Close()
	}
	if err != nil && !errors.Is(err, errEnvdAnswered) {
		pw.CloseWithError(err)
		if a := <-answered; a.resp != nil {
			a.resp.Body.Close()
		}
		fail(w, err)
		return
	}
	pw.Close()
	a := <-answered
	if a.err != nil {
		fail(w, a.err)
		return
	}
	if a.resp.StatusCode != http.StatusOK {
		fail(w, filesError("upload", a.resp))
		return
	}
	var written []struct {
		Path string `json:"path"`
	}
	err = json.NewDecoder(io.LimitReader(a.resp.Body, 16<<20)).Decode(&written)
	a.resp.Body.Close()
	if err != nil || len(written) != len(ops) {
		fail(w, fmt.Errorf("upload: envd's answer does not list the %d files written (%v)", len(ops), err))
		return
	}
	// envd's paths are resolved (absolute, ~ expanded): the helper that
	// sets owners and modes gets those.
	for i := range ops {
		ops[i].path = written[i].Path
	}
	if err := h.applyPerms(r.Context(), c, ops); err != nil {
		fail(w, fmt.Errorf("the files were written, but setting their owner or mode failed: %w", err))
		return
	}
	okEmpty(w)
}

// transcodeUpload copies execd's upload parts from in to envd's form in
// out (a "file" part per file, named by its target path), checking each
// metadata part, and returns the owner and mode to set on each file in
// order; checkNames refuses owners the sandbox lacks. Errors reading in
// are the client's (400, or 413 past the bound);
// errEnvdAnswered means envd stopped reading.
func transcodeUpload(in *multipart.Reader, out *multipart.Writer, checkNames func(owner, group string) error) ([]permOp, error) {
	var pending []fileMetadata
	pendingBytes := 0
	var ops []permOp
	seen := map[string]bool{}
	for {
		part, err := in.NextPart()
		if err == io.EOF { //nolint:errorlint // only a bare EOF is the closing boundary
			break
		}
		if err != nil {
			return nil, clientBodyError(err)
		}
		switch formName(part) {
		case "metadata":
			b, err := io.ReadAll(io.LimitReader(part, 64<<10+1))
			if err != nil {
				return nil, clientBodyError(err)
			}
			if len(b) > 64<<10 {
				return nil, &apiError{http.StatusBadRequest, codeInvalidMetadata, "a metadata part is larger than 64 KiB"}
			}
			var meta fileMetadata
			if err := json.Unmarshal(b, &meta); err != nil {
				return nil, &apiError{http.StatusBadRequest, codeInvalidMetadata, fmt.Sprintf("invalid metadata format: %v", err)}
			}
			if meta.Path == "" {
				return nil, &apiError{http.StatusBadRequest, codeInvalidMetadata, "metadata path is empty"}
			}
			if err := checkPath(meta.Path); err != nil {
				return nil, err
			}
			if strings.ContainsAny(meta.Path, "\r\n") {
				return nil, &apiError{http.StatusBadRequest, codeInvalidMetadata, fmt.Sprintf("path %q contains a line break, which uploads do not support", meta.Path)}
			}
			if _, err := checkPermission(meta.Path, permission{Owner: meta.Owner, Group: meta.Group, Mode: meta.Mode}); err != nil {
				return nil, err
			}
			if err := checkNames(meta.Owner, meta.Group); err != nil {
				return nil, err
			}
			// Refused as soon as it is over the bounds, before the rest
			// of the body is read.
			if len(ops)+len(pending) >= maxUploadFiles {
				return nil, &apiError{http.StatusBadRequest, codeInvalidMetadata, fmt.Sprintf("at most %d files may be uploaded at once; this metadata part is one more", maxUploadFiles)}
			}
			if pendingBytes += len(meta.Path) + len(meta.Owner) + len(meta.Group); pendingBytes > maxPendingMetadata {
				return nil, &apiError{http.StatusBadRequest, codeInvalidMetadata, fmt.Sprintf("the metadata parts waiting for their file parts are over %d KiB; send each file part after its metadata part", maxPendingMetadata>>10)}
			}
			pending = append(pending, meta)
		case "file":
			if len(pending) == 0 {
				return nil, &apiError{http.StatusBadRequest, codeInvalidMetadata, "a file part comes without a metadata part before it"}
			}
			meta := pending[0]
			pending = pending[1:]
			pendingBytes -= len(meta.Path) + len(meta.Owner) + len(meta.Group)
			if seen[meta.Path] {
				return nil, &apiError{http.StatusBadRequest, codeInvalidFile, fmt.Sprintf("path %q is uploaded twice", meta.Path)}
			}
			seen[meta.Path] = true
			if len(seen) > maxUploadFiles {
				return nil, &apiError{http.StatusBadRequest, codeInvalidFile, fmt.Sprintf("at most %d files may be uploaded at once", maxUploadFiles)}
			}
			op, _ := checkPermission(meta.Path, permission{Owner: meta.Owner, Group: meta.Group, Mode: meta.Mode}) // checked above
			ops = append(ops, op)
			ph := textproto.MIMEHeader{}
			ph.Set("Content-Disposition", mime.FormatMediaType("form-data", map[string]string{"name": "file", "filename": meta.Path}))
			ph.Set("Content-Type", "application/octet-stream")
			dst, err := out.CreatePart(ph)
			if err != nil {
				return nil, err
			}
			if err := copyPart(dst, part); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case len(pending) > 0:
		return nil, &apiError{http.StatusBadRequest, codeInvalidContent, fmt.Sprintf("metadata for %q has no file part after it", pending[0].Path)}
	case len(ops) == 0:
		return nil, &apiError{http.StatusBadRequest, codeInvalidFile, "the body has no metadata and file parts"}
	}
	return ops, nil
}

// copyPart copies a file part to envd, telling the client's read errors
// from envd's write errors.
func copyPart(dst io.Writer, src io.Reader) error {
	buf := make([]byte, 256<<10)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF { //nolint:errorlint // Read's own end
			return nil
		}
		if rerr != nil {
			return clientBodyError(rerr)
		}
	}
}

// clientBodyError is the answer for a failed read of the client's body.
func clientBodyError(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	return &apiError{http.StatusBadRequest, codeInvalidFile, fmt.Sprintf("reading the multipart body: %v", err)}
}

// formName is the part's form field name. Clients escape a filename in
// Content-Disposition in ways Go's parser may refuse (httpx writes a raw
// backslash); the name is then read from the header directly, since the
// filename is not used.
func formName(part *multipart.Part) string {
	if n := part.FormName(); n != "" {
		return n
	}
	cd := part.Header.Get("Content-Disposition")
	for _, param := range strings.Split(cd, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(param), "=")
		if ok && strings.EqualFold(k, "name") {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
