package files

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
)

// absent in wantFiles means the file must not exist.
const absent = "\x00absent"

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	io.WriteString(zw, s)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestUpload(t *testing.T) {
	e := newEnv(t, "", Options{})
	writeFile(t, e.path("existing.txt"), "old")
	if err := os.MkdirAll(e.path("adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	gz := gzipped(t, "unzipped content")
	octet := http.Header{"Content-Type": {"application/octet-stream"}}

	type request struct {
		query  url.Values
		header http.Header
		body   []byte
	}
	mp := func(parts ...part) request {
		ct, body := multipartBody(t, parts...)
		return request{header: http.Header{"Content-Type": {ct}}, body: body.Bytes()}
	}
	withQuery := func(r request, q url.Values) request { r.query = q; return r }

	tests := []struct {
		name       string
		req        request
		wantStatus int
		wantReply  []entryInfo
		wantFiles  map[string]string // relative to root; content, or absent
	}{
		{
			name:       "multipart single with path param",
			req:        withQuery(mp(part{"file", "ignored.txt", "one"}), url.Values{"path": {e.path("p/one.txt")}}),
			wantStatus: 200,
			wantReply:  []entryInfo{{Path: e.path("p/one.txt"), Name: "one.txt", Type: "file"}},
			wantFiles:  map[string]string{"p/one.txt": "one", "ignored.txt": absent},
		},
		{
			name: "multipart several with full paths",
			req: mp(part{"file", e.path("m/a/1.txt"), "first"}, part{"other", "x", "skipped"},
				part{"file", e.path("m/b/2.txt"), "second"}),
			wantStatus: 200,
			wantReply: []entryInfo{
				{Path: e.path("m/a/1.txt"), Name: "1.txt", Type: "file"},
				{Path: e.path("m/b/2.txt"), Name: "2.txt", Type: "file"},
			},
			wantFiles: map[string]string{"m/a/1.txt": "first", "m/b/2.txt": "second", "x": absent},
		},
		{
			name:       "multipart relative filename resolves against workdir",
			req:        mp(part{"file", "rel/dir/r.txt", "relative"}),
			wantStatus: 200,
			wantReply:  []entryInfo{{Path: e.path("rel/dir/r.txt"), Name: "r.txt", Type: "file"}},
			wantFiles:  map[string]string{"rel/dir/r.txt": "relative"},
		},
		{
			name:       "multipart overwrites",
			req:        mp(part{"file", e.path("existing.txt"), "new"}),
			wantStatus: 200,
			wantReply:  []entryInfo{{Path: e.path("existing.txt"), Name: "existing.txt", Type: "file"}},
			wantFiles:  map[string]string{"existing.txt": "new"},
		},
		{
			name:       "multipart duplicate targets",
			req:        mp(part{"file", e.path("dup/d.txt"), "1"}, part{"file", e.path("dup/../dup/d.txt"), "2"}),
			wantStatus: 400,
			wantFiles:  map[string]string{"dup/d.txt": absent},
		},
		{
			name:       "multipart two files onto one path param",
			req:        withQuery(mp(part{"file", "a", "1"}, part{"file", "b", "2"}), url.Values{"path": {e.path("dup2.txt")}}),
			wantStatus: 400,
			wantFiles:  map[string]string{"dup2.txt": absent},
		},
		{
			name:       "multipart without file parts",
			req:        mp(part{"other", "x.txt", "1"}),
			wantStatus: 400,
		},
		{
			name:       "multipart part without filename",
			req:        mp(part{"file", "", "1"}),
			wantStatus: 400,
		},
		{
			name:       "multipart without boundary",
			req:        request{header: http.Header{"Content-Type": {"multipart/form-data"}}, body: []byte("x")},
			wantStatus: 400,
		},
		{
			name:       "multipart onto a directory",
			req:        mp(part{"file", e.path("adir"), "1"}),
			wantStatus: 400,
		},
		{
			name:       "multipart under a file",
			req:        mp(part{"file", e.path("existing.txt/sub"), "1"}),
			wantStatus: 400,
		},
		{
			name:       "octet-stream",
			req:        request{query: url.Values{"path": {e.path("o/raw.bin")}}, header: octet, body: []byte("raw\x00bytes")},
			wantStatus: 200,
			wantReply:  []entryInfo{{Path: e.path("o/raw.bin"), Name: "raw.bin", Type: "file"}},
			wantFiles:  map[string]string{"o/raw.bin": "raw\x00bytes"},
		},
		{
			name:       "octet-stream empty",
			req:        request{query: url.Values{"path": {e.path("o/empty")}}, header: octet},
			wantStatus: 200,
			wantReply:  []entryInfo{{Path: e.path("o/empty"), Name: "empty", Type: "file"}},
			wantFiles:  map[string]string{"o/empty": ""},
		},
		{
			name: "octet-stream gzip",
			req: request{query: url.Values{"path": {e.path("o/unzipped.txt")}},
				header: http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}, body: gz},
			wantStatus: 200,
			wantReply:  []entryInfo{{Path: e.path("o/unzipped.txt"), Name: "unzipped.txt", Type: "file"}},
			wantFiles:  map[string]string{"o/unzipped.txt": "unzipped content"},
		},
		{
			name: "octet-stream corrupt gzip",
			req: request{query: url.Values{"path": {e.path("o/corrupt")}},
				header: http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}, body: []byte("not gzip at all")},
			wantStatus: 400,
			wantFiles:  map[string]string{"o/corrupt": absent},
		},
		{
			name: "octet-stream truncated gzip",
			req: request{query: url.Values{"path": {e.path("o/truncated")}},
				header: http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}, body: gz[:len(gz)-6]},
			wantStatus: 400,
			wantFiles:  map[string]string{"o/truncated": absent},
		},
		{
			name: "unsupported content encoding",
			req: request{query: url.Values{"path": {e.path("o/br")}},
				header: http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"br"}}, body: []byte("x")},
			wantStatus: 400,
		},
		{
			name:       "octet-stream without path",
			req:        request{header: octet, body: []byte("x")},
			wantStatus: 400,
		},
		{
			name:       "unknown content type",
			req:        request{query: url.Values{"path": {e.path("t.txt")}}, header: http.Header{"Content-Type": {"text/plain"}}, body: []byte("x")},
			wantStatus: 400,
			wantFiles:  map[string]string{"t.txt": absent},
		},
		{
			name:       "no content type",
			req:        request{query: url.Values{"path": {e.path("t.txt")}}, body: []byte("x")},
			wantStatus: 400,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.request(t, http.MethodPost, tc.req.query, tc.req.header, bytes.NewReader(tc.req.body))
			if tc.wantStatus != 200 {
				checkError(t, resp, body, tc.wantStatus)
			} else {
				if resp.StatusCode != 200 {
					t.Fatalf("status = %d; body %s", resp.StatusCode, body)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q, want application/json", ct)
				}
				var got []entryInfo
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatalf("reply %s: %v", body, err)
				}
				if diff := cmp.Diff(tc.wantReply, got); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
			}
			for rel, want := range tc.wantFiles {
				b, err := os.ReadFile(e.path(rel))
				switch {
				case want == absent:
					if err == nil {
						t.Errorf("%s exists with %q, want no file", rel, b)
					}
				case err != nil:
					t.Errorf("%s: %v", rel, err)
				case string(b) != want:
					t.Errorf("%s = %q, want %q", rel, b, want)
				}
			}
			if left := tempFiles(t, e.root); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// Uploads as another user create the file and every missing parent owned by
