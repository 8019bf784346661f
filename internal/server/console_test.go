package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/console"
)

// consoleDo sends method path with body and headers ("Name: value" each)
// to srv, without following redirects, and returns the answer and its
// body.
func consoleDo(t *testing.T, url, method, body string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestConsoleSignIn: the console's session through the real server: a
// wrong key or a missing header sets no cookie, a right key sets the
// cookie with its attributes, and the cookie authenticates API calls only
// beside the console's header.
func TestConsoleSignIn(t *testing.T) {
	srv, key := newTestServer(t)
	cookie := consoleCookie + "=" + key

	tests := []struct {
		name       string
		body       string
		headers    []string
		wantStatus int
	}{
		{"wrong key", `{"apiKey":"e2b_00000000000000000000000000000000deadbeef"}`, []string{"X-Hutch-Console: 1"}, http.StatusUnauthorized},
		{"malformed key", `{"apiKey":"not-a-key"}`, []string{"X-Hutch-Console: 1"}, http.StatusUnauthorized},
		{"no header", `{"apiKey":"` + key + `"}`, nil, http.StatusForbidden},
		{"no body", ``, []string{"X-Hutch-Console: 1"}, http.StatusBadRequest},
		{"right key", `{"apiKey":"` + key + `"}`, []string{"X-Hutch-Console: 1", "Content-Type: application/json"}, http.StatusNoContent},
		// Anyone may call it: a body past a key's size is refused, not read
		// (review 27 round 2, G6).
		{"a body of 5 KiB", `{"apiKey":"` + key + `","x":"` + strings.Repeat("x", 5<<10) + `"}`, []string{"X-Hutch-Console: 1"}, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := consoleDo(t, srv.URL+"/console/session", "POST", tc.body, tc.headers...)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tc.wantStatus)
			}
			cookies := resp.Cookies()
			if tc.wantStatus != http.StatusNoContent {
				if len(cookies) != 0 {
					t.Errorf("a refused sign-in set cookies %v", cookies)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("error Content-Type %q, want application/json", ct)
				}
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != tc.wantStatus || e.Message == "" {
					t.Errorf("error body %q is not E2B's error (%v)", body, err)
				}
				return
			}
			if len(cookies) != 1 {
				t.Fatalf("cookies %v, want one", cookies)
			}
			c := cookies[0]
			if c.Name != consoleCookie || c.Value != key || c.Path != "/" || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("cookie %+v, want %s=<key>; Path=/; HttpOnly; Secure; SameSite=Strict", c, consoleCookie)
			}
		})
	}

	// The cookie counts only beside the header.
	for _, tc := range []struct {
		headers []string
		want    int
	}{
		{[]string{"Cookie: " + cookie}, http.StatusUnauthorized},
		{[]string{"Cookie: " + cookie, "X-Hutch-Console: yes"}, http.StatusUnauthorized},
		{[]string{"Cookie: " + cookie, "X-Hutch-Console: 1"}, http.StatusOK},
		{[]string{"Cookie: " + consoleCookie + "=e2b_00000000000000000000000000000000deadbeef", "X-Hutch-Console: 1"}, http.StatusUnauthorized},
		{[]string{"X-Hutch-Console: 1"}, http.StatusUnauthorized},
	} {
		if resp, body := consoleDo(t, srv.URL+"/v2/sandboxes", "GET", "", tc.headers...); resp.StatusCode != tc.want {
			t.Errorf("GET /v2/sandboxes with %q: %d %s, want %d", tc.headers, resp.StatusCode, body, tc.want)
		}
	}

	// Signing out clears the cookie.
	resp, _ := consoleDo(t, srv.URL+"/console/session", "DELETE", "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /console/session: %d", resp.StatusCode)
	}
	if c := resp.Cookies(); len(c) != 1 || c[0].Name != consoleCookie || c[0].MaxAge >= 0 {
		t.Errorf("sign-out cookies %v, want %s cleared", c, consoleCookie)
	}
}

