package files

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"testing"
)

func TestDownload(t *testing.T) {
	e := newEnv(t, "", Options{})
	writeFile(t, e.path("hello.txt"), "hello world")
	writeFile(t, e.path("empty"), "")
	writeFile(t, e.path(`dir/a"b\c.txt`), "quoted")
	if err := os.MkdirAll(e.path("subdir"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		method     string
		path       string
		header     http.Header
		wantStatus int
		wantBody   string            // checked for 2xx
		wantHeader map[string]string // "" means must be absent
	}{
		{
			name: "content", path: e.path("hello.txt"), wantStatus: 200, wantBody: "hello world",
			wantHeader: map[string]string{
				"Content-Type":        "application/octet-stream",
				"Content-Disposition": `inline; filename="hello.txt"`,
				"Content-Length":      "11",
				"Content-Encoding":    "",
			},
		},
		{name: "relative to workdir", path: "hello.txt", wantStatus: 200, wantBody: "hello world"},
		{
			name: "empty file has Content-Length 0", path: e.path("empty"), wantStatus: 200, wantBody: "",
			wantHeader: map[string]string{"Content-Length": "0"},
		},
		{
			name: "empty file with gzip still has Content-Length 0", path: e.path("empty"), wantStatus: 200,
			header:     http.Header{"Accept-Encoding": {"gzip"}},
			wantHeader: map[string]string{"Content-Length": "0", "Content-Encoding": ""},
		},
		{
			name: "quote in name", path: e.path(`dir/a"b\c.txt`), wantStatus: 200, wantBody: "quoted",
			wantHeader: map[string]string{"Content-Disposition": `inline; filename="a\"b\\c.txt"`},
		},
		{
			name: "range", path: e.path("hello.txt"), header: http.Header{"Range": {"bytes=6-"}},
			wantStatus: 206, wantBody: "world",
			wantHeader: map[string]string{"Content-Range": "bytes 6-10/11", "Content-Length": "5"},
		},
		{
			name: "range wins over gzip", path: e.path("hello.txt"),
			header:     http.Header{"Range": {"bytes=0-4"}, "Accept-Encoding": {"gzip"}},
			wantStatus: 206, wantBody: "hello", wantHeader: map[string]string{"Content-Encoding": ""},
		},
		{
			name: "identity when gzip refused", path: e.path("hello.txt"),
			header:     http.Header{"Accept-Encoding": {"gzip;q=0, identity"}},
			wantStatus: 200, wantBody: "hello world", wantHeader: map[string]string{"Content-Encoding": ""},
		},
		{
			name: "head", method: http.MethodHead, path: e.path("hello.txt"), wantStatus: 200,
			wantHeader: map[string]string{"Content-Length": "11"},
		},
		{name: "missing", path: e.path("nope"), wantStatus: 404},
		{name: "parent is a file", path: e.path("hello.txt/x"), wantStatus: 404},
		{name: "directory", path: e.path("subdir"), wantStatus: 400},
		{name: "not a regular file", path: "/dev/null", wantStatus: 400},
		{name: "no path", path: "", wantStatus: 400},
		{name: "bad tilde", path: "~nobody/x", wantStatus: 400},
		{name: "unsatisfiable range", path: e.path("hello.txt"), header: http.Header{"Range": {"bytes=100-"}}, wantStatus: 416},
		{name: "no acceptable encoding", path: e.path("hello.txt"), header: http.Header{"Accept-Encoding": {"br, identity;q=0"}}, wantStatus: 406},
		{name: "method not allowed", method: http.MethodPut, path: e.path("hello.txt"), wantStatus: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			q := url.Values{}
			if tc.path != "" {
				q.Set("path", tc.path)
			}
			resp, body := e.request(t, method, q, tc.header, nil)
			if tc.wantStatus >= 400 {
				checkError(t, resp, body, tc.wantStatus)
				return
			}
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.wantStatus, body)
			}
			if method != http.MethodHead && string(body) != tc.wantBody {
				t.Errorf("body = %q, want %q", body, tc.wantBody)
			}
			for k, want := range tc.wantHeader {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestDownloadGzip(t *testing.T) {
	e := newEnv(t, "", Options{})
	content := bytes.Repeat([]byte("compressible "), 10000)
	if err := os.WriteFile(e.path("big.txt"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	resp, body := e.request(t, http.MethodGet, url.Values{"path": {e.path("big.txt")}},
		http.Header{"Accept-Encoding": {"gzip, deflate, br"}}, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status = %d; body %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Content-Encoding"); got != "gzip" {
		t.Fatalf("Content-Encoding = %q, want gzip", got)
	}
	// net/http may add a Content-Length when the whole reply fits its
	// buffer; then it must count the compressed bytes.
	if got := resp.Header.Get("Content-Length"); got != "" && got != strconv.Itoa(len(body)) {
		t.Errorf("Content-Length = %q with gzip, want none or %d", got, len(body))
	}
	if got := resp.Header.Get("Content-Disposition"); got != `inline; filename="big.txt"` {
		t.Errorf("Content-Disposition = %q", got)
	}
	if len(body) >= len(content) {
		t.Errorf("gzip body is %d bytes for %d bytes of content: not compressed", len(body), len(content))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("decoding gzip body: %v", err)
	}
	if !bytes.Equal(got, content) {
		t.Errorf("decoded body differs from the file (%d vs %d bytes)", len(got), len(content))
	}
}

// A pseudo-file reports size 0 but has content; it must not come back empty.
func TestDownloadPseudoFile(t *testing.T) {
	e := newEnv(t, "", Options{})
	resp, body := e.request(t, http.MethodGet, url.Values{"path": {"/proc/self/status"}}, nil, nil)
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("Pid:")) {
		t.Fatalf("status %d, body %.80q: want /proc/self/status content", resp.StatusCode, body)
	}
}

func TestNegotiateEncoding(t *testing.T) {
	tests := []struct {
		header []string
		want   string
	}{
		{nil, "identity"},
		{[]string{""}, "identity"},
		{[]string{"gzip"}, "gzip"},
		{[]string{"gzip, deflate, br, zstd"}, "gzip"},
		{[]string{"GZIP;q=0.5"}, "gzip"},
		{[]string{"br"}, "identity"},
		{[]string{"gzip;q=0"}, "identity"},
		{[]string{"identity;q=1, gzip;q=0.5"}, "identity"},
		{[]string{"identity, gzip"}, "gzip"},
		{[]string{"*"}, "gzip"},
		{[]string{"*;q=0"}, ""},
		{[]string{"br, identity;q=0"}, ""},
		{[]string{"br, *;q=0"}, ""},
		{[]string{"gzip;q=bogus"}, "identity"},
		{[]string{"deflate", "gzip"}, "gzip"},
	}
	for _, tc := range tests {
		if got := negotiateEncoding(tc.header); got != tc.want {
			t.Errorf("negotiateEncoding(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}

func TestContentDisposition(t *testing.T) {
	tests := []struct{ name, want string }{
		{"a.txt", `inline; filename="a.txt"`},
		{"with space.txt", `inline; filename="with space.txt"`},
		{`q"uote`, `inline; filename="q\"uote"`},
		{`back\slash`, `inline; filename="back\\slash"`},
		{"héllo.txt", `inline; filename="h__llo.txt"; filename*=UTF-8''h%C3%A9llo.txt`},
		{"a\nb", `inline; filename="a_b"; filename*=UTF-8''a%0Ab`},
	}
	for _, tc := range tests {
		if got := contentDisposition(tc.name); got != tc.want {
			t.Errorf("contentDisposition(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
