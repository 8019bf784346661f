package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestOSBProxyWithoutExecd: a server without an Execd answers execd's
// port 501 in OpenSandbox's error body, whoever asks and whatever the
// sandbox, as it does the egress sidecar's port; a port that is not one
// is a 400. None of it needs a sandbox (the server here has no manager:
// nothing reaches one).
func TestOSBProxyWithoutExecd(t *testing.T) {
	s := New(Options{})
	tests := []struct {
		method, path string
		header       http.Header
		status       int
		code         string
	}{
		{"GET", "/v1/sandboxes/i1/proxy/44772/ping", nil, 501, "SANDBOX::API_NOT_SUPPORTED"},
		{"POST", "/v1/sandboxes/i1/proxy/44772/command", http.Header{"X-Execd-Access-Token": {"t"}}, 501, "SANDBOX::API_NOT_SUPPORTED"},
		{"GET", "/v1/sandboxes/i1/proxy/44772/files/info", http.Header{"Open-Sandbox-Api-Key": {"e2b_00"}}, 501, "SANDBOX::API_NOT_SUPPORTED"},
		{"GET", "/v1/sandboxes/i1/proxy/18080/policy", nil, 501, "SANDBOX::API_NOT_SUPPORTED"},
		{"PATCH", "/v1/sandboxes/i1/proxy/18080/policy", http.Header{"Open-Sandbox-Api-Key": {"e2b_00"}}, 501, "SANDBOX::API_NOT_SUPPORTED"},
		{"GET", "/v1/sandboxes/i1/proxy/0/x", nil, 400, "SANDBOX::INVALID_PARAMETER"},
		{"GET", "/v1/sandboxes/i1/proxy/44772x/x", nil, 400, "SANDBOX::INVALID_PARAMETER"},
	}
	for _, tc := range tests {
		req := httptest.NewRequest(tc.method, tc.path, nil)
		for k, v := range tc.header {
			req.Header[k] = v
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		var e struct{ Code, Message string }
		err := json.Unmarshal(rec.Body.Bytes(), &e)
		if rec.Code != tc.status || err != nil || e.Code != tc.code || e.Message == "" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %s, want %d {code: %s, message}", tc.method, tc.path, rec.Code, rec.Body, tc.status, tc.code)
		}
	}
}
