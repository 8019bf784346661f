package osbexecd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// download is GET /files/download?path=: the file's bytes, one byte range
// of them with a Range header (206, or 416 when it starts past the end),
// or with offset and limit the lines offset..offset+limit-1 as text/plain.
// envd reads the file inside the sandbox and serves the range.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	path := q.Get("path")
	if path == "" {
		fail(w, missingQuery("path"))
		return
	}
	if err := checkPath(path); err != nil {
		fail(w, err)
		return
	}
	rangeHeader := r.Header.Get("Range")
	offsetStr, limitStr := q.Get("offset"), q.Get("limit")
	if offsetStr != "" || limitStr != "" {
		if offsetStr == "" || limitStr == "" {
			fail(w, badRequest("both offset and limit must be provided together for line-based reading"))
			return
		}
		if rangeHeader != "" {
			fail(w, badRequest("offset/limit and the Range header are mutually exclusive"))
			return
		}
		offset, err := strconv.Atoi(offsetStr)
		if err != nil || offset < 1 {
			fail(w, badRequest("offset must be a positive integer (1-based)"))
			return
		}
		limit, err := strconv.Atoi(limitStr)
		if err != nil || limit < 1 {
			fail(w, badRequest("limit must be a positive integer"))
			return
		}
		h.downloadLines(w, r, c, path, offset, limit)
		return
	}
	header := http.Header{}
	if rangeHeader != "" {
		first, err := firstRange(rangeHeader)
		if err != nil {
			fail(w, err)
			return
		}
		header.Set("Range", first)
	}
	resp, err := h.client(c, "").files(r.Context(), http.MethodGet, path, header, nil)
	if err != nil {
		fail(w, err)
		return
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusPartialContent:
	case http.StatusRequestedRangeNotSatisfiable:
		resp.Body.Close()
		cr := resp.Header.Get("Content-Range")
		writeError(w, http.StatusRequestedRangeNotSatisfiable, codeRangeInvalid,
			fmt.Sprintf("range %q is not satisfiable for %s (%s)", rangeHeader, path, cr))
		return
	default:
		fail(w, filesError("download "+path, resp))
		return
	}
	defer resp.Body.Close()
	out := w.Header()
	for _, k := range []string{"Content-Type", "Content-Length", "Content-Range", "Last-Modified", "Accept-Ranges"} {
		if v := resp.Header.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	// execd offers the file as an attachment; envd's name is the same.
	if cd := resp.Header.Get("Content-Disposition"); cd != "" {
		out.Set("Content-Disposition", "attachment"+strings.TrimPrefix(cd, "inline"))
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		// The status is out; only a broken transfer tells the client.
		panic(http.ErrAbortHandler)
	}
}

// firstRange checks a Range header and returns the first range of it as a
// header of its own: execd serves the first range of a multi-range
// request. A header that is not "bytes=" ranges is a 400.
func firstRange(h string) (string, error) {
	spec, ok := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !ok {
		return "", badRequest("invalid Range header %q: only bytes=<start>-<end> ranges are supported", h)
	}
	var first string
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		start, end, ok := strings.Cut(part, "-")
		start, end = strings.TrimSpace(start), strings.TrimSpace(end)
		valid := ok && (start != "" || end != "")
		var s, e int64
		var err error
		if valid && start != "" {
			s, err = strconv.ParseInt(start, 10, 64)
			valid = err == nil && s >= 0
		}
		if valid && end != "" {
			e, err = strconv.ParseInt(end, 10, 64)
			valid = err == nil && e >= 0 && (start == "" || e >= s)
		}
		if !valid {
			return "", badRequest("invalid Range header %q: %q is not a byte range", h, part)
		}
		if first == "" {
			first = "bytes=" + start + "-" + end
		}
	}
	if first == "" {
		return "", badRequest("invalid Range header %q: no range", h)
	}
	return first, nil
}

// downloadLines answers lines offset..offset+limit-1 (1-based) of path as
// text/plain; a line is kept with its newline, the last one without if
// the file ends without.
func (h *Handler) downloadLines(w http.ResponseWriter, r *http.Request, c *call, path string, offset, limit int) {
	resp, err := h.client(c, "").files(r.Context(), http.MethodGet, path, nil, nil)
	if err != nil {
		fail(w, err)
		return
	}
	if resp.StatusCode != http.StatusOK {
		fail(w, filesError("download "+path, resp))
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for line, written := 1, 0; written < limit; line++ {
		// ReadSlice keeps memory bounded whatever a line's length: a long
		// line comes in pieces, written or skipped as they come.
		for {
			chunk, err := br.ReadSlice('\n')
			if line >= offset && len(chunk) > 0 {
				if _, werr := w.Write(chunk); werr != nil {
					return
				}
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					panic(http.ErrAbortHandler)
				}
				return
			}
			break
		}
		if line >= offset {
			written++
		}
	}
}
