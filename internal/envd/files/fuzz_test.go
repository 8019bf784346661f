package files

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// fuzzBoundary is the multipart boundary FuzzMultipart's bodies use.
const fuzzBoundary = "fuzzboundary"

// fuzzHandler returns the /files handler over a fresh root (also the
// workdir), called directly rather than over a socket: faster, and a panic
// reaches the fuzzer instead of net/http's recovery.
func fuzzHandler(f *testing.F) (http.Handler, string, *permissions.User) {
	testenv.RequireRoot(f, "envd chowns uploads to the requesting user")
	root := f.TempDir()
	if err := os.WriteFile(filepath.Join(root, "existing.txt"), []byte("existing"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "dir"), 0o755); err != nil {
		f.Fatal(err)
	}
	st := config.New("test", "root")
	st.SetDefaults("root", root)
	mux := http.NewServeMux()
	HandleOptions(mux, st, slog.New(slog.DiscardHandler), Options{MaxUploadBytes: 1 << 20})
	u, err := permissions.Lookup("root")
	if err != nil {
		f.Fatal(err)
	}
	return mux, root, u
}

// inside reports whether p resolves within root. The fuzzers skip other
// paths: these tests run as root on the host, where envd's real boundary,
// the sandbox's mount namespace, does not exist.
func inside(root, p string, u *permissions.User) bool {
	if p == "~" || strings.HasPrefix(p, "~/") {
		return false // the home directory is outside root
	}
	resolved, err := permissions.ExpandAndResolve(p, u, root)
	if err != nil {
		return true // refused before touching the filesystem
	}
	return resolved == root || strings.HasPrefix(resolved, root+"/")
}

// checkFuzzReply asserts a well-formed reply: a JSON array of entries for a
// successful upload, the JSON error body otherwise, and never a 5xx, which
// would mean a client mistake was misclassified as a server fault.
func checkFuzzReply(t *testing.T, method string, rec *httptest.ResponseRecorder) {
	t.Helper()
	body := rec.Body.Bytes()
	switch {
	case rec.Code >= 500:
		t.Fatalf("%s: status %d: %s", method, rec.Code, body)
	case rec.Code >= 400:
		checkErrorBody(t, rec.Code, rec.Header(), body)
	case method == http.MethodPost:
		var reply []entryInfo
		if err := json.Unmarshal(body, &reply); err != nil || len(reply) == 0 {
			t.Fatalf("upload reply %q: %v", body, err)
		}
		for _, e := range reply {
			if !filepath.IsAbs(e.Path) || e.Name != filepath.Base(e.Path) || e.Type != "file" {
				t.Fatalf("bad entry %+v", e)
			}
		}
	}
}

func FuzzFilesPath(f *testing.F) {
	for _, seed := range []string{"existing.txt", "dir", "new/file.txt", "", ".", "a/../b", "dir/", "x\x00y"} {
		f.Add(seed)
	}
	h, root, u := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, p string) {
		if !inside(root, p, u) {
			t.Skip("outside the test root")
		}
		q := url.Values{"path": {p}}.Encode()

		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/files?"+q, nil))
		checkFuzzReply(t, http.MethodGet, rec)

		rec = httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/files?"+q, strings.NewReader("fuzz"))
		req.Header.Set("Content-Type", "application/octet-stream")
		h.ServeHTTP(rec, req)
		checkFuzzReply(t, http.MethodPost, rec)
	})
}

func FuzzMultipart(f *testing.F) {
	h, root, u := fuzzHandler(f)
	seed := func(parts ...part) []byte {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if err := mw.SetBoundary(fuzzBoundary); err != nil {
			f.Fatal(err)
		}
		for _, p := range parts {
			w, _ := mw.CreateFormFile(p.field, p.filename)
			io.WriteString(w, p.content)
		}
		mw.Close()
		return buf.Bytes()
	}
	f.Add(seed(part{"file", "a.txt", "hello"}))
	f.Add(seed(part{"file", "d/b.txt", "1"}, part{"file", "d/c.txt", "2"}))
	f.Add(seed(part{"file", "x.txt", "1"}, part{"file", "x.txt", "2"}))
	f.Add(seed(part{"other", "y.txt", "1"}))
	f.Add([]byte("--" + fuzzBoundary + "\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		// Skip bodies naming a target outside root, reading them exactly
		// as the handler will.
		mr := multipart.NewReader(bytes.NewReader(body), fuzzBoundary)
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			if p.FormName() != "file" {
				continue
			}
			if name, err := rawFileName(p.Header); err == nil && !inside(root, name, u) {
				t.Skip("targets outside the test root")
			}
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/files", bytes.NewReader(body))
		req.Header.Set("Content-Type", "multipart/form-data; boundary="+fuzzBoundary)
		h.ServeHTTP(rec, req)
		checkFuzzReply(t, http.MethodPost, rec)
		if left := tempFiles(t, root); len(left) > 0 {
			t.Fatalf("temporary files left: %v", left)
		}
	})
}
