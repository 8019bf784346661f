package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/hutch-sandbox/hutch/internal/server/servertest"
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

// TestOpenSandboxReads: what OpenSandbox's lifecycle API of a real
// hutch serve says of sandboxes made through either API, read with
// GetOpenSandboxInfo, ListOpenSandboxInfo and GetOpenSandboxEndpoint.
func TestOpenSandboxReads(t *testing.T) {
	cp := servertest.Start(t, 2)
	ctx := context.Background()
	c, err := NewClient(Config{APIURL: cp.URL, APIKey: cp.Keys[0]})
	if err != nil {
		t.Fatal(err)
	}
	e2b, err := c.Create(ctx, CreateOptions{Template: "base", Metadata: map[string]string{"suite": "reads", "made": "e2b"}})
	if err != nil {
		t.Fatal(err)
	}
	osb, err := c.Create(ctx, CreateOptions{Image: "base", Entrypoint: []string{"sleep", "999"}, Metadata: map[string]string{"suite": "reads", "made": "osb"}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("info", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			sbx        *Sandbox
			entrypoint []string
		}{
			{"made through E2B's API", e2b, []string{}},
			{"made through OpenSandbox's, with an entrypoint", osb, []string{"sleep", "999"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := c.GetOpenSandboxInfo(ctx, tc.sbx.ID)
				if err != nil {
					t.Fatal(err)
				}
				e, err := c.GetInfo(ctx, tc.sbx.ID)
				if err != nil {
					t.Fatal(err)
				}
				want := &OpenSandboxInfo{ID: tc.sbx.ID, Image: "base", State: "Running", Metadata: e.Metadata, Entrypoint: tc.entrypoint,
					ExpiresAt: e.EndAt, CreatedAt: e.StartedAt}
				if d := cmp.Diff(want, got, cmpopts.EquateApproxTime(time.Millisecond)); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			})
		}
		other, err := NewClient(Config{APIURL: cp.URL, APIKey: cp.Keys[1]})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			c    *Client
			id   string
		}{{"no such sandbox", c, "no-such-sandbox"}, {"another key's sandbox", other, e2b.ID}} {
			if _, err := tc.c.GetOpenSandboxInfo(ctx, tc.id); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", tc.name, err)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		reads := map[string]string{"suite": "reads"}
		for _, tc := range []struct {
			name  string
			opts  OpenSandboxListOptions
			made  []string // the items' metadata "made", in any order
			pages OpenSandboxPage
		}{
			{"by metadata", OpenSandboxListOptions{Metadata: reads}, []string{"e2b", "osb"}, OpenSandboxPage{Page: 1, PageSize: 20, TotalItems: 2, TotalPages: 1}},
			{"by two pairs", OpenSandboxListOptions{Metadata: map[string]string{"suite": "reads", "made": "osb"}}, []string{"osb"}, OpenSandboxPage{Page: 1, PageSize: 20, TotalItems: 1, TotalPages: 1}},
			{"running, any case", OpenSandboxListOptions{Metadata: reads, States: []string{"RUNNING"}}, []string{"e2b", "osb"}, OpenSandboxPage{Page: 1, PageSize: 20, TotalItems: 2, TotalPages: 1}},
			{"paused", OpenSandboxListOptions{Metadata: reads, States: []string{"Paused"}}, nil, OpenSandboxPage{Page: 1, PageSize: 20}},
			{"first page of one", OpenSandboxListOptions{Metadata: reads, PageSize: 1}, []string{"?"}, OpenSandboxPage{Page: 1, PageSize: 1, TotalItems: 2, TotalPages: 2, HasNextPage: true}},
			{"second page of one", OpenSandboxListOptions{Metadata: reads, Page: 2, PageSize: 1}, []string{"?"}, OpenSandboxPage{Page: 2, PageSize: 1, TotalItems: 2, TotalPages: 2}},
			{"past the end", OpenSandboxListOptions{Metadata: reads, Page: 3, PageSize: 1}, nil, OpenSandboxPage{Page: 3, PageSize: 1, TotalItems: 2, TotalPages: 2}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := c.ListOpenSandboxInfo(ctx, tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				var made []string
				for _, it := range got.Items {
					made = append(made, it.Metadata["made"])
					if it.State != "Running" || it.Image != "base" || it.Entrypoint == nil {
						t.Errorf("item %+v", it)
					}
				}
				slices.Sort(made)
				if len(tc.made) == 1 && tc.made[0] == "?" && len(made) == 1 {
					made = tc.made // one of them, whichever the order puts here
				}
				if !slices.Equal(made, tc.made) {
					t.Errorf("items made through %q, want %q", made, tc.made)
				}
				got.Items = nil
				if d := cmp.Diff(tc.pages, *got); d != "" {
					t.Errorf("pagination (-want +got):\n%s", d)
				}
			})
		}
		// The two pages of one hold both sandboxes.
		var ids []string
		for page := 1; page <= 2; page++ {
			p, err := c.ListOpenSandboxInfo(ctx, OpenSandboxListOptions{Metadata: reads, Page: page, PageSize: 1})
			if err != nil || len(p.Items) != 1 {
				t.Fatalf("page %d: %+v, %v", page, p, err)
			}
			ids = append(ids, p.Items[0].ID)
		}
		slices.Sort(ids)
		want := []string{e2b.ID, osb.ID}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("pages of one hold %v, want %v", ids, want)
		}
		if _, err := c.ListOpenSandboxInfo(ctx, OpenSandboxListOptions{PageSize: 100000}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("a page size the server refuses: %v, want ErrInvalidArgument", err)
		}
	})

	t.Run("endpoint", func(t *testing.T) {
		host := strings.TrimPrefix(cp.URL, "http://")
		// execd's header carries the sandbox's envd token, when it has one.
		execd := func(sbx *Sandbox) map[string]string {
			if sbx.EnvdAccessToken == "" {
				return map[string]string{}
			}
			return map[string]string{"X-EXECD-ACCESS-TOKEN": sbx.EnvdAccessToken}
		}
		if osb.EnvdAccessToken == "" {
			t.Error("a sandbox made through OpenSandbox's API has no envd token")
		}
		for _, tc := range []struct {
			name    string
			sbx     *Sandbox
			port    int
			headers map[string]string
		}{
			{"execd of a sandbox made through OpenSandbox's API", osb, 44772, execd(osb)},
			{"execd of a sandbox made through E2B's", e2b, 44772, execd(e2b)},
			{"another port", osb, 8080, map[string]string{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := c.GetOpenSandboxEndpoint(ctx, tc.sbx.ID, tc.port)
				if err != nil {
					t.Fatal(err)
				}
				want := &OpenSandboxEndpoint{Endpoint: fmt.Sprintf("%s/v1/sandboxes/%s/proxy/%d", host, tc.sbx.ID, tc.port), Headers: tc.headers, Origin: "template"}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("(-want +got):\n%s", d)
				}
			})
		}
		// execd answers at the endpoint, with its headers.
		ep, err := c.GetOpenSandboxEndpoint(ctx, osb.ID, 44772)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name    string
			headers map[string]string
			status  int
		}{{"with the endpoint's headers", ep.Headers, http.StatusOK}, {"without them", nil, http.StatusNotFound}} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ep.Endpoint+"/ping", nil)
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("GET http://%s/ping %s: %d, want %d", ep.Endpoint, tc.name, resp.StatusCode, tc.status)
			}
		}
		for _, tc := range []struct {
			name string
			id   string
			port int
			kind error
		}{{"no such sandbox", "no-such-sandbox", 44772, ErrNotFound}, {"port 0", osb.ID, 0, ErrInvalidArgument}, {"port 65536", osb.ID, 65536, ErrInvalidArgument}} {
			if _, err := c.GetOpenSandboxEndpoint(ctx, tc.id, tc.port); !errors.Is(err, tc.kind) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.kind)
			}
		}
	})
}
