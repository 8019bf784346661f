package httperr_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/hutch-sandbox/hutch/internal/mcp/httperr"
)

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   int64
	}{
		{http.StatusBadRequest, jsonrpc.CodeInvalidRequest},
		{http.StatusUnauthorized, httperr.CodeUnauthorized},
		{http.StatusForbidden, jsonrpc.CodeInvalidRequest},
		{http.StatusNotFound, jsonrpc.CodeInvalidRequest},
		{http.StatusMethodNotAllowed, jsonrpc.CodeInvalidRequest},
		{http.StatusRequestEntityTooLarge, jsonrpc.CodeInvalidRequest},
		{http.StatusUnsupportedMediaType, jsonrpc.CodeInvalidRequest},
		{http.StatusInternalServerError, jsonrpc.CodeInternalError},
		{http.StatusServiceUnavailable, jsonrpc.CodeInternalError},
	} {
		if got := httperr.Code(tc.status); got != tc.want {
			t.Errorf("Code(%d) = %d, want %d", tc.status, got, tc.want)
		}
	}
}

// wireError decodes an answer as a JSON-RPC error response without an id,
// the shape the TypeScript client's schema accepts, and returns its error.
func wireError(t *testing.T, body []byte) jsonrpc.Error {
	t.Helper()
	var resp map[string]json.RawMessage
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("body %q is not JSON: %v", body, err)
	}
	var e jsonrpc.Error
	if string(resp["jsonrpc"]) != `"2.0"` || len(resp) != 2 || json.Unmarshal(resp["error"], &e) != nil || e.Message == "" {
		t.Fatalf("body %q is not a JSON-RPC error response without an id", body)
	}
	return e
}

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("WWW-Authenticate", `Bearer realm="mcp-gateway"`)
	rec.Header().Set("Content-Length", "99")
	httperr.Write(rec, http.StatusUnauthorized, "unauthorized: send Authorization: Bearer <the gateway token>")
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", rec.Code)
	}
	want := http.Header{
		"Content-Type":           {"application/json"},
		"X-Content-Type-Options": {"nosniff"},
		"Www-Authenticate":       {`Bearer realm="mcp-gateway"`},
	}
	if diff := cmp.Diff(want, rec.Header()); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
	// The gateway's 401 body, byte for byte as it always was.
	if got, want := rec.Body.String(), `{"jsonrpc":"2.0","error":{"code":-32001,"message":"unauthorized: send Authorization: Bearer <the gateway token>"}}`+"\n"; got != want {
		t.Errorf("body %q, want %q", got, want)
	}
	if we := wireError(t, rec.Body.Bytes()); we.Code != httperr.CodeUnauthorized {
		t.Errorf("code %d", we.Code)
	}
}

func TestHandler(t *testing.T) {
	long := strings.Repeat("x", 5000)
	tests := []struct {
		name       string
		h          http.HandlerFunc
		status     int
		wantCT     string
		wantBody   string // exact, when not an error to decode
		wantCode   int64
		wantMsg    string
		wantFlushd bool
	}{
		{name: "plain-text refusal", h: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "request body exceeds 16 bytes", http.StatusRequestEntityTooLarge)
		}, status: 413, wantCT: "application/json", wantCode: jsonrpc.CodeInvalidRequest, wantMsg: "request body exceeds 16 bytes"},
		{name: "refusal without a body", h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusMethodNotAllowed)
		}, status: 405, wantCT: "application/json", wantCode: jsonrpc.CodeInvalidRequest, wantMsg: "Method Not Allowed"},
		{name: "plain-text 401 of the auth middleware", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer scope="hutch"`)
			http.Error(w, "no bearer token", http.StatusUnauthorized)
		}, status: 401, wantCT: "application/json", wantCode: httperr.CodeUnauthorized, wantMsg: "no bearer token"},
		{name: "long text is cut", h: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, long, http.StatusBadRequest)
		}, status: 400, wantCT: "application/json", wantCode: jsonrpc.CodeInvalidRequest, wantMsg: long[:1024]},
		{name: "a JSON-RPC error of the SDK's own passes", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"jsonrpc":"2.0","id":3,"error":{"code":-32020,"message":"header mismatch"}}`)
		}, status: 400, wantCT: "application/json", wantBody: `{"jsonrpc":"2.0","id":3,"error":{"code":-32020,"message":"header mismatch"}}`},
		{name: "a result passes", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
		}, status: 200, wantCT: "application/json", wantBody: `{"jsonrpc":"2.0","id":1,"result":{}}`},
		{name: "an event stream passes and flushes", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "event: message\ndata: {}\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
		}, status: 200, wantCT: "text/event-stream", wantBody: "event: message\ndata: {}\n\n", wantFlushd: true},
		{name: "no content", h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusAccepted)
		}, status: 202, wantBody: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			httperr.Handler(tc.h).ServeHTTP(rec, httptest.NewRequest("POST", "/mcp", nil))
			if rec.Code != tc.status || rec.Header().Get("Content-Type") != tc.wantCT {
				t.Fatalf("got %d %q, want %d %q (body %q)", rec.Code, rec.Header().Get("Content-Type"), tc.status, tc.wantCT, rec.Body)
			}
			if rec.Flushed != tc.wantFlushd {
				t.Errorf("flushed %v, want %v", rec.Flushed, tc.wantFlushd)
			}
			if tc.wantMsg == "" {
				if rec.Body.String() != tc.wantBody {
					t.Errorf("body %q, want %q", rec.Body, tc.wantBody)
				}
				return
			}
			we := wireError(t, rec.Body.Bytes())
			if we.Code != tc.wantCode || we.Message != tc.wantMsg {
				t.Errorf("error %d %q, want %d %q", we.Code, we.Message, tc.wantCode, tc.wantMsg)
			}
		})
	}
}

// ExampleWrite shows the one shape of an HTTP-level failure.
func ExampleWrite() {
	rec := httptest.NewRecorder()
	httperr.Write(rec, http.StatusRequestEntityTooLarge, "request body: http: request body too large")
	fmt.Print(rec.Code, " ", rec.Body)
	// Output: 413 {"jsonrpc":"2.0","error":{"code":-32600,"message":"request body: http: request body too large"}}
}
