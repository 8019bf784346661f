package console

import (
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestIndexNamesItsAssets: the page loads only assets the console has,
// from its own path, and no inline script (the CSP would refuse it).
func TestIndexNamesItsAssets(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	page := string(c.index.body)
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 2 {
		t.Fatalf("the page names %d files, want its script and style sheet:\n%s", len(refs), page)
	}
	for _, ref := range refs {
		name, ok := strings.CutPrefix(ref[1], "/console/assets/")
		if ref[1] == "data:," {
			continue // the empty favicon: no request for /favicon.ico
		}
		if !ok || !c.Asset(name) {
			t.Errorf("the page names %q, which the console does not serve", ref[1])
		}
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).MatchString(page) {
		t.Error("the page has an inline script")
	}
	for _, name := range []string{"app.js", "app.css"} {
		if !c.Asset(name) || len(c.assets[name].body) == 0 {
			t.Errorf("asset %s is missing or empty: run scripts/console.sh", name)
		}
	}
}

// TestServeHeaders: every answer carries the security headers and the
// right type; a repeated request with the ETag answers 304.
func TestServeHeaders(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		serve func(*httptest.ResponseRecorder)
		ctype string
	}{
		{"index", func(w *httptest.ResponseRecorder) { c.ServeIndex(w, httptest.NewRequest("GET", "/", nil)) }, "text/html; charset=utf-8"},
		{"script", func(w *httptest.ResponseRecorder) {
			c.ServeAsset(w, httptest.NewRequest("GET", "/console/assets/app.js", nil), "app.js")
		}, "text/javascript; charset=utf-8"},
	}
	for _, tc := range tests {
		w := httptest.NewRecorder()
		tc.serve(w)
		h := w.Result().Header
		if w.Code != 200 || h.Get("Content-Type") != tc.ctype {
			t.Errorf("%s: %d %q, want 200 %q", tc.name, w.Code, h.Get("Content-Type"), tc.ctype)
		}
		for k, want := range map[string]string{"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"} {
			if got := h.Get(k); got != want {
				t.Errorf("%s: %s %q, want %q", tc.name, k, got, want)
			}
		}
	}
	if !strings.Contains(CSP, "script-src 'self';") || !strings.Contains(CSP, "frame-ancestors 'none'") || !strings.Contains(CSP, "connect-src 'self'") {
		t.Errorf("CSP %q: want scripts and connections from the server only, no framing", CSP)
	}
}
