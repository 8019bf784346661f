package files

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

func TestAuth(t *testing.T) {
	const token = "secret-token"
	e := newEnv(t, token, Options{})
	file := e.path("f.txt")
	writeFile(t, file, "content")
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	exp := func(n int64) string { return strconv.FormatInt(n, 10) }

	tests := []struct {
		name       string
		method     string
		query      url.Values
		header     http.Header
		wantStatus int
		wantMsg    string // substring of the error message
		exact      bool   // wantMsg is the whole message: E2B's envd says exactly this
	}{
		{name: "no header, no signature", query: url.Values{"path": {file}}, wantStatus: 401, wantMsg: tokenMessage},
		{name: "wrong header", query: url.Values{"path": {file}}, header: http.Header{"X-Access-Token": {"wrong"}}, wantStatus: 401, wantMsg: tokenMessage},
		{
			name:   "wrong header beats a good signature",
			query:  url.Values{"path": {file}, "signature": {envdapi.Sign(file, "read", "", token, 0)}},
			header: http.Header{"X-Access-Token": {"wrong"}}, wantStatus: 401,
		},
		{name: "right header", query: url.Values{"path": {file}}, header: http.Header{"X-Access-Token": {token}}, wantStatus: 200},
		{name: "signature read", query: url.Values{"path": {file}, "signature": {envdapi.Sign(file, "read", "", token, 0)}}, wantStatus: 200},
		{
			name:       "signature with username",
			query:      url.Values{"path": {file}, "username": {"nobody"}, "signature": {envdapi.Sign(file, "read", "nobody", token, 0)}},
			wantStatus: 200,
		},
		{
			name:       "signature for another username",
			query:      url.Values{"path": {file}, "username": {"nobody"}, "signature": {envdapi.Sign(file, "read", "", token, 0)}},
			wantStatus: 401,
		},
		{
			name:       "signature for relative path as given",
			query:      url.Values{"path": {"f.txt"}, "signature": {envdapi.Sign("f.txt", "read", "", token, 0)}},
			wantStatus: 200,
		},
		{name: "write signature used for read", query: url.Values{"path": {file}, "signature": {envdapi.Sign(file, "write", "", token, 0)}}, wantStatus: 401},
		{name: "wrong signature", query: url.Values{"path": {file}, "signature": {"v1_AAAA"}}, wantStatus: 401, wantMsg: "invalid signature", exact: true},
		{
			name:       "wrong signature, expired too",
			query:      url.Values{"path": {file}, "signature": {"v1_AAAA"}, "signature_expiration": {exp(past)}},
			wantStatus: 401, wantMsg: "invalid signature", exact: true,
		},
		{name: "signature with another token", query: url.Values{"path": {file}, "signature": {envdapi.Sign(file, "read", "", "other", 0)}}, wantStatus: 401},
		{
			name:       "signature with expiration",
			query:      url.Values{"path": {file}, "signature": {envdapi.Sign(file, "read", "", token, future)}, "signature_expiration": {exp(future)}},
			wantStatus: 200,
		},
		{
			name:       "expired signature",
			query:      url.Values{"path": {file}, "signature": {envdapi.Sign(file, "read", "", token, past)}, "signature_expiration": {exp(past)}},
			wantStatus: 401, wantMsg: "signature is already expired", exact: true,
		},
		{
			name:       "expiration not covered by the signature",
			query:      url.Values{"path": {file}, "signature": {envdapi.Sign(file, "read", "", token, 0)}, "signature_expiration": {exp(future)}},
			wantStatus: 401,
		},
		{
			name:       "malformed expiration",
			query:      url.Values{"path": {file}, "signature": {envdapi.Sign(file, "read", "", token, 0)}, "signature_expiration": {"soon"}},
			wantStatus: 400,
		},
		{
			name: "signature write", method: http.MethodPost,
			query:      url.Values{"path": {"up.txt"}, "signature": {envdapi.Sign("up.txt", "write", "", token, 0)}},
			header:     http.Header{"Content-Type": {"application/octet-stream"}},
			wantStatus: 200,
		},
		{
			name: "signature write with expiration and no path", method: http.MethodPost,
			query:      url.Values{"signature": {envdapi.Sign("", "write", "", token, future)}, "signature_expiration": {exp(future)}},
			header:     http.Header{"Content-Type": {"application/octet-stream"}},
			wantStatus: 400, // authenticated, then refused: octet-stream needs a path
		},
		{
			name: "read signature used for write", method: http.MethodPost,
			query:      url.Values{"path": {"up.txt"}, "signature": {envdapi.Sign("up.txt", "read", "", token, 0)}},
			header:     http.Header{"Content-Type": {"application/octet-stream"}},
			wantStatus: 401,
		},
		{
			name:       "unknown user",
			query:      url.Values{"path": {file}, "username": {"no-such-user"}},
			header:     http.Header{"X-Access-Token": {token}},
			wantStatus: 401,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			resp, body := e.request(t, method, tc.query, tc.header, strings.NewReader("data"))
			if tc.wantStatus == 200 {
				if resp.StatusCode != 200 {
					t.Fatalf("status = %d, want 200; body %s", resp.StatusCode, body)
				}
				return
			}
			eb := checkError(t, resp, body, tc.wantStatus)
			if !strings.Contains(eb.Message, tc.wantMsg) || tc.exact && eb.Message != tc.wantMsg {
				t.Errorf("message %q, want %q (exactly: %v)", eb.Message, tc.wantMsg, tc.exact)
			}
		})
	}
}

// Without a token the sandbox is unsecured: no header or signature needed,
// but the user must still exist.
func TestNoToken(t *testing.T) {
	e := newEnv(t, "", Options{})
	writeFile(t, e.path("f.txt"), "x")
	resp, body := e.request(t, http.MethodGet, url.Values{"path": {"f.txt"}, "signature": {"garbage"}}, nil, nil)
	if resp.StatusCode != 200 {
		t.Errorf("status = %d, want 200; body %s", resp.StatusCode, body)
	}
	resp, body = e.request(t, http.MethodGet, url.Values{"path": {"f.txt"}, "username": {"no-such-user"}}, nil, nil)
	checkError(t, resp, body, 401)
}

// The token set by /init after Handle applies at once.
func TestTokenChange(t *testing.T) {
	e := newEnv(t, "", Options{})
	writeFile(t, e.path("f.txt"), "x")
	e.st.SetToken("later")
	resp, body := e.request(t, http.MethodGet, url.Values{"path": {"f.txt"}}, nil, nil)
	checkError(t, resp, body, 401)
}
