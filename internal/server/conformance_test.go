package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/envdtest"
	"github.com/hutch-sandbox/hutch/internal/server/servertest"
)

// The test binary is also the envd of the sandboxes TestResponsesMatchDocument
// makes.
func TestMain(m *testing.M) { envdtest.Main(m) }

// TestResponsesMatchDocument drives a real hutch serve (servertest: a
// real sandbox, as root) through every route of its API, the way the SDKs
// do, and checks each request and answer against the OpenAPI document
// the server itself serves: status documented, body valid against its
// schema (response schemas are closed, so a field the handlers send and
// the document lacks fails too), request valid against the document (a
// document stricter than the SDKs fails).
func TestResponsesMatchDocument(t *testing.T) {
	cp := servertest.Start(t, 1)
	key := cp.Keys[0]

	v := servedValidator(t, cp)

	// call sends a request and checks it and its answer against the
	// document; it returns the answer's body. A request sent without a
	// key, or made to be refused, is not itself checked.
	call := func(method, path, body string, how request, want int) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, cp.URL+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", contentType(body))
		}
		if how != noKey && how != public {
			req.Header.Set("X-API-KEY", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s %s: %d %s, want %d", method, path, resp.StatusCode, got, want)
		}
		// The request again, its body readable, for the validator.
		req, _ = http.NewRequest(method, cp.URL+path, strings.NewReader(body))
		req.Header = resp.Request.Header.Clone()
		resp.Body = io.NopCloser(bytes.NewReader(got))
		validate := v.ValidateHttpRequestResponse
		if how != valid && how != public {
			validate = v.ValidateHttpResponse
		}
		if _, errs := validate(req, resp); len(errs) > 0 {
			t.Errorf("%s %s (%d %s) does not match the document:", method, path, resp.StatusCode, bytes.TrimSpace(got))
			for _, e := range errs {
				t.Errorf("  %v", describe(e.Message, e.Reason, e.SchemaValidationErrors))
			}
		}
		return got
	}
	idOf := func(created []byte) string {
		t.Helper()
		var sbx struct {
			SandboxID string `json:"sandboxID"`
		}
		if err := json.Unmarshal(created, &sbx); err != nil || sbx.SandboxID == "" {
			t.Fatalf("create answered %s", created)
		}
		return sbx.SandboxID
	}

	call("GET", "/health", "", noKey, 200)
	call("GET", "/openapi.json", "", noKey, 200)
	// Metrics are served on the API's listener only with --metrics-api
	// (test/metrics scrapes them there).
	call("GET", "/metrics", "", noKey, 401)
	call("GET", "/metrics", "", valid, 404)
	call("GET", "/v2/sandboxes", "", noKey, 401)

	// A v2 sandbox closed to public traffic (a trafficAccessToken, no
	// internet), and a v1 one as the Python SDK makes it.
	id := idOf(call("POST", "/v2/sandboxes", `{"templateID":"base","timeout":120,"metadata":{"suite":"openapi"},"envVars":{"GREETING":"hi"},"allow_internet_access":false,"network":{"allowPublicTraffic":false}}`, valid, 201))
	id1 := idOf(call("POST", "/sandboxes", `{"templateID":"base","timeout":60,"metadata":{},"envVars":{},"secure":true,"allow_internet_access":true}`, valid, 201))
	defer call("DELETE", "/sandboxes/"+id1, "", valid, 204)

	call("GET", "/sandboxes/"+id, "", valid, 200)
	call("GET", "/v2/sandboxes?state=running&limit=1&metadata="+"suite%3Dopenapi", "", valid, 200)
	call("GET", "/v2/sandboxes?state=running,paused&order=asc", "", valid, 200)
	call("GET", "/sandboxes", "", valid, 200)
	call("POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":300}`, valid, 200)
	call("POST", "/sandboxes/"+id+"/connect", `{"timeout":300}`, valid, 200)
	call("POST", "/sandboxes/"+id+"/timeout", `{"timeout":200}`, valid, 204)
	call("POST", "/sandboxes/"+id+"/refreshes", `{"duration":60}`, valid, 204)
	call("GET", "/sandboxes/"+id+"/metrics", "", valid, 200)
	call("GET", "/sandboxes/metrics?sandbox_ids="+id+",nope", "", valid, 200)
	call("PUT", "/sandboxes/"+id+"/network", `{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"]}`, valid, 204)
	call("GET", "/sandboxes/"+id, "", valid, 200)
	call("GET", "/v2/sandboxes/"+id+"/logs?limit=10&direction=backward", "", valid, 200)
	call("GET", "/sandboxes/"+id+"/logs?start=0", "", valid, 200)
	call("GET", "/templates/aliases/base", "", valid, 200)
	call("GET", "/templates/aliases/no-such-template", "", valid, 404)
	testTemplateAPI(t, call)

	call("POST", "/v2/sandboxes", `{"templateID":"no-such-template"}`, valid, 404)
	fsPaused := idOf(call("POST", "/v2/sandboxes", `{"templateID":"base","autoPause":true,"autoPauseMemory":false}`, valid, 201))
	call("DELETE", "/sandboxes/"+fsPaused, "", valid, 204)
	call("POST", "/v2/sandboxes", `{"templateID":"base","autoResume":{"enabled":true}}`, valid, 400)
	call("POST", "/sandboxes/"+id+"/timeout", `{"timeout":-1}`, invalid, 400)
	call("GET", "/sandboxes/nope", "", valid, 404)
	call("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`, valid, 204)
	call("POST", "/sandboxes/"+id+"/pause", `{"memory":false}`, valid, 409)
	call("POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":120}`, valid, 201)
	call("POST", "/sandboxes/"+id+"/pause", `{}`, valid, 204)
	call("POST", "/sandboxes/"+id+"/pause", ``, valid, 409)
	call("GET", "/v2/sandboxes?state=paused", "", valid, 200)
	call("POST", "/v2/sandboxes/"+id+"/connect", `{"memory":false}`, valid, 201)
	call("POST", "/sandboxes/"+id+"/connect", `{}`, valid, 200)
	call("POST", "/sandboxes/"+id+"/resume", `{}`, valid, 409)
	call("POST", "/sandboxes/"+id+"/pause", `{}`, valid, 204)
	call("POST", "/sandboxes/"+id+"/resume", `{"timeout":60}`, valid, 201)
	var snap struct{ SnapshotID string }
	json.Unmarshal(call("POST", "/sandboxes/"+id+"/snapshots", `{}`, valid, 201), &snap)
	call("POST", "/sandboxes/"+id+"/snapshots", `{"name":"Bad Name"}`, valid, 400)
	call("GET", "/snapshots", "", valid, 200)
	call("GET", "/snapshots?sandboxID="+id+"&limit=1", "", valid, 200)
	call("GET", "/snapshots?limit=0", "", invalid, 400)
	call("DELETE", "/templates/"+snap.SnapshotID, "", valid, 204)
	call("POST", "/sandboxes/nope/snapshots", `{}`, valid, 404)
	var forks []struct{ Sandbox struct{ SandboxID string } }
	json.Unmarshal(call("POST", "/sandboxes/"+id+"/fork", `{"count":1,"timeout":60}`, valid, 201), &forks)
	for _, f := range forks {
		call("DELETE", "/sandboxes/"+f.Sandbox.SandboxID, "", valid, 204)
	}
	call("POST", "/sandboxes/"+id+"/fork", `{"count":0}`, invalid, 400)
	call("POST", "/sandboxes/nope/fork", `{}`, valid, 404)
	// E2B's template calls Hutch does not serve: the exact paths' other
	// methods, and the subtrees. A subtree's {path} is one segment to
	// OpenAPI: deeper paths come with their slashes encoded, and answer
	// the same.
	call("POST", "/templates", `{"dockerfile":"FROM base"}`, valid, 501)
	call("POST", "/v2/templates", `{"alias":"mine"}`, valid, 501)
	call("GET", "/v3/templates", "", valid, 501)
	call("PATCH", "/templates/mine", `{"public":true}`, valid, 501)
	call("PATCH", "/v2/templates/mine", `{"public":true}`, valid, 501)
	call("POST", "/templates/mine%2Fbuilds%2Fb1", "", valid, 501)
	call("GET", "/v3/templates/mine%2Fx", "", valid, 501)
	call("DELETE", "/volumes/v1", "", valid, 404)
	call("GET", "/volumecontent/v1/dir?path=/", "", noKey, 401)

	call("DELETE", "/sandboxes/"+id, "", valid, 204)
	call("DELETE", "/sandboxes/"+id, "", valid, 404)
}

// request says how call sends a request and what it checks of it.
type request int

const (
	valid   request = iota // with the key; the request is checked too
	noKey                  // without a key; only the answer is checked
	invalid                // with the key, made to be refused; only the answer is checked
	public                 // without a key, to a route that needs none; the request is checked too
)

// caller is TestResponsesMatchDocument's call.
type caller func(method, path, body string, how request, want int) []byte

// contentType is what call sends a body as: JSON, or bytes.
func contentType(body string) string {
	if strings.HasPrefix(body, "{") || strings.HasPrefix(body, "[") {
		return "application/json"
	}
	return "application/octet-stream"
}

// testTemplateAPI drives the template API as the SDKs' Template.build
// does, against the document: a build of a new name from base with no
// steps (its layers are base's, so the real template store gains only
// the name and a build record, removed at the end), its file upload
// link, its status as it waits and when ready, its tags, the listings,
// and its removal; and the errors of each call.
func testTemplateAPI(t *testing.T, call caller) {
	t.Helper()
	name := fmt.Sprintf("openapi-%d", time.Now().UnixNano())
	var sandboxID string
	removed := false
	t.Cleanup(func() { // after a failure: the store is the host's
		if sandboxID != "" {
			call("DELETE", "/sandboxes/"+sandboxID, "", invalid, 204)
		}
		if !removed {
			call("DELETE", "/templates/"+name, "", invalid, 204)
		}
	})

	var build struct{ TemplateID, BuildID string }
	if err := json.Unmarshal(call("POST", "/v3/templates", `{"name":"`+name+`","tags":["v1"],"cpuCount":1,"memoryMB":256}`, valid, 202), &build); err != nil || build.TemplateID != name || build.BuildID == "" {
		t.Fatalf("request build: %+v %v", build, err)
	}
	status := func(query string) (st struct {
		Status     string
		LogEntries []struct{ Level, Message, Step string }
	}) {
		t.Helper()
		json.Unmarshal(call("GET", "/templates/"+name+"/builds/"+build.BuildID+"/status"+query, "", valid, 200), &st)
		return st
	}
	if st := status("?logsOffset=0&limit=10&level=info"); st.Status != "waiting" {
		t.Errorf("a requested build is %q, want waiting", st.Status)
	}

	// A COPY step's files: not here, so a signed link to upload them to,
	// which needs no key. What is sent to it is not an archive: refused,
	// and nothing is kept.
	hash := fmt.Sprintf("%064x", time.Now().UnixNano())
	var link struct {
		Present bool
		URL     string
	}
	json.Unmarshal(call("GET", "/templates/"+name+"/files/"+hash, "", valid, 201), &link)
	u, err := url.Parse(link.URL)
	if link.Present || err != nil || u.Path != "/templates/files/"+hash || u.Query().Get("signature") == "" {
		t.Fatalf("upload link: %+v %v", link, err)
	}
	call("PUT", u.RequestURI(), "not a tar archive", public, 400)
	call("PUT", "/templates/files/"+hash+"?key=k&expires=4102444800&signature=00", "x", public, 403)
	call("GET", "/templates/"+name+"/files/abc", "", valid, 400)

	call("POST", "/v2/templates/"+name+"/builds/"+build.BuildID, `{"fromImage":"docker.io/library/alpine","fromTemplate":"base"}`, valid, 400)
	call("POST", "/v2/templates/"+name+"/builds/"+build.BuildID, `{"fromTemplate":"base","steps":[{"type":"MAGIC","args":[]}]}`, valid, 400)
	call("POST", "/v2/templates/base/builds/"+build.BuildID, `{"fromTemplate":"base"}`, valid, 404)
	// A body past the bound to a build that does not exist: 404, the
	// body never read (review 27 round 2, G4); to a waiting build: 413.
	big := `{"fromTemplate":"base","steps":[{"type":"RUN","args":["` + strings.Repeat("x", 5<<20) + `"]}]}`
	call("POST", "/v2/templates/"+name+"/builds/no-such-build", big, valid, 404)
	call("POST", "/v2/templates/"+name+"/builds/"+build.BuildID, big, valid, 413)
	call("POST", "/v2/templates/"+name+"/builds/"+build.BuildID, `{"fromTemplate":"base","force":false,"steps":[]}`, valid, 202)
	call("POST", "/v2/templates/"+name+"/builds/"+build.BuildID, `{"fromTemplate":"base"}`, valid, 400)
	deadline := time.Now().Add(time.Minute)
	for st := status(""); st.Status != "ready"; st = status("") {
		if st.Status == "error" || time.Now().After(deadline) {
			t.Fatalf("build: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := status("?logsOffset=0"); len(st.LogEntries) == 0 {
		t.Errorf("a built template's log is empty")
	}
	status("?logsOffset=1&limit=1&level=error")
	call("GET", "/templates/"+name+"/builds/"+build.BuildID+"/status?logsOffset=soon", "", invalid, 400)
	call("GET", "/templates/"+name+"/builds/00000000-0000-4000-8000-000000000000/status", "", valid, 404)
	call("POST", "/v3/templates", `{"tags":["v1"]}`, valid, 400)
	call("POST", "/v3/templates", `{"name":"Not A Name"}`, valid, 400)

	// Its tags, and tags of base; a sub-resource other than tags is none.
	call("GET", "/templates/"+name+"/tags", "", valid, 200)
	call("GET", "/templates/base/tags", "", valid, 200)
	call("GET", "/templates/no-such-template/tags", "", valid, 404)
	call("GET", "/templates/base/builds", "", invalid, 404)
	call("POST", "/templates/tags", `{"target":"`+name+`:v1","tags":["extra"]}`, valid, 201)
	call("POST", "/templates/tags", `{"target":"`+name+`","tags":[]}`, invalid, 400)
	call("POST", "/templates/tags", `{"target":"no-such-template","tags":["x"]}`, valid, 404)
	call("DELETE", "/templates/tags", `{"name":"`+name+`","tags":["extra"]}`, valid, 204)
	call("DELETE", "/templates/tags", `{"name":"`+name+`","tags":["extra"]}`, valid, 404)

	call("GET", "/templates", "", valid, 200)
	call("GET", "/v2/templates", "", valid, 200)
	call("GET", "/templates/base", "", valid, 200)
	call("GET", "/templates/"+name, "", valid, 200)
	call("GET", "/templates/no-such-template", "", valid, 404)

	// Removal: refused while a sandbox runs it, and for base.
	var sbx struct{ SandboxID string }
	json.Unmarshal(call("POST", "/v2/sandboxes", `{"templateID":"`+name+`","timeout":60}`, valid, 201), &sbx)
	sandboxID = sbx.SandboxID
	call("DELETE", "/templates/"+name, "", valid, 409)
	call("DELETE", "/sandboxes/"+sandboxID, "", valid, 204)
	sandboxID = ""
	call("DELETE", "/templates/base", "", valid, 400)
	call("DELETE", "/templates/"+name, "", valid, 204)
	removed = true
	call("DELETE", "/templates/"+name, "", valid, 404)
}

// describe makes one error of a validation error and its schema failures.
func describe(message, reason string, failures any) error {
	b, _ := json.Marshal(failures)
	if string(b) == "null" {
		return fmt.Errorf("%s: %s", message, reason)
	}
	return fmt.Errorf("%s: %s %s", message, reason, b)
}

// TestSignedURLBounds: a signed /files URL names no sandbox, so the router
// tries the token of every running one; what it hashes for each must stay
// small whatever the client sends (review 7: a 1 MB path cost 0.3 s of
// CPU with 78 sandboxes). A path longer than PATH_MAX is refused before
// any token is tried, even when it is signed right.
func TestSignedURLBounds(t *testing.T) {
	cp := servertest.Start(t, 1)
	req, _ := http.NewRequest("POST", cp.URL+"/v2/sandboxes", strings.NewReader(`{"templateID":"base"}`))
	req.Header.Set("X-API-KEY", cp.Keys[0])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || sb.EnvdAccessToken == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, sb)
	}
	get := func(path string) (int, string) {
		t.Helper()
		q := url.Values{"path": {path}, "signature": {envdapi.SignExpiration(path, envdapi.OpRead, "", sb.EnvdAccessToken, "")}}
		resp, err := http.Get(cp.URL + "/files?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// Signed right and short: it reaches the sandbox's envd.
	if code, body := get("/etc/hostname"); code != http.StatusOK {
		t.Errorf("a signed URL: %d %s, want 200", code, body)
	}
	if code, body := get("/" + strings.Repeat("a", 5000)); code != http.StatusUnauthorized || !strings.Contains(body, "invalid signature") {
		t.Errorf("a signed URL with a 5,000-byte path: %d %s, want 401 invalid signature", code, body)
	}
}

// servedValidator checks requests and answers against the OpenAPI
// document cp serves.
func servedValidator(t *testing.T, cp *servertest.ControlPlane) validator.Validator {
	t.Helper()
	resp, err := http.Get(cp.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return v
}
