package e2bapi_test

import (
	"net/http/httptest"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

func TestAPIKeyFromRequest(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		want    string
	}{
		{"none", nil, ""},
		{"X-API-KEY", map[string]string{"X-API-KEY": "e2b_abc"}, "e2b_abc"},
		{"lower case name", map[string]string{"x-api-key": "e2b_abc"}, "e2b_abc"},
		{"mixed case name", map[string]string{"X-Api-Key": " e2b_abc "}, "e2b_abc"},
		{"bearer", map[string]string{"Authorization": "Bearer e2b_cli1"}, "e2b_cli1"},
		{"bearer lower scheme", map[string]string{"Authorization": "bearer  e2b_cli1"}, "e2b_cli1"},
		{"bearer non-key token", map[string]string{"Authorization": "Bearer sk_e2b_access"}, ""},
		{"basic", map[string]string{"Authorization": "Basic dXNlcjo="}, ""},
		{"header wins", map[string]string{"X-API-KEY": "e2b_h", "Authorization": "Bearer e2b_b"}, "e2b_h"},
		{"empty header falls back", map[string]string{"X-API-KEY": "  ", "Authorization": "Bearer e2b_b"}, "e2b_b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v2/sandboxes", nil)
			for k, v := range tt.headers {
				r.Header[k] = []string{v} // raw, uncanonicalized names
				r.Header.Set(k, v)
			}
			if got := e2bapi.APIKeyFromRequest(r); got != tt.want {
				t.Errorf("APIKeyFromRequest = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidKeyFormat(t *testing.T) {
	tests := map[string]bool{
		"e2b_0123456789abcdef": true,
		"e2b_a":                true,
		"e2b_":                 false,
		"":                     false,
		"e2b_ABCDEF":           false,
		"e2b_xyz":              false,
		"E2B_abc":              false,
		"e2b_abc\n":            false,
		" e2b_abc":             false,
		"sk_e2b_abc":           false,
	}
	for k, want := range tests {
		if got := e2bapi.ValidKeyFormat(k); got != want {
			t.Errorf("ValidKeyFormat(%q) = %v, want %v", k, got, want)
		}
	}
}