// that user; an overwrite keeps the file's mode.
func TestUploadOwnership(t *testing.T) {
	e := newEnv(t, "", Options{})
	ct, body := multipartBody(t,
		part{"file", e.path("own/a/1.txt"), "1"},
		part{"file", e.path("own/b/2.txt"), "2"})
	resp, reply := e.request(t, http.MethodPost, url.Values{"username": {"nobody"}}, http.Header{"Content-Type": {ct}}, body)
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d; body %s", resp.StatusCode, reply)
	}
	for _, rel := range []string{"own", "own/a", "own/b", "own/a/1.txt", "own/b/2.txt"} {
		var st syscall.Stat_t
		if err := syscall.Stat(e.path(rel), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s owned by %d:%d, want nobody (65534:65534)", rel, st.Uid, st.Gid)
		}
	}
	fi, err := os.Stat(e.path("own/a/1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("new file mode = %v, want 0644", fi.Mode().Perm())
	}

	// Overwriting an executable keeps it executable.
	writeFile(t, e.path("run.sh"), "old")
	if err := os.Chmod(e.path("run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	resp, reply = e.request(t, http.MethodPost, url.Values{"path": {"run.sh"}},
		http.Header{"Content-Type": {"application/octet-stream"}}, strings.NewReader("#!/bin/sh\n"))
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d; body %s", resp.StatusCode, reply)
	}
	if fi, err := os.Stat(e.path("run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("overwritten file mode = %v (%v), want 0755", fi.Mode().Perm(), err)
	}
}

// An upload to a symlink writes the file it points to and keeps the link.
func TestUploadThroughSymlink(t *testing.T) {
	e := newEnv(t, "", Options{})
	writeFile(t, e.path("real/target.txt"), "old")
	if err := os.Symlink("real/target.txt", e.path("link")); err != nil {
		t.Fatal(err)
	}
	resp, body := e.request(t, http.MethodPost, url.Values{"path": {e.path("link")}},
		http.Header{"Content-Type": {"application/octet-stream"}}, strings.NewReader("new"))
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d; body %s", resp.StatusCode, body)
	}
	if got := readFile(t, e.path("real/target.txt")); got != "new" {
		t.Errorf("target = %q, want new", got)
	}
	if fi, err := os.Lstat(e.path("link")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link was replaced: %v %v", fi.Mode(), err)
	}
}

