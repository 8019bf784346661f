package files

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// testEnv is an in-process envd /files endpoint over a temporary root that
// is also the default workdir, with the default user root.
type testEnv struct {
	srv    *httptest.Server
	client *http.Client
	root   string
	st     *config.State
}

// requireRoot gates tests that chown files or read other users' files.
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "envd chowns uploads to the requesting user")
}

func newEnv(t *testing.T, token string, opts Options) *testEnv {
	t.Helper()
	requireRoot(t)
	root := t.TempDir()
	st := config.New("test", "root")
	st.SetDefaults("root", root)
	st.SetToken(token)
	mux := http.NewServeMux()
	HandleOptions(mux, st, slog.New(slog.DiscardHandler), opts)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.DisableCompression = true // see the server's encoding as sent
	return &testEnv{srv: srv, client: &http.Client{Transport: tr}, root: root, st: st}
}

// request sends one request to /files and returns the response with its body
// read.
func (e *testEnv) request(t *testing.T, method string, q url.Values, h http.Header, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+"/files?"+q.Encode(), body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("%s /files: %v", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return resp, b
}

func (e *testEnv) path(rel string) string { return filepath.Join(e.root, rel) }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkError asserts the envd REST error body: JSON, integer code equal to
// the status.
func checkError(t *testing.T, resp *http.Response, body []byte, wantStatus int) envdapi.Error {
	t.Helper()
	if resp.StatusCode != wantStatus {
		t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, wantStatus, body)
	}
	return checkErrorBody(t, resp.StatusCode, resp.Header, body)
}

func checkErrorBody(t *testing.T, status int, h http.Header, body []byte) envdapi.Error {
	t.Helper()
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	code, ok := raw["code"].(float64)
	if !ok || int(code) != status {
		t.Errorf("error body code = %v, want the integer %d", raw["code"], status)
	}
	msg, ok := raw["message"].(string)
	if !ok || msg == "" {
		t.Errorf("error body message = %v, want a non-empty string", raw["message"])
	}
	return envdapi.Error{Code: int(code), Message: msg}
}

// part is one multipart part for multipartBody.
type part struct {
	field, filename, content string
}

// multipartBody builds a body the way the SDKs do: Content-Disposition with
// the filename as given, quoted, directories included.
func multipartBody(t *testing.T, parts ...part) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := `form-data; name="` + p.field + `"`
		if p.filename != "" {
			cd += `; filename="` + strings.ReplaceAll(p.filename, `"`, `\"`) + `"`
		}
		h.Set("Content-Disposition", cd)
		h.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return mw.FormDataContentType(), &buf
}

// tempFiles lists upload temporaries left under dir.
func tempFiles(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".hutch-upload-") {
			left = append(left, p)
		}
		return nil
	})
	return left
}

func TestIsUploadTemp(t *testing.T) {
	tests := map[string]bool{
		".report.pdf.hutch-upload-0123456789abcdef": true,
		".x.hutch-upload-0123456789abcdeg":          false, // not hex
		".x.hutch-upload-0123":                      false, // too short
		"x.hutch-upload-0123456789abcdef":           false, // not hidden
		".hutch-upload-0123456789abcdef":            false, // no target name
		"report.pdf":                                false,
	}
	for name, want := range tests {
		if got := IsUploadTemp(name); got != want {
			t.Errorf("IsUploadTemp(%q) = %v, want %v", name, got, want)
		}
	}
}