// TestConsolePage: GET / and the assets are the console's, with its
// security headers; other paths still answer the API's JSON 404.
func TestConsolePage(t *testing.T) {
	srv, _ := newTestServer(t)
	for _, tc := range []struct {
		path, wantType string
		wantStatus     int
		console        bool
	}{
		{"/", "text/html; charset=utf-8", http.StatusOK, true},
		{"/console/assets/app.js", "text/javascript; charset=utf-8", http.StatusOK, true},
		{"/console/assets/app.css", "text/css; charset=utf-8", http.StatusOK, true},
		{"/console/assets/nope.js", "application/json", http.StatusNotFound, false},
		{"/console/assets/..%2findex.html", "application/json", http.StatusNotFound, false},
		{"/index.html", "application/json", http.StatusNotFound, false},
		{"/no/such/endpoint", "application/json", http.StatusNotFound, false},
	} {
		resp, body := consoleDo(t, srv.URL+tc.path, "GET", "")
		if resp.StatusCode != tc.wantStatus || resp.Header.Get("Content-Type") != tc.wantType {
			t.Errorf("GET %s: %d %q, want %d %q (%.100s)", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.wantStatus, tc.wantType, body)
			continue
		}
		if !tc.console {
			continue
		}
		h := resp.Header
		if h.Get("Content-Security-Policy") != console.CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: security headers %v", tc.path, h)
		}
		if len(body) == 0 {
			t.Errorf("GET %s: empty body", tc.path)
		}
		// Revalidated by ETag.
		again, _ := consoleDo(t, srv.URL+tc.path, "GET", "", "If-None-Match: "+h.Get("ETag"))
		if again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", tc.path, again.StatusCode)
		}
	}
}

// TestStripConsoleCookie: a request to a sandbox keeps every cookie but
// the console's; an answer from one sets every cookie but the console's.
func TestStripConsoleCookie(t *testing.T) {
	tests := []struct {
		in   []string
		want []string
	}{
		{nil, nil},
		{[]string{"a=1"}, []string{"a=1"}},
		{[]string{consoleCookie + "=e2b_1"}, nil},
		{[]string{"a=1; " + consoleCookie + "=e2b_1; b=2"}, []string{"a=1; b=2"}},
		{[]string{"a=1", consoleCookie + "=e2b_1"}, []string{"a=1"}},
		{[]string{consoleCookie + "x=1"}, []string{consoleCookie + "x=1"}},
	}
	for _, tc := range tests {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add("Cookie", v)
		}
		stripConsoleCookie(h)
		if got := h.Values("Cookie"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("stripConsoleCookie(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}

	resp := &http.Response{Header: http.Header{}}
	resp.Header.Add("Set-Cookie", "a=1; Path=/")
	resp.Header.Add("Set-Cookie", consoleCookie+"=e2b_evil; Path=/")
	resp.Header.Add("Set-Cookie", " "+consoleCookie+" =e2b_evil")
	dropConsoleSetCookie(resp)
	if got := resp.Header.Values("Set-Cookie"); len(got) != 1 || got[0] != "a=1; Path=/" {
		t.Errorf("dropConsoleSetCookie left %q, want only a=1", got)
	}
}

// TestConsoleKey: the cookie stands for a key only with the console's
// header, and not at all when two cookies of the name disagree (one was
// planted: a sandbox page of the same site can set a cookie, though not
// a __Host- one).
func TestConsoleKey(t *testing.T) {
	for _, tc := range []struct {
		name    string
		header  string
		cookies []string
		want    string
	}{
		{"cookie and header", "1", []string{"k1"}, "k1"},
		{"no header", "", []string{"k1"}, ""},
		{"another header value", "true", []string{"k1"}, ""},
		{"no cookie", "1", nil, ""},
		{"the same twice", "1", []string{"k1", "k1"}, "k1"},
		{"two keys", "1", []string{"k1", "k2"}, ""},
	} {
		r := httptest.NewRequest("GET", "/v2/sandboxes", nil)
		if tc.header != "" {
			r.Header.Set(consoleHeader, tc.header)
		}
		for _, c := range tc.cookies {
			r.AddCookie(&http.Cookie{Name: consoleCookie, Value: c})
		}
		if got := consoleKey(r); got != tc.want {
			t.Errorf("%s: consoleKey = %q, want %q", tc.name, got, tc.want)
		}
	}
}
