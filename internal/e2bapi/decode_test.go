package e2bapi_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// wireCreateV2 is the NewSandboxV2 body the JS SDK 2.51 sent to a recording
// server (spec §2.4), with the elided rules filled in.
const wireCreateV2 = `{"templateID":"my-template","timeout":91,"allow_internet_access":false,` +
	`"network":{"allowOut":["1.1.1.1"],"denyOut":["0.0.0.0/0"],` +
	`"rules":{"api.example.com":[{"transform":{"headers":{"X-Key":"v"}}}]},` +
	`"allowPublicTraffic":false,"maskRequestHost":"${PORT}-x.example","httpsPorts":[8443]},` +
	`"autoPause":true,"autoPauseMemory":true,"autoResume":{"enabled":true},` +
	`"volumeMounts":[{"name":"vol1","path":"/mnt/data"}]}`

func ptr[T any](v T) *T { return &v }

func post(body string) *http.Request {
	return httptest.NewRequest(http.MethodPost, "/v2/sandboxes", strings.NewReader(body))
}

func statusErr(t *testing.T, err error) *e2bapi.StatusError {
	t.Helper()
	var se *e2bapi.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a *StatusError", err, err)
	}
	return se
}

func TestDecodeWireExample(t *testing.T) {
	var got e2bapi.NewSandboxV2
	if err := e2bapi.DecodeJSON(post(wireCreateV2), &got, 0); err != nil {
		t.Fatalf("DecodeJSON: %v", err)
	}
	want := e2bapi.NewSandboxV2{
		TemplateID:          "my-template",
		Timeout:             ptr[int32](91),
		AllowInternetAccess: ptr(false),
		Network: &e2bapi.NetworkConfig{
			AllowOut:           []string{"1.1.1.1"},
			DenyOut:            []string{"0.0.0.0/0"},
			Rules:              json.RawMessage(`{"api.example.com":[{"transform":{"headers":{"X-Key":"v"}}}]}`),
			AllowPublicTraffic: ptr(false),
			MaskRequestHost:    ptr("${PORT}-x.example"),
			HTTPSPorts:         []int{8443},
		},
		AutoPause:       ptr(true),
		AutoPauseMemory: ptr(true),
		AutoResume:      &e2bapi.AutoResume{Enabled: true},
		VolumeMounts:    []e2bapi.VolumeMount{{Name: "vol1", Path: "/mnt/data"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded request (-want +got):\n%s", diff)
	}
	if err := got.Normalize(); err != nil {
		t.Errorf("Normalize: %v", err)
	}
	if got.InternetAccess() {
		t.Errorf("InternetAccess() = true, want false")
	}
}

func TestDecodeV1PythonBody(t *testing.T) {
	// What Python 2.45.1 always sends (spec §2.4), plus a field Hutch does
	// not know.
	body := `{"templateID":"base","timeout":300,"metadata":{},"envVars":{},"secure":true,` +
		`"allow_internet_access":true,"somethingNew":{"x":[1,2]}}`
	var got e2bapi.NewSandboxV1
	if err := e2bapi.DecodeJSON(post(body), &got, 0); err != nil {
		t.Fatalf("DecodeJSON: %v", err)
	}
	if err := got.Normalize(); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	if !got.IsSecure() || *got.Timeout != 300 || got.TemplateID != "base" || !got.InternetAccess() {
		t.Errorf("got %+v", got)
	}

	var bare e2bapi.NewSandboxV1
	if err := e2bapi.DecodeJSON(post(`{}`), &bare, 0); err != nil {
		t.Fatalf("DecodeJSON: %v", err)
	}
	if err := bare.Normalize(); err != nil {
		t.Fatalf("Normalize: %v", err)
	}
	if bare.IsSecure() || *bare.Timeout != e2bapi.DefaultTimeoutV1 || bare.TemplateID != e2bapi.DefaultTemplateID {
		t.Errorf("v1 defaults: got secure=%v timeout=%d template=%q", bare.IsSecure(), *bare.Timeout, bare.TemplateID)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		into       func() any
		wantStatus int
		wantMsg    string // substring
	}{
		{"empty", "", newV2, 400, "request body is empty"},
		{"whitespace only", " \n\t", newV2, 400, "request body is empty"},
		{"malformed", `{"templateID":`, newV2, 400, "malformed JSON"},
		{"bad syntax", `{"templateID" "x"}`, newV2, 400, "malformed JSON at byte"},
		{"trailing garbage", `{"templateID":"x"} garbage`, newV2, 400, "unexpected data after the object"},
		{"two objects", `{}{}`, newV2, 400, "unexpected data after the object"},
		{"array", `[]`, newV2, 400, "must be a JSON object"},
		{"null", `null`, newV2, 400, "must be a JSON object"},
		{"string timeout", `{"timeout":"91"}`, newV2, 400, "timeout: expected an integer number of seconds, got string"},
		{"fractional timeout", `{"timeout":90.5}`, newV2, 400, "timeout: expected an integer number of seconds, got number 90.5"},
		{"overflowing timeout", `{"timeout":99999999999}`, newV2, 400, "timeout: expected an integer number of seconds"},
		{"templateID number", `{"templateID":7}`, newV2, 400, "templateID: expected a string, got number"},
		{"metadata array", `{"metadata":["a"]}`, newV2, 400, "metadata: expected an object, got array"},
		{"metadata value number", `{"metadata":{"a":1}}`, newV2, 400, "metadata: expected a string, got number"},
		{"allow_internet_access string", `{"allow_internet_access":"no"}`, newV2, 400, "allow_internet_access: expected a boolean, got string"},
		{"httpsPorts string", `{"network":{"httpsPorts":["443"]}}`, newV2, 400, "network.httpsPorts: expected an integer, got string"},
		{"autoResume bool", `{"autoResume":true}`, newV2, 400, "autoResume: expected an object, got bool"},
		{"v1 embedded timeout", `{"timeout":"x","secure":true}`, newV1, 400, "timeout: expected an integer number of seconds"},
		{"v1 secure string", `{"secure":"yes"}`, newV1, 400, "secure: expected a boolean, got string"},
		{"timeout required", `{}`, newTimeout, 400, "timeout: required"},
		{"timeout null", `{"timeout":null}`, newTimeout, 400, "timeout: required"},
		{"timeout string", `{"timeout":"5"}`, newTimeout, 400, "timeout: expected an integer number of seconds, got string"},
		{"refresh duration string", `{"duration":"5"}`, func() any { return new(e2bapi.RefreshRequest) }, 400, "duration: expected an integer number of seconds"},
		{"connect memory string", `{"memory":"no"}`, func() any { return new(e2bapi.ConnectRequest) }, 400, "memory: expected a boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := e2bapi.DecodeJSON(post(tt.body), tt.into(), 0)
			if err == nil {
				t.Fatalf("DecodeJSON(%q) succeeded, want %d", tt.body, tt.wantStatus)
			}
			se := statusErr(t, err)
			if se.Status != tt.wantStatus || !strings.Contains(se.Message, tt.wantMsg) {
				t.Errorf("DecodeJSON(%q) = %d %q, want %d containing %q", tt.body, se.Status, se.Message, tt.wantStatus, tt.wantMsg)
			}
			if strings.Contains(se.Message, "Go") || strings.Contains(se.Message, "int32") || strings.Contains(se.Message, "e2bapi.") {
				t.Errorf("message %q leaks Go type names", se.Message)
			}
		})
	}
}

func newV2() any      { return new(e2bapi.NewSandboxV2) }
func newV1() any      { return new(e2bapi.NewSandboxV1) }
func newTimeout() any { return new(e2bapi.TimeoutRequest) }

func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
		into any
		want any
	}{
		{"unknown fields ignored", `{"templateID":"t","iam":{"tokens":{"a":{"audience":"x","tokenType":"jwt"}}},"future":[1,{"a":null}],"secure":true}`,
			&e2bapi.NewSandboxV2{}, &e2bapi.NewSandboxV2{TemplateID: "t", IAM: json.RawMessage(`{"tokens":{"a":{"audience":"x","tokenType":"jwt"}}}`)}},
		{"surrounding whitespace", "\r\n {\"timeout\": 5} \n", &e2bapi.TimeoutRequest{}, &e2bapi.TimeoutRequest{Timeout: 5}},
		{"integral float timeout", `{"timeout": 0}`, &e2bapi.TimeoutRequest{}, &e2bapi.TimeoutRequest{Timeout: 0}},
		{"connect empty object", `{}`, &e2bapi.ConnectRequest{}, &e2bapi.ConnectRequest{}},
		{"connect fields", `{"timeout":60,"memory":false}`, &e2bapi.ConnectRequest{}, &e2bapi.ConnectRequest{Timeout: ptr[int32](60), Memory: ptr(false)}},
		{"pause memory", `{"memory":true}`, &e2bapi.PauseRequest{}, &e2bapi.PauseRequest{Memory: ptr(true)}},
		{"mcp verbatim", `{"templateID":"mcp-gateway","mcp":{"servers":{"x":{"command":"y"}}}}`,
			&e2bapi.NewSandboxV2{}, &e2bapi.NewSandboxV2{TemplateID: "mcp-gateway", MCP: json.RawMessage(`{"servers":{"x":{"command":"y"}}}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e2bapi.DecodeJSON(post(tt.body), tt.into, 0); err != nil {
				t.Fatalf("DecodeJSON(%q): %v", tt.body, err)
			}
			if diff := cmp.Diff(tt.want, tt.into); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeOptional(t *testing.T) {
	for _, body := range []string{"", "  "} {
		c := e2bapi.ConnectRequest{}
		if err := e2bapi.DecodeOptionalJSON(post(body), &c, 0); err != nil {
			t.Errorf("DecodeOptionalJSON(%q): %v", body, err)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/sandboxes/x/pause", nil) // http.NoBody
	var p e2bapi.PauseRequest
	if err := e2bapi.DecodeOptionalJSON(r, &p, 0); err != nil {
		t.Errorf("DecodeOptionalJSON(no body): %v", err)
	}
	if err := e2bapi.DecodeJSON(httptest.NewRequest(http.MethodPost, "/", nil), &p, 0); e2bapi.StatusOf(err) != 400 {
		t.Errorf("DecodeJSON(no body) = %v, want a 400", err)
	}
	if err := e2bapi.DecodeOptionalJSON(post(`{"memory":1}`), &p, 0); e2bapi.StatusOf(err) != 400 {
		t.Errorf("DecodeOptionalJSON(bad type) = %v, want a 400", err)
	}
}

func TestDecodeTooLarge(t *testing.T) {
	const limit = 64
	tests := []struct {
		name       string
		body       string
		wantStatus int
	}{
		{"at limit", `{"templateID":"` + strings.Repeat("a", limit-17) + `"}`, 0},
		{"one over", `{"templateID":"` + strings.Repeat("a", limit-16) + `"}`, 413},
		{"huge", `{"templateID":"` + strings.Repeat("a", 10<<20) + `"}`, 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v e2bapi.NewSandboxV2
			err := e2bapi.DecodeJSON(post(tt.body), &v, limit)
			if got := e2bapi.StatusOf(err); tt.wantStatus == 0 && err != nil || tt.wantStatus != 0 && got != tt.wantStatus {
				t.Fatalf("len %d: DecodeJSON = %v, want status %d", len(tt.body), err, tt.wantStatus)
			}
			if tt.wantStatus == 413 && statusErr(t, err).Message != "request body is larger than 64 bytes" {
				t.Errorf("message = %q", statusErr(t, err).Message)
			}
		})
	}
	// The default limit applies when maxBytes ≤ 0.
	big := `{"templateID":"` + strings.Repeat("a", int(e2bapi.DefaultMaxBodyBytes)) + `"}`
	var v e2bapi.NewSandboxV2
	if got := e2bapi.StatusOf(e2bapi.DecodeJSON(post(big), &v, 0)); got != 413 {
		t.Errorf("default limit: status %d, want 413", got)
	}
}

// unreadable is a body that fails the test if it is read.
type unreadable struct{ t *testing.T }

func (u unreadable) Read([]byte) (int, error) {
	u.t.Error("a body declared too large was read")
	return 0, io.ErrUnexpectedEOF
}

// TestDecodeDeclaredTooLarge: a Content-Length over the limit is refused
// before any of the body is read (review S1: nothing of a body that will
// be refused is waited for).
func TestDecodeDeclaredTooLarge(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/sandboxes", unreadable{t})
	r.ContentLength = 65
	var v e2bapi.NewSandboxV2
	if got := e2bapi.StatusOf(e2bapi.DecodeJSON(r, &v, 64)); got != 413 {
		t.Errorf("status %d, want 413", got)
	}
}

// TestDecodeChunked sends bodies of unknown length through a real HTTP/1.1
// connection, so they arrive with Transfer-Encoding: chunked.
func TestDecodeChunked(t *testing.T) {
	type result struct {
		chunked bool
		status  int
		req     e2bapi.NewSandboxV2
	}
	results := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var res result
		res.chunked = len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"
		res.status = e2bapi.StatusOf(e2bapi.DecodeJSON(r, &res.req, 1024))
		results <- res
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	send := func(parts ...string) result {
		t.Helper()
		pr, pw := io.Pipe()
		go func() {
			for _, p := range parts {
				if _, err := pw.Write([]byte(p)); err != nil {
					return
				}
			}
			pw.Close()
		}()
		req, err := http.NewRequest(http.MethodPost, srv.URL, pr)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return <-results
	}

	res := send(`{"templateID":`, `"base",`, ` "timeout": 30}`)
	if !res.chunked {
		t.Errorf("body was not chunked")
	}
	if res.status != 200 || res.req.TemplateID != "base" || res.req.Timeout == nil || *res.req.Timeout != 30 {
		t.Errorf("chunked decode: status %d, req %+v", res.status, res.req)
	}
	parts := make([]string, 0, 100)
	parts = append(parts, `{"templateID":"`)
	for range 99 {
		parts = append(parts, strings.Repeat("a", 100))
	}
	if res := send(parts...); res.status != 413 {
		t.Errorf("oversized chunked body: status %d, want 413", res.status)
	}
}