func getXattrs(t *testing.T, path string) map[string]string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Listxattr(path, buf)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Getxattr(path, name, v)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = string(v[:m])
	}
	return got
}

func TestUploadMetadata(t *testing.T) {
	e := newEnv(t, "", Options{})
	octet := func(extra map[string]string) http.Header {
		h := http.Header{"Content-Type": {"application/octet-stream"}}
		for k, v := range extra {
			h.Set(k, v)
		}
		return h
	}
	long := strings.Repeat("k", maxMetadataKey)

	tests := []struct {
		name       string
		header     http.Header
		wantStatus int
		wantXattrs map[string]string
		wantMeta   map[string]string
	}{
		{
			name:       "stored lower-cased",
			header:     octet(map[string]string{"X-Metadata-Owner": "Team A", "X-METADATA-Build-Id": "42"}),
			wantStatus: 200,
			wantXattrs: map[string]string{"user.e2b.owner": "Team A", "user.e2b.build-id": "42"},
			wantMeta:   map[string]string{"owner": "Team A", "build-id": "42"},
		},
		{
			name:       "replaced",
			header:     octet(map[string]string{"X-Metadata-Other": "x"}),
			wantStatus: 200,
			wantXattrs: map[string]string{"user.e2b.other": "x"},
			wantMeta:   map[string]string{"other": "x"},
		},
		{
			name:       "longest key",
			header:     octet(map[string]string{"X-Metadata-" + long: "v"}),
			wantStatus: 200,
			wantXattrs: map[string]string{"user.e2b." + long: "v"},
			wantMeta:   map[string]string{long: "v"},
		},
		{name: "cleared without headers", header: octet(nil), wantStatus: 200, wantXattrs: map[string]string{}},
		{name: "key too long", header: octet(map[string]string{"X-Metadata-" + long + "k": "v"}), wantStatus: 400},
		{name: "non-ASCII value", header: octet(map[string]string{"X-Metadata-K": "caf\xc3\xa9"}), wantStatus: 400},
		{name: "too large", header: octet(map[string]string{"X-Metadata-A": strings.Repeat("a", 3000), "X-Metadata-B": strings.Repeat("b", 3000)}), wantStatus: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.request(t, http.MethodPost, url.Values{"path": {e.path("meta.txt")}}, tc.header, strings.NewReader(tc.name))
			if tc.wantStatus != 200 {
				checkError(t, resp, body, tc.wantStatus)
				return
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status = %d; body %s", resp.StatusCode, body)
			}
			var reply []entryInfo
			if err := json.Unmarshal(body, &reply); err != nil || len(reply) != 1 {
				t.Fatalf("reply %s: %v", body, err)
			}
			if diff := cmp.Diff(tc.wantMeta, reply[0].Metadata); diff != "" {
				t.Errorf("reply metadata (-want +got):\n%s", diff)
			}
			if has := bytes.Contains(body, []byte(`"metadata"`)); has != (len(tc.wantMeta) > 0) {
				t.Errorf("reply %s: want a metadata key exactly when metadata was sent", body)
			}
			if diff := cmp.Diff(tc.wantXattrs, getXattrs(t, e.path("meta.txt"))); diff != "" {
				t.Errorf("xattrs (-want +got):\n%s", diff)
			}
		})
	}
}

