package opensandbox

import (
	"bytes"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// osbSandbox is a sandbox made through OpenSandbox's API by the test, with
// its execd endpoint.
type osbSandbox struct {
	id       string
	endpoint string            // host:port/path of execd
	headers  map[string]string // execd's headers (X-EXECD-ACCESS-TOKEN)
}

// testErrors sends bad requests to the lifecycle API and to execd behind
// it, as raw HTTP (what OpenSandbox's spec describes), and checks the
// status and OpenSandbox's error shape {code: string, message: string}:
// unknown ids, a wrong or missing key, another key's sandbox, an image that
// cannot be resolved, invalid resource strings, a timeout below the
// minimum, and path traversal in file calls and in the proxy's path.
func (s *suite) testErrors(t *testing.T) {
	a := s.osbCreate(t, map[string]any{"image": map[string]any{"uri": template}})
	b := s.osbCreate(t, map[string]any{"image": map[string]any{"uri": template}})
	bMark := unique("b-mark")
	s.upload(t, b, "/tmp/b-mark", bMark+"\n")
	other := s.otherKey(t)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	create := func(fields map[string]any) string {
		body := map[string]any{"image": map[string]any{"uri": template}, "entrypoint": []string{"tail", "-f", "/dev/null"},
			"timeout": 300, "resourceLimits": map[string]string{"cpu": "1", "memory": "1Gi"}}
		for k, v := range fields {
			body[k] = v
		}
		out, _ := json.Marshal(body)
		return string(out)
	}
	execd := func(sb osbSandbox, rest string) string { return "http://" + sb.endpoint + rest }
	token := func(sb osbSandbox) string { return sb.headers["X-EXECD-ACCESS-TOKEN"] }
	const unknown = "osbtest-no-such-sandbox"
	key := hutchtest.TestKey

	cases := []struct {
		name        string
		method, url string
		key, token  string
		body        string
		status      []int
		follow      bool   // follow redirects (a cleaned path), as a browser or curl -L would
		noLeak      string // what the body must not hold
	}{
		{name: "unknown id: get", method: "GET", url: "/v1/sandboxes/" + unknown, key: key, status: []int{404}},
		{name: "unknown id: delete", method: "DELETE", url: "/v1/sandboxes/" + unknown, key: key, status: []int{404}},
		{name: "unknown id: renew", method: "POST", url: "/v1/sandboxes/" + unknown + "/renew-expiration", key: key, body: `{"expiresAt":"` + future + `"}`, status: []int{404}},
		{name: "unknown id: endpoint", method: "GET", url: "/v1/sandboxes/" + unknown + "/endpoints/44772", key: key, status: []int{404}},
		{name: "wrong key: list", method: "GET", url: "/v1/sandboxes", key: "wrong-key", status: []int{401}},
		{name: "no key: list", method: "GET", url: "/v1/sandboxes", status: []int{401}},
		{name: "wrong key: get", method: "GET", url: "/v1/sandboxes/" + a.id, key: "e2b_0000000000000000000000000000000000000000", status: []int{401}},
		{name: "another key's sandbox: get", method: "GET", url: "/v1/sandboxes/" + a.id, key: other, status: []int{404}},
		{name: "another key's sandbox: delete", method: "DELETE", url: "/v1/sandboxes/" + a.id, key: other, status: []int{404}},
		{name: "another key's sandbox: endpoint", method: "GET", url: "/v1/sandboxes/" + a.id + "/endpoints/44772", key: other, status: []int{404}, noLeak: token(a)},
		{name: "image not on the registry", method: "POST", url: "/v1/sandboxes", key: key, body: create(map[string]any{"image": map[string]any{"uri": s.missing}}), status: []int{400}},
		{name: "image neither a template nor reachable", method: "POST", url: "/v1/sandboxes", key: key, body: create(map[string]any{"image": map[string]any{"uri": "osbtest-no-such-template"}}), status: []int{400}},
		{name: "cpu not a quantity", method: "POST", url: "/v1/sandboxes", key: key, body: create(map[string]any{"resourceLimits": map[string]string{"cpu": "lots", "memory": "1Gi"}}), status: []int{400}},
		{name: "memory unit unknown", method: "POST", url: "/v1/sandboxes", key: key, body: create(map[string]any{"resourceLimits": map[string]string{"cpu": "1", "memory": "2Qi"}}), status: []int{400}},
		{name: "memory negative", method: "POST", url: "/v1/sandboxes", key: key, body: create(map[string]any{"resourceLimits": map[string]string{"cpu": "1", "memory": "-1Gi"}}), status: []int{400}},
		{name: "timeout below the minimum", method: "POST", url: "/v1/sandboxes", key: key, body: create(map[string]any{"timeout": 30}), status: []int{400}},
		{name: "body not JSON", method: "POST", url: "/v1/sandboxes", key: key, body: `{"image":`, status: []int{400}},
		{name: "renew into the past", method: "POST", url: "/v1/sandboxes/" + a.id + "/renew-expiration", key: key, body: `{"expiresAt":"` + past + `"}`, status: []int{400}},
		// Refusals of execd may say 404, as E2B's router does: a sandbox
		// one has no token for is one that does not exist.
		{name: "execd without credentials", method: "GET", url: execd(a, "/ping"), status: []int{401, 403, 404}},
		{name: "execd with a wrong token", method: "GET", url: execd(a, "/ping"), token: "wrong-token", status: []int{401, 403, 404}},
		{name: "execd with another key", method: "GET", url: execd(a, "/ping"), key: other, status: []int{401, 403, 404}},
		{name: "execd token of another sandbox", method: "GET", url: execd(b, "/files/download?path=/tmp/b-mark"), token: token(a), status: []int{401, 403, 404}, noLeak: bMark},
		{name: "file path up to the host", method: "GET", url: execd(a, "/files/download?path=/../../../../.."+s.secret), token: token(a), status: []int{404}, noLeak: s.secretText},
		{name: "file path up to the host, encoded", method: "GET", url: execd(a, "/files/download?path=%2F..%2F..%2F..%2F..%2F.."+strings.ReplaceAll(s.secret, "/", "%2F")), token: token(a), status: []int{404}, noLeak: s.secretText},
		{name: "search up to the host", method: "GET", url: execd(a, "/files/search?path=/../../../..&pattern="+lastElem(s.secret)), token: token(a), status: []int{200, 404}, noLeak: s.secretText},
		// The proxy's path: ../ from A's route to B's, with A's token.
		{name: "proxy path up to another sandbox", method: "GET", url: execd(a, "/../../../"+b.id+"/proxy/44772/files/download?path=/tmp/b-mark"), token: token(a), follow: true, status: []int{400, 401, 403, 404}, noLeak: bMark},
		{name: "proxy path up to another sandbox, encoded", method: "GET", url: execd(a, "/..%2F..%2F..%2F"+b.id+"%2Fproxy%2F44772%2Ffiles%2Fdownload?path=/tmp/b-mark"), token: token(a), follow: true, status: []int{400, 401, 403, 404}, noLeak: bMark},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := c.url
			if strings.HasPrefix(u, "/") {
				u = s.srv.URL() + u
			}
			req, err := http.NewRequest(c.method, u, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			if c.key != "" {
				req.Header.Set("OPEN-SANDBOX-API-KEY", c.key)
			}
			if c.token != "" {
				req.Header.Set("X-EXECD-ACCESS-TOKEN", c.token)
			}
			client := &http.Client{Timeout: time.Minute, Transport: s.client.Transport}
			if !c.follow {
				// A redirect is the answer.
				client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !slices.Contains(c.status, resp.StatusCode) {
				t.Errorf("%s %s: %s %s; want %v", c.method, c.url, resp.Status, body, c.status)
			}
			if c.noLeak != "" && bytes.Contains(body, []byte(c.noLeak)) {
				t.Errorf("the answer holds %q: %s", c.noLeak, body)
			}
			if resp.StatusCode < 400 {
				return
			}
			var e struct {
				Code    any `json:"code"`
				Message any `json:"message"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Errorf("the error body is not JSON (%v): %s", err, body)
				return
			}
			if code, ok := e.Code.(string); !ok || code == "" {
				t.Errorf("code %#v, want a string: %s", e.Code, body)
			}
			if msg, ok := e.Message.(string); !ok || msg == "" {
				t.Errorf("message %#v, want a string: %s", e.Message, body)
			}
		})
	}

	// Refused requests changed nothing: A and B still run for their owner,
	// with the expiry they had, and no refused create left a sandbox.
	for _, sb := range []osbSandbox{a, b} {
		if st, body := s.osbGet(t, "/v1/sandboxes/"+sb.id, key); st != 200 {
			t.Errorf("GET %s after the refusals: %d %s", sb.id, st, body)
		}
	}
	if ids := s.srv.APISandboxes(); len(ids) != 2 {
		t.Errorf("sandboxes after the refusals: %v, want only %s and %s", ids, a.id, b.id)
	}
	for _, sb := range []osbSandbox{a, b} {
		if st := s.osbDelete(t, sb.id, key); st != 204 {
			t.Errorf("DELETE %s: %d, want 204", sb.id, st)
		}
		if st := s.e2bStatus(t, sb.id); st != 404 {
			t.Errorf("E2B's GET /sandboxes/%s after the kill: %d, want 404", sb.id, st)
		}
	}
}

// testSDKErrors runs sdk_errors.py and js/errors.mjs: the same bad calls
// through each SDK, which must surface the server's status and
// OpenSandbox's code (not the SDK's fallback UNEXPECTED_RESPONSE, which
// means it could not read the server's answer).
func (s *suite) testSDKErrors(t *testing.T) {
	want := map[string]int{
		"unknown-id":    404,
		"kill-unknown":  404,
		"renew-unknown": 404,
		"wrong-key":     401,
		"missing-image": 400,
		"bad-resource":  400,
		"short-timeout": 400,
	}
	env := s.clientEnv("OSB_TEMPLATE="+template, "OSB_MISSING_IMAGE="+s.missing)
	for _, client := range []string{"python", "typescript"} {
		t.Run(client, func(t *testing.T) {
			var lines map[string]line
			if client == "python" {
				lines = s.runScript(t, ".", env, s.python, "sdk_errors.py")
			} else {
				lines = s.runScript(t, s.js, env, nodePath(t), "errors.mjs")
			}
			for step, status := range want {
				l, ok := lines[step]
				switch {
				case !ok:
					t.Errorf("%s: not run", step)
				case l.Error == nil:
					t.Errorf("%s succeeded (%+v), want status %d", step, l, status)
				case l.Error.Status != status || l.Error.Code == "" || l.Error.Code == "UNEXPECTED_RESPONSE":
					t.Errorf("%s: %s; want status %d and the server's code", step, l.Error, status)
				}
			}
			if len(lines) != len(want) {
				t.Errorf("the script printed %d steps, the test knows %d", len(lines), len(want))
			}
		})
	}
}

// osbCreate creates a sandbox through OpenSandbox's API with the fields
// given (over defaults a client sends) and fetches its execd endpoint; it
// is killed when the test ends if nothing killed it first.
func (s *suite) osbCreate(t *testing.T, fields map[string]any) osbSandbox {
	t.Helper()
	body := map[string]any{"entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 300,
		"resourceLimits": map[string]string{"cpu": "1", "memory": "1Gi"}}
	for k, v := range fields {
		body[k] = v
	}
	b, _ := json.Marshal(body)
	st, out := s.osbDo(t, "POST", "/v1/sandboxes", hutchtest.TestKey, b)
	var created struct {
		ID     string `json:"id"`
		Status struct {
			State string `json:"state"`
		} `json:"status"`
	}
	if st != 202 || json.Unmarshal(out, &created) != nil || created.ID == "" {
		t.Fatalf("POST /v1/sandboxes: %d %s; want 202 and an id", st, out)
	}
	t.Cleanup(func() { s.osbDelete(t, created.ID, hutchtest.TestKey) })
	st, out = s.osbGet(t, "/v1/sandboxes/"+created.ID+"/endpoints/44772", hutchtest.TestKey)
	var ep struct {
		Endpoint string            `json:"endpoint"`
		Headers  map[string]string `json:"headers"`
	}
	if st != 200 || json.Unmarshal(out, &ep) != nil || ep.Endpoint == "" || ep.Headers["X-EXECD-ACCESS-TOKEN"] == "" {
		t.Fatalf("GET endpoints/44772: %d %s; want an endpoint and X-EXECD-ACCESS-TOKEN", st, out)
	}
	return osbSandbox{id: created.ID, endpoint: ep.Endpoint, headers: ep.Headers}
}

// upload writes a file into sb through execd's upload, as the SDKs do.
func (s *suite) upload(t *testing.T, sb osbSandbox, path, content string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	meta, _ := json.Marshal(map[string]any{"path": path, "mode": 644})
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	h.Set("Content-Type", "application/json")
	p, _ := mw.CreatePart(h)
	p.Write(meta)
	f, _ := mw.CreateFormFile("file", lastElem(path))
	io.WriteString(f, content)
	mw.Close()
	req, _ := http.NewRequest("POST", "http://"+sb.endpoint+"/files/upload", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	for k, v := range sb.headers {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("upload %s: %s %s", path, resp.Status, out)
	}
}

// otherKey is a second API key of the server's (hutch keys create).
func (s *suite) otherKey(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(s.srv.Bin, "keys", "create", "--name", unique("osbtest"))
	cmd.Env = s.srv.Env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hutch keys create: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// osbGet is GET path of the lifecycle API with key: the status and body.
func (s *suite) osbGet(t *testing.T, path, key string) (int, []byte) {
	t.Helper()
	return s.osbDo(t, "GET", path, key, nil)
}

// osbDelete kills a sandbox through the lifecycle API: the status.
func (s *suite) osbDelete(t testing.TB, id, key string) int {
	st, _ := s.osbDo(t, "DELETE", "/v1/sandboxes/"+id, key, nil)
	return st
}

// osbDo sends a request to the lifecycle API with key.
func (s *suite) osbDo(t testing.TB, method, path, key string, body []byte) (int, []byte) {
	req, _ := http.NewRequest(method, s.srv.URL()+path, bytes.NewReader(body))
	req.Header.Set("OPEN-SANDBOX-API-KEY", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, path, err)
		return 0, nil
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// lastElem is the last element of a slash-separated path.
func lastElem(p string) string { return p[strings.LastIndex(p, "/")+1:] }
