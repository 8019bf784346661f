package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestCreateOpenSandbox: the fields E2B's create cannot carry send
// OpenSandbox's create request, with its field names and key header, and
// the handle comes from a connect that asks for no more life.
func TestCreateOpenSandbox(t *testing.T) {
	var body map[string]any
	var connectBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method + " " + r.URL.Path {
		case "POST /v1/sandboxes":
			if r.Header.Get("OPEN-SANDBOX-API-KEY") != "e2b_k" {
				t.Errorf("OPEN-SANDBOX-API-KEY = %q", r.Header.Get("OPEN-SANDBOX-API-KEY"))
			}
			json.NewDecoder(r.Body).Decode(&body)
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"id":"sbx1","status":{"state":"Running"},"createdAt":"2026-01-01T00:00:00Z","entrypoint":["sleep","9"]}`))
		case "POST /v2/sandboxes/sbx1/connect":
			b, _ := io.ReadAll(r.Body)
			connectBody = string(b)
			w.Write([]byte(`{"sandboxID":"sbx1","templateID":"base","clientID":"x","envdVersion":"0.6.4","envdAccessToken":"tok"}`))
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c, err := NewClient(Config{APIKey: "e2b_k", APIURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	sbx, err := c.Create(context.Background(), CreateOptions{
		Image: "python:3.12", ImageAuth: &RegistryAuth{Username: "u", Password: "p"},
		Timeout: 90 * time.Second, Envs: map[string]string{"A": "1"}, Metadata: map[string]string{"k": "v"},
		Resources: map[string]string{"cpu": "500m", "memory": "512Mi"}, Entrypoint: []string{"sleep", "9"},
		NetworkPolicy: &NetworkPolicy{DefaultAction: "deny", Egress: []NetworkRule{{Action: "allow", Target: "pypi.org"}}},
		Runtime:       "native",
	})
	if err != nil {
		t.Fatal(err)
	}
	if sbx.ID != "sbx1" || sbx.EnvdAccessToken != "tok" {
		t.Errorf("handle %+v", sbx)
	}
	want := map[string]any{
		"image":          map[string]any{"uri": "python:3.12", "auth": map[string]any{"username": "u", "password": "p"}},
		"timeout":        90.0,
		"env":            map[string]any{"A": "1"},
		"metadata":       map[string]any{"k": "v", RuntimeMetadata: "native"},
		"resourceLimits": map[string]any{"cpu": "500m", "memory": "512Mi"},
		"entrypoint":     []any{"sleep", "9"},
		"networkPolicy":  map[string]any{"defaultAction": "deny", "egress": []any{map[string]any{"action": "allow", "target": "pypi.org"}}},
	}
	if d := cmp.Diff(want, body); d != "" {
		t.Errorf("request body (-want +got):\n%s", d)
	}
	if connectBody != `{"timeout":1}` {
		t.Errorf("connect body %s, want a timeout of 1 s", connectBody)
	}

	// Only E2B's fields: E2B's request, as before.
	for _, tc := range []struct {
		name string
		opts CreateOptions
	}{
		{"image and template", CreateOptions{Image: "python:3.12", Template: "base"}},
		{"network and resources", CreateOptions{Resources: map[string]string{"cpu": "1"}, Network: &Network{DenyOut: []string{"0.0.0.0/0"}}}},
		{"volumes and entrypoint", CreateOptions{Entrypoint: []string{"x"}, Volumes: []VolumeMount{{Name: "v", Path: "/v"}}}},
	} {
		if _, err := c.Create(context.Background(), tc.opts); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}