// Body limits: an oversized raw or decoded body is 413 and writes nothing.
func TestUploadTooLarge(t *testing.T) {
	e := newEnv(t, "", Options{MaxUploadBytes: 100})
	big := strings.Repeat("x", 1000)
	ct, mpBody := multipartBody(t, part{"file", e.path("mp.txt"), big})
	tests := []struct {
		name   string
		header http.Header
		body   []byte
		target string
	}{
		{"octet-stream", http.Header{"Content-Type": {"application/octet-stream"}}, []byte(big), "raw.txt"},
		{"multipart", http.Header{"Content-Type": {ct}}, mpBody.Bytes(), "mp.txt"},
		{"gzip expands past the limit", http.Header{"Content-Type": {"application/octet-stream"}, "Content-Encoding": {"gzip"}}, gzipped(t, big), "gz.txt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := e.request(t, http.MethodPost, url.Values{"path": {e.path(tc.target)}}, tc.header, bytes.NewReader(tc.body))
			checkError(t, resp, body, http.StatusRequestEntityTooLarge)
			if _, err := os.Stat(e.path(tc.target)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists after a refused upload (%v)", tc.target, err)
			}
			if left := tempFiles(t, e.root); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// failingReader yields data, then fails: a client that dies mid-upload.
type failingReader struct {
	data []byte
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, errors.New("client died")
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// An upload cut off midway leaves the previous content and no temporary
// file, for a single file and for every file of a multipart request.
func TestUploadAborted(t *testing.T) {
	half := strings.Repeat("new content ", 10000)
	tests := []struct {
		name string
		body func(e *testEnv) (q url.Values, contentType string, prefix []byte)
	}{
		{"octet-stream", func(e *testEnv) (url.Values, string, []byte) {
			return url.Values{"path": {e.path("two.txt")}}, "application/octet-stream", []byte(half)
		}},
		{"multipart, second part cut", func(e *testEnv) (url.Values, string, []byte) {
			ct, b := multipartBody(t, part{"file", e.path("one.txt"), "complete"}, part{"file", e.path("two.txt"), half + half})
			return nil, ct, b.Bytes()[:b.Len()-len(half)]
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "", Options{})
			writeFile(t, e.path("one.txt"), "old one")
			writeFile(t, e.path("two.txt"), "old two")
			q, ct, prefix := tc.body(e)
			req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/files?"+q.Encode(), &failingReader{data: prefix})
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", ct)
			req.ContentLength = -1 // chunked, like a streamed SDK upload
			if resp, err := e.client.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					t.Fatalf("aborted upload answered 200")
				}
			}
			e.srv.Close() // waits for the handler to finish
			for rel, want := range map[string]string{"one.txt": "old one", "two.txt": "old two"} {
				if got := readFile(t, e.path(rel)); got != want {
					t.Errorf("%s = %.20q..., want the old %q", rel, got, want)
				}
			}
			if left := tempFiles(t, e.root); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

func TestParseMetadata(t *testing.T) {
	got, err := parseMetadata(http.Header{"X-Metadata-A": {"1", "2"}, "Other": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"a": "1, 2"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got, err := parseMetadata(http.Header{}); got != nil || err != nil {
		t.Errorf("no headers: %v, %v; want nil, nil", got, err)
	}
	if _, err := parseMetadata(http.Header{"X-Metadata-": {"v"}}); err == nil {
		t.Error("empty key accepted")
	}
	if _, err := parseMetadata(http.Header{"X-Metadata-A": {"tab\there"}}); err == nil {
		t.Error("control character accepted")
	}
}

func TestStatusOf(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{syscall.ENOSPC, 507},
		{&os.PathError{Op: "write", Path: "x", Err: syscall.EDQUOT}, 507},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EACCES}, 403},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.EROFS}, 403},
		{&os.PathError{Op: "open", Path: "x", Err: syscall.ENOENT}, 404},
		{&os.PathError{Op: "rename", Path: "x", Err: syscall.EISDIR}, 400},
		{readError(&http.MaxBytesError{Limit: 1}), 413},
		{readError(io.ErrUnexpectedEOF), 400},
		{envderr.ErrUnauthenticated, 401},
		{errors.New("other"), 500},
	}
	for _, tc := range tests {
		if got := envderr.Status(tc.err); got != tc.want {
			t.Errorf("Status(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
