package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/builder"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// newTestServer serves the API over a real store; its runtime never
// creates a sandbox in these tests (the JS suite in test/e2bjs does).
func newTestServer(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	return newTestServerWith(t, Options{})
}

// newTestServerWith is newTestServer with opts (its manager and domain are
// filled in), a template builder, and, in its template store, a stand-in
// for each of templates: one empty layer, enough to be found but not to run.
func newTestServerWith(t *testing.T, opts Options, templates ...string) (*httptest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "hutch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, _, err := st.CreateKey(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	tpl := template.Open(filepath.Join(dir, "templates"))
	for _, name := range templates {
		if _, err := tpl.Scratch(name, template.Config{DefaultUser: "user"}); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := native.New(native.Options{DataDir: dir, Templates: tpl})
	if err != nil {
		t.Fatal(err)
	}
	vols, err := volume.New(st, dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := sandbox.New(sandbox.Options{Runtime: rt, Store: st, Templates: tpl, DataDir: dir, Volumes: vols})
	if err != nil {
		t.Fatal(err)
	}
	opts.Manager, opts.Domain, opts.Volumes = mgr, "sandbox.test", vols
	opts.Templates = tpl
	opts.Builder = builder.New(builder.Options{Store: tpl, Manager: mgr})
	t.Cleanup(opts.Builder.Close)
	srv := httptest.NewServer(New(opts))
	t.Cleanup(srv.Close)
	return srv, key
}

func TestAPIErrors(t *testing.T) {
	srv, key := newTestServerWith(t, Options{}, "base")
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		host                     string
		wantStatus               int
		wantBody                 string
	}{
		{name: "health needs no key", method: "GET", path: "/health", wantStatus: 200},
		{name: "missing key", method: "GET", path: "/v2/sandboxes", wantStatus: 401, wantBody: `"code":401`},
		{name: "wrong key", method: "GET", path: "/v2/sandboxes", header: map[string]string{"X-API-KEY": "e2b_" + strings.Repeat("0", 40)}, wantStatus: 401, wantBody: "invalid API key"},
		{name: "empty list", method: "GET", path: "/v2/sandboxes", wantStatus: 200, wantBody: "[]"},
		{name: "bad next token", method: "GET", path: "/v2/sandboxes?nextToken=bm90LWEtdG9rZW4", wantStatus: 400, wantBody: `"code":400`},
		{name: "bad metadata filter", method: "GET", path: "/v2/sandboxes?metadata=novalue", wantStatus: 400, wantBody: `"code":400`},
		{name: "unknown sandbox", method: "GET", path: "/sandboxes/inope", wantStatus: 404, wantBody: `"code":404`},
		{name: "kill unknown", method: "DELETE", path: "/sandboxes/inope", wantStatus: 404, wantBody: `"code":404`},
		{name: "timeout unknown", method: "POST", path: "/sandboxes/inope/timeout", body: `{"timeout":30}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "timeout malformed", method: "POST", path: "/sandboxes/inope/timeout", body: `{"timeout":"soon"}`, wantStatus: 400, wantBody: "timeout"},
		{name: "create malformed", method: "POST", path: "/v2/sandboxes", body: `{"templateID":`, wantStatus: 400, wantBody: `"code":400`},
		{name: "create huge", method: "POST", path: "/v2/sandboxes", body: `{"metadata":{"k":"` + strings.Repeat("x", 2<<20) + `"}}`, wantStatus: 413, wantBody: `"code":413`},
		{name: "create unknown template", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"nope"}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "pause of an unknown sandbox", method: "POST", path: "/sandboxes/inope/pause", body: `{}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "fork of an unknown sandbox", method: "POST", path: "/sandboxes/inope/fork", body: `{}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "fork of none", method: "POST", path: "/sandboxes/inope/fork", body: `{"count":0}`, wantStatus: 400, wantBody: "fork count 0"},
		{name: "fork of too many", method: "POST", path: "/sandboxes/inope/fork", body: `{"count":101}`, wantStatus: 400, wantBody: "fork count 101"},
		{name: "snapshot of an unknown sandbox", method: "POST", path: "/sandboxes/inope/snapshots", body: `{}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "snapshot with a bad name", method: "POST", path: "/sandboxes/inope/snapshots", body: `{"name":"../x"}`, wantStatus: 400, wantBody: "snapshot name"},
		{name: "snapshot with a negative retention", method: "POST", path: "/sandboxes/inope/snapshots", body: `{"ttl":-1}`, wantStatus: 400, wantBody: "ttl"},
		{name: "snapshots with a bad limit", method: "GET", path: "/snapshots?limit=many", wantStatus: 400, wantBody: "limit"},
		{name: "snapshots with a bad token", method: "GET", path: "/snapshots?nextToken=!!!", wantStatus: 400, wantBody: "next token"},
		{name: "resume of an unknown sandbox", method: "POST", path: "/sandboxes/inope/resume", body: `{}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "metrics of an unknown sandbox", method: "GET", path: "/sandboxes/inope/metrics", wantStatus: 404, wantBody: `"code":404`},
		{name: "metrics with a bad start", method: "GET", path: "/sandboxes/inope/metrics?start=yesterday", wantStatus: 400, wantBody: "start must be a Unix time"},
		{name: "metrics ending before they start", method: "GET", path: "/sandboxes/inope/metrics?start=200&end=100", wantStatus: 400, wantBody: "end is before start"},
		{name: "batch metrics of unknown sandboxes", method: "GET", path: "/sandboxes/metrics?sandbox_ids=inope,inope2", wantStatus: 200, wantBody: `{"sandboxes":{}}`},
		{name: "batch metrics without ids", method: "GET", path: "/sandboxes/metrics", wantStatus: 400, wantBody: "sandbox_ids"},
		{name: "create with an MCP server missing a field", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"base","mcp":{"airtable":{"nodeenv":"x"}}}`, wantStatus: 400, wantBody: `Failed to start MCP gateway: server \"airtable\": missing required field(s) \"airtableApiKey\"`},
		{name: "create with an unknown MCP server", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"base","mcp":{"nope":{}}}`, wantStatus: 400, wantBody: `not in the catalog`},
		{name: "create with an MCP config not an object", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"base","mcp":["memory"]}`, wantStatus: 400, wantBody: `Failed to start MCP gateway`},
		{name: "create with a bad egress rule", method: "POST", path: "/v2/sandboxes", body: `{"network":{"allowOut":["not a rule"]}}`, wantStatus: 400, wantBody: "network: rule"},
		{name: "v1 create of a private sandbox without secure", method: "POST", path: "/sandboxes", body: `{"templateID":"base","network":{"allowPublicTraffic":false}}`, wantStatus: 400, wantBody: "enable secure envd access via 'secure' flag"},
		{name: "v1 create of a private sandbox with secure false", method: "POST", path: "/sandboxes", body: `{"templateID":"base","secure":false,"network":{"allowPublicTraffic":false}}`, wantStatus: 400, wantBody: "enable secure envd access via 'secure' flag"},
		{name: "create with an egress proxy", method: "POST", path: "/v2/sandboxes", body: `{"network":{"egressProxy":{"address":"p:1080"}}}`, wantStatus: 501, wantBody: `"code":501`},
		{name: "create with request rules", method: "POST", path: "/v2/sandboxes", body: `{"network":{"rules":{"api.test":[{"transform":{"headers":{"A":"b"}}}]}}}`, wantStatus: 501, wantBody: "per-host request rules (network.rules) is not supported by Hutch yet"},
		{name: "create with TLS ports", method: "POST", path: "/v2/sandboxes", body: `{"network":{"httpsPorts":[8443]}}`, wantStatus: 501, wantBody: "network.httpsPorts"},
		{name: "create with empty rules goes on", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"nope","network":{"rules":{},"httpsPorts":[]}}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "network update with request rules", method: "PUT", path: "/sandboxes/inope/network", body: `{"rules":{"api.test":[]}}`, wantStatus: 501, wantBody: "network.rules"},
		{name: "network update past the create's bound", method: "PUT", path: "/sandboxes/inope/network", body: `{"allowOut":[` + strings.Repeat(`"192.0.2.1",`, 1000) + `"192.0.2.1"]}`, wantStatus: 400, wantBody: "allowOut: more than 1000 entries"},
		{name: "network update with an empty rule", method: "PUT", path: "/sandboxes/inope/network", body: `{"denyOut":[" "]}`, wantStatus: 400, wantBody: "denyOut[0]: must not be empty"},
		{name: "create with a masked host that is no host", method: "POST", path: "/v2/sandboxes", body: `{"network":{"maskRequestHost":"a\r\nX: y"}}`, wantStatus: 400, wantBody: "network.maskRequestHost"},
		{name: "create with an empty masked host", method: "POST", path: "/v2/sandboxes", body: `{"network":{"maskRequestHost":""}}`, wantStatus: 400, wantBody: "network.maskRequestHost"},
		{name: "create with a masked host and its port goes on", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"nope","network":{"maskRequestHost":"${PORT}-app.example.com:8080"}}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "network update of an unknown sandbox", method: "PUT", path: "/sandboxes/inope/network", body: `{"allowOut":["1.1.1.1"]}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "network update with a bad rule", method: "PUT", path: "/sandboxes/inope/network", body: `{"denyOut":["::/0"]}`, wantStatus: 400, wantBody: "IPv4"},
		{name: "network update malformed", method: "PUT", path: "/sandboxes/inope/network", body: `{"allowOut":"x"}`, wantStatus: 400, wantBody: `"code":400`},
		{name: "logs of an unknown sandbox", method: "GET", path: "/v2/sandboxes/inope/logs", wantStatus: 404, wantBody: `"code":404`},
		{name: "legacy logs of an unknown sandbox", method: "GET", path: "/sandboxes/inope/logs", wantStatus: 404, wantBody: `"code":404`},
		{name: "logs with a bad cursor", method: "GET", path: "/v2/sandboxes/inope/logs?cursor=soon", wantStatus: 400, wantBody: "cursor must be a Unix time in milliseconds"},
		{name: "logs with a bad direction", method: "GET", path: "/v2/sandboxes/inope/logs?direction=up", wantStatus: 400, wantBody: "direction must be forward or backward"},
		{name: "logs with a bad limit", method: "GET", path: "/v2/sandboxes/inope/logs?limit=-1", wantStatus: 400, wantBody: "limit must be"},
		{name: "v2 create with autoPause of an unknown template goes on", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"nope","autoPause":true,"autoResume":{"enabled":true}}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "v2 create with autoPauseMemory alone", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"base","autoPauseMemory":true}`, wantStatus: 400, wantBody: "autoPauseMemory can only be set with autoPause"},
		{name: "v2 create with autoResume alone", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"base","autoResume":{"enabled":true}}`, wantStatus: 400, wantBody: "autoResume needs autoPause"},
		{name: "v2 create with autoResume and a pause without memory", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}`, wantStatus: 400, wantBody: "keeps memory"},
		{name: "create with autoPause false goes on", method: "POST", path: "/v2/sandboxes", body: `{"templateID":"nope","autoPause":false}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "unknown endpoint", method: "GET", path: "/nope", wantStatus: 404, wantBody: `"code":404`},
		{name: "template build without a name", method: "POST", path: "/v3/templates", body: `{}`, wantStatus: 400, wantBody: "name is required"},
		{name: "template build of a bad name", method: "POST", path: "/v3/templates", body: `{"name":"Mine"}`, wantStatus: 400, wantBody: `template name \"Mine\"`},
		{name: "template build start of no build", method: "POST", path: "/v2/templates/mine/builds/00000000-0000-4000-8000-000000000000", body: `{"fromTemplate":"base"}`, wantStatus: 404, wantBody: `"code":404`},
		{name: "template build status of no build", method: "GET", path: "/templates/mine/builds/00000000-0000-4000-8000-000000000000/status", wantStatus: 404, wantBody: `"code":404`},
		{name: "template build files with a bad hash", method: "GET", path: "/templates/mine/files/abc", wantStatus: 400, wantBody: "hash must be 64 lowercase hex digits"},
		{name: "template upload without a signature", method: "PUT", path: "/templates/files/" + strings.Repeat("a", 64), body: "x", wantStatus: 403, wantBody: "upload link is not valid"},
		{name: "template list", method: "GET", path: "/templates", wantStatus: 200, wantBody: `"templateID":"base"`},
		{name: "template list v2", method: "GET", path: "/v2/templates", wantStatus: 200, wantBody: `"templateID":"base"`},
		{name: "template delete of none", method: "DELETE", path: "/templates/mine", wantStatus: 404, wantBody: `"code":404`},
		{name: "template delete of base", method: "DELETE", path: "/templates/base", wantStatus: 400, wantBody: "cannot be changed or removed"},
		{name: "template tags without tags", method: "POST", path: "/templates/tags", body: `{"target":"base"}`, wantStatus: 400, wantBody: "tags must not be empty"},
		{name: "template tags of none", method: "GET", path: "/templates/mine/tags", wantStatus: 404, wantBody: `"code":404`},
		{name: "template build logs (not served)", method: "GET", path: "/templates/mine/builds/b1/logs", wantStatus: 501, wantBody: "this call of the template API is not supported"},
		{name: "template sub-resource other than tags", method: "GET", path: "/templates/base/builds", wantStatus: 404, wantBody: "no such endpoint"},
		{name: "template legacy build request (not served)", method: "POST", path: "/templates", body: `{"dockerfile":"FROM base"}`, wantStatus: 501, wantBody: "this call of the template API is not supported"},
		{name: "template v2 build request (not served)", method: "POST", path: "/v2/templates", body: `{"alias":"mine"}`, wantStatus: 501, wantBody: "this call of the template API is not supported"},
		{name: "template v3 list (not served)", method: "GET", path: "/v3/templates", wantStatus: 501, wantBody: "this call of the template API is not supported"},
		{name: "template update (not served)", method: "PATCH", path: "/templates/base", body: `{"public":true}`, wantStatus: 501, wantBody: "this call of the template API is not supported"},
		{name: "secrets list", method: "GET", path: "/secrets", wantStatus: 501, wantBody: "the secrets API is not supported by Hutch yet"},
		{name: "secret create", method: "POST", path: "/secrets", body: `{}`, wantStatus: 501, wantBody: "the secrets API is not supported"},
		{name: "secret delete", method: "DELETE", path: "/secrets/s1", wantStatus: 501, wantBody: "the secrets API is not supported"},
		{name: "volumes list", method: "GET", path: "/volumes", wantStatus: 200, wantBody: "[]"},
		{name: "volume delete", method: "DELETE", path: "/volumes/v1", wantStatus: 404, wantBody: "volume v1 not found"},
		{name: "volume create, bad name", method: "POST", path: "/volumes", body: `{"name":"../x"}`, wantStatus: 400, wantBody: "invalid volume name"},
		{name: "volume content with a wrong token", method: "GET", path: "/volumecontent/v1/dir?path=/", header: map[string]string{"Authorization": "Bearer vol-token"}, wantStatus: 401, wantBody: "invalid volume token"},
		{name: "missing key for the template API", method: "POST", path: "/v3/templates", body: `{}`, wantStatus: 401, wantBody: `"code":401`},
		{name: "envd of an unknown sandbox", method: "GET", path: "/health", header: map[string]string{"E2b-Sandbox-Id": "inope", "E2b-Sandbox-Port": "49983"}, wantStatus: 502, wantBody: `"sandboxId":"inope"`},
		{name: "host-routed unknown sandbox", method: "GET", path: "/health", host: "49983-inope.sandbox.test", wantStatus: 502, wantBody: `"code":502`},
		{name: "signed URL of no sandbox", method: "GET", path: "/files?path=x&signature=v1_AAAA", wantStatus: 401, wantBody: `{"code":401,"message":"invalid signature"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if tc.header == nil && !strings.HasPrefix(tc.name, "missing") {
				req.Header.Set("X-API-KEY", key)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			if tc.host != "" {
				req.Host = tc.host
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || !strings.Contains(string(body), tc.wantBody) {
				t.Fatalf("got %d %s, want %d containing %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			// Every error is E2B's JSON with code == the HTTP status.
			if resp.StatusCode >= 400 {
				var e struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(body, &e); err != nil || e.Code != resp.StatusCode || e.Message == "" {
					t.Errorf("error body %s: want JSON with code %d and a message", body, resp.StatusCode)
				}
				if strings.Contains(string(body), "runtime error") || strings.Contains(string(body), "goroutine") {
					t.Errorf("error body leaks internals: %s", body)
				}
			}
		})
	}
}

// TestTemplateAlias: GET /templates/aliases/{alias}, which the SDKs'
// Template.exists(name) calls, answers as E2B's API does: 200 with the
// template's id when a create could use that name, 404 when it could not.
func TestTemplateAlias(t *testing.T) {
	srv, key := newTestServerWith(t, Options{}, "base")
	tests := []struct {
		alias      string
		wantStatus int
		wantBody   string
	}{
		{"base", 200, `{"public":true,"templateID":"base"}`},
		{"no-such-template", 404, `{"code":404,"message":"template 'no-such-template' not found"}`},
		// No template can be called this: still "not found", as create says.
		{"Base:v2", 404, `{"code":404,"message":"template 'Base:v2' not found"}`},
	}
	for _, tc := range tests {
		t.Run(tc.alias, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+"/templates/aliases/"+tc.alias, nil)
			req.Header.Set("X-API-KEY", key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || strings.TrimSpace(string(body)) != tc.wantBody {
				t.Errorf("got %d %s, want %d %s", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
		})
	}
	resp, err := http.Get(srv.URL + "/templates/aliases/base")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("without a key: %d, want 401", resp.StatusCode)
	}
}
