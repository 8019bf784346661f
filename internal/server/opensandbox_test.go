package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	validator "github.com/pb33f/libopenapi-validator"

	"github.com/hutch-sandbox/hutch/internal/server/servertest"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// OpenSandbox's lifecycle API under /v1, driven through a real server
// (servertest: real sandboxes, as root) the way OpenSandbox's SDKs call
// it, with E2B's API beside it to check what the sandboxes became. Every
// answer of /v1 is checked against the OpenAPI document the server
// serves, too.

// osbAPI calls a control plane's /v1 API and E2B's.
type osbAPI struct {
	t   *testing.T
	cp  *servertest.ControlPlane
	doc validator.Validator
}

func newOSBAPI(t *testing.T, cp *servertest.ControlPlane) *osbAPI {
	t.Helper()
	return &osbAPI{t: t, cp: cp, doc: servedValidator(t, cp)}
}

// answer is an HTTP answer, read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// osbError is OpenSandbox's error body.
type osbError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// err is the answer's body as OpenSandbox's error; a body that is not
// one fails the test.
func (a answer) err(t *testing.T) osbError {
	t.Helper()
	var e osbError
	if err := json.Unmarshal(a.body, &e); err != nil || e.Code == "" || e.Message == "" {
		t.Errorf("%d %s: not OpenSandbox's {code, message}", a.status, a.body)
	}
	return e
}

// decode reads the answer's body into v.
func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("%d %s: %v", a.status, a.body, err)
	}
}

// with is o reporting to t (a subtest's).
func (o *osbAPI) with(t *testing.T) *osbAPI { return &osbAPI{t: t, cp: o.cp, doc: o.doc} }

// send sends method path with body and headers h; the answer is checked
// against the document when path is one of /v1's.
func (o *osbAPI) send(method, path, body string, h http.Header) answer {
	o.t.Helper()
	return o.do(method, path, body, h, strings.HasPrefix(path, "/v1/"))
}

// sendUnlisted is send for a path of the subtree /v1/ that the document
// cannot tell from another path (its "/v1/{path}" is one segment, as
// OpenAPI's are, where the server's subtree is every path under /v1/):
// its answer is not checked against the document.
func (o *osbAPI) sendUnlisted(method, path, body string, h http.Header) answer {
	o.t.Helper()
	return o.do(method, path, body, h, false)
}

func (o *osbAPI) do(method, path, body string, h http.Header, check bool) answer {
	o.t.Helper()
	req, err := http.NewRequest(method, o.cp.URL+path, strings.NewReader(body))
	if err != nil {
		o.t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		o.t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if check {
		req, _ = http.NewRequest(method, o.cp.URL+path, strings.NewReader(body))
		req.Header = resp.Request.Header.Clone()
		resp.Body = io.NopCloser(bytes.NewReader(got))
		if _, errs := o.doc.ValidateHttpResponse(req, resp); len(errs) > 0 {
			o.t.Errorf("%s %s (%d %s) does not match the document:", method, path, resp.StatusCode, bytes.TrimSpace(got))
			for _, e := range errs {
				o.t.Errorf("  %v", describe(e.Message, e.Reason, e.SchemaValidationErrors))
			}
		}
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: got}
}

// osb calls OpenSandbox's API with key in OPEN-SANDBOX-API-KEY ("" sends
// none).
func (o *osbAPI) osb(method, path, body, key string) answer {
	o.t.Helper()
	h := http.Header{}
	if key != "" {
		h.Set("OPEN-SANDBOX-API-KEY", key)
	}
	return o.send(method, path, body, h)
}

// e2b calls E2B's API with key.
func (o *osbAPI) e2b(method, path, body, key string) answer {
	o.t.Helper()
	return o.send(method, path, body, http.Header{"X-Api-Key": {key}})
}

// osbSandbox is a sandbox as /v1 answers it.
type osbSandbox struct {
	ID    string `json:"id"`
	Image *struct {
		URI string `json:"uri"`
	} `json:"image"`
	SnapshotID string `json:"snapshotId"`
	Status     struct {
		State string `json:"state"`
	} `json:"status"`
	Metadata   map[string]string `json:"metadata"`
	Entrypoint []string          `json:"entrypoint"`
	ExpiresAt  *time.Time        `json:"expiresAt"`
	CreatedAt  time.Time         `json:"createdAt"`
}

// e2bSandbox is a sandbox as E2B's GET /sandboxes/{id} answers it.
type e2bSandbox struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	CPUCount        int               `json:"cpuCount"`
	MemoryMB        int               `json:"memoryMB"`
	Metadata        map[string]string `json:"metadata"`
	EndAt           time.Time         `json:"endAt"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	State           string            `json:"state"`
	Network         *struct {
		AllowOut []string `json:"allowOut"`
		DenyOut  []string `json:"denyOut"`
	} `json:"network"`
}

// create makes a sandbox through /v1 with body, which must succeed.
func (o *osbAPI) create(body, key string) osbSandbox {
	o.t.Helper()
	a := o.osb("POST", "/v1/sandboxes", body, key)
	if a.status != http.StatusAccepted {
		o.t.Fatalf("create %s: %d %s, want 202", body, a.status, a.body)
	}
	var sb osbSandbox
	a.decode(o.t, &sb)
	return sb
}

// e2bGet is E2B's view of sandbox id.
func (o *osbAPI) e2bGet(id, key string) e2bSandbox {
	o.t.Helper()
	a := o.e2b("GET", "/sandboxes/"+id, "", key)
	if a.status != http.StatusOK {
		o.t.Fatalf("E2B's GET /sandboxes/%s: %d %s", id, a.status, a.body)
	}
	var sb e2bSandbox
	a.decode(o.t, &sb)
	return sb
}

// near reports whether got is within a few seconds of want.
func near(got, want time.Time) bool { return got.Sub(want).Abs() < 10*time.Second }

// TestOpenSandboxCreate: a create from a template answers 202 with the
// sandbox, running, its resourceLimits its own limits as E2B reports
// them; each request OpenSandbox's spec allows and Hutch refuses, and each
// bad credential, is answered in OpenSandbox's error shape, and makes no
// sandbox.
func TestOpenSandboxCreate(t *testing.T) {
	cp := servertest.Start(t, 1)
	o := newOSBAPI(t, cp)
	key := cp.Keys[0]

	// The entrypoint, started once the sandbox is up, writes what the
	// create's env gave it.
	const entrypoint = `"echo \"$GREETING\" > /home/user/greeting && exec sleep 600"`
	before := time.Now()
	a := o.osb("POST", "/v1/sandboxes", `{"image":{"uri":"base"},"timeout":120,"resourceLimits":{"cpu":"1500m","memory":"300Mi"},`+
		`"env":{"GREETING":"hi"},"metadata":{"suite":"osb-create"},"entrypoint":["sh","-c",`+entrypoint+`]}`, key)
	if a.status != http.StatusAccepted {
		t.Fatalf("create: %d %s, want 202", a.status, a.body)
	}
	var sb osbSandbox
	a.decode(t, &sb)
	if sb.ID == "" || sb.Status.State != "Running" || sb.Metadata["suite"] != "osb-create" || !slices.Equal(sb.Entrypoint, []string{"sh", "-c", `echo "$GREETING" > /home/user/greeting && exec sleep 600`}) {
		t.Errorf("create answered %s", a.body)
	}
	if sb.ExpiresAt == nil || !near(*sb.ExpiresAt, before.Add(120*time.Second)) || !near(sb.CreatedAt, before) {
		t.Errorf("create made at %v answered expiresAt %v, createdAt %v; want 120 s later, and then", before, sb.ExpiresAt, sb.CreatedAt)
	}
	if loc := a.header.Get("Location"); loc != "/v1/sandboxes/"+sb.ID {
		t.Errorf("Location %q, want /v1/sandboxes/%s", loc, sb.ID)
	}
	var got osbSandbox
	o.osb("GET", "/v1/sandboxes/"+sb.ID, "", key).decode(t, &got)
	if got.Image == nil || got.Image.URI != "base" || got.Status.State != "Running" || got.Metadata["suite"] != "osb-create" {
		t.Errorf("GET /v1/sandboxes/%s answered %+v", sb.ID, got)
	}
	// 1.5 cores is a quota of 2 CPUs to E2B's integer cpuCount.
	e := o.e2bGet(sb.ID, key)
	if e.CPUCount != 2 || e.MemoryMB != 300 || e.TemplateID != "base" || e.Metadata["suite"] != "osb-create" {
		t.Errorf("E2B sees cpuCount %d, memoryMB %d, template %q, metadata %v; want 2, 300, base, suite=osb-create", e.CPUCount, e.MemoryMB, e.TemplateID, e.Metadata)
	}
	if got := waitFile(t, cp.URL, sb.ID, e.EnvdAccessToken, "/home/user/greeting"); got != "hi\n" {
		t.Errorf("the entrypoint wrote %q, want the env's GREETING", got)
	}

	// Refusals: none of them makes a sandbox.
	tests := []struct {
		name, body string
		key        string // "" for none
		status     int
		code       string
		mention    string // in the message
	}{
		{"no image nor snapshot", `{"timeout":120}`, key, 400, "SANDBOX::INVALID_PARAMETER", "image.uri and snapshotId"},
		{"empty image uri", `{"image":{"uri":""}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "image.uri and snapshotId"},
		{"image and snapshot", `{"image":{"uri":"base"},"snapshotId":"snap"}`, key, 400, "SANDBOX::INVALID_PARAMETER", "image.uri and snapshotId"},
		{"timeout 59", `{"image":{"uri":"base"},"timeout":59}`, key, 400, "SANDBOX::INVALID_PARAMETER", "timeout"},
		{"timeout 86401", `{"image":{"uri":"base"},"timeout":86401}`, key, 400, "SANDBOX::INVALID_PARAMETER", "timeout"},
		{"timeout not a number", `{"image":{"uri":"base"},"timeout":"soon"}`, key, 400, "SANDBOX::INVALID_PARAMETER", "timeout"},
		{"cpu lots", `{"image":{"uri":"base"},"resourceLimits":{"cpu":"lots"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "cpu"},
		{"memory 2GB", `{"image":{"uri":"base"},"resourceLimits":{"memory":"2GB"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "memory"},
		{"memory below a sandbox's", `{"image":{"uri":"base"},"resourceLimits":{"memory":"1Mi"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "memory"},
		{"gpu 1", `{"image":{"uri":"base"},"resourceLimits":{"gpu":"1"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "gpu"},
		{"unknown resource", `{"image":{"uri":"base"},"resourceLimits":{"disk":"1Gi"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "disk"},
		{"volumes", `{"image":{"uri":"base"},"volumes":[{"name":"v","mountPath":"/data","pvc":{"claimName":"c"}}]}`, key, 400, "SANDBOX::INVALID_PARAMETER", "volumes"},
		{"lifecycle", `{"image":{"uri":"base"},"lifecycle":{"preStart":{"command":["true"]}}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "lifecycle"},
		{"credential proxy", `{"image":{"uri":"base"},"credentialProxy":{"enabled":true}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "credentialProxy"},
		{"pool", `{"extensions":{"poolRef":"warm"},"image":{"uri":"base"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "poolRef"},
		{"platform windows", `{"image":{"uri":"base"},"platform":{"os":"windows","arch":"amd64"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "windows"},
		{"reserved metadata", `{"image":{"uri":"base"},"metadata":{"opensandbox.io/x":"1"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "opensandbox.io/"},
		{"env name with =", `{"image":{"uri":"base"},"env":{"A=B":"x"}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "env"},
		{"image neither template nor reference", `{"image":{"uri":"Not An Image!"}}`, key, 400, "HUTCH::SANDBOX_IMAGE_PULL_FAILED", "not an image reference"},
		{"egress action", `{"image":{"uri":"base"},"networkPolicy":{"egress":[{"action":"log","target":"a.example"}]}}`, key, 400, "SANDBOX::INVALID_PARAMETER", "action"},
		{"not JSON", `{"image":`, key, 400, "SANDBOX::INVALID_PARAMETER", "JSON"},
		{"no body", ``, key, 400, "SANDBOX::INVALID_PARAMETER", "JSON body"},
		{"unknown snapshot", `{"snapshotId":"no-such-snapshot"}`, key, 404, "HUTCH::SNAPSHOT_NOT_FOUND", "no-such-snapshot"},
		{"wrong key", `{"image":{"uri":"base"}}`, "e2b_0000000000000000000000000000000000000000", 401, "HUTCH::UNAUTHORIZED", "invalid API key"},
		{"no key", `{"image":{"uri":"base"}}`, "", 401, "HUTCH::UNAUTHORIZED", "OPEN-SANDBOX-API-KEY"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := o.with(t)
			a := o.osb("POST", "/v1/sandboxes", tc.body, tc.key)
			e := a.err(t)
			if a.status != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.mention) {
				t.Errorf("%d %s, want %d %s mentioning %q", a.status, a.body, tc.status, tc.code, tc.mention)
			}
		})
	}
	var list struct{ Items []osbSandbox }
	o.osb("GET", "/v1/sandboxes", "", key).decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != sb.ID {
		t.Errorf("after the refusals the key has %d sandboxes (%+v), want the one created", len(list.Items), list.Items)
	}
}

// listPage is a page of GET /v1/sandboxes.
type listPage struct {
	Items      []osbSandbox `json:"items"`
	Pagination struct {
		Page        int  `json:"page"`
		PageSize    int  `json:"pageSize"`
		TotalItems  int  `json:"totalItems"`
		TotalPages  int  `json:"totalPages"`
		HasNextPage bool `json:"hasNextPage"`
	} `json:"pagination"`
}

// ids are the ids of the page's sandboxes.
func (p listPage) ids() []string {
	var out []string
	for _, sb := range p.Items {
		out = append(out, sb.ID)
	}
	slices.Sort(out)
	return out
}

// sorted is ids sorted.
func sorted(ids ...string) []string { return slices.Sorted(slices.Values(ids)) }

// TestOpenSandboxSandboxes drives sandboxes through /v1 as OpenSandbox's
// SDKs do, and checks each change through E2B's API as well: listing
// with its filters and pages, renewing, endpoints, metadata patches,
// pause and resume, kill; a sandbox made through either API is the
// other's too; another key's sandbox is not there.
func TestOpenSandboxSandboxes(t *testing.T) {
	cp := servertest.Start(t, 2)
	o := newOSBAPI(t, cp)
	key, other := cp.Keys[0], cp.Keys[1]

	created := time.Now()
	a := o.create(`{"image":{"uri":"base"},"timeout":600,"metadata":{"suite":"osb","n":"1"}}`, key)
	b := o.create(`{"image":{"uri":"base"},"timeout":600,"metadata":{"suite":"osb","n":"2"}}`, key)
	// One of E2B's.
	var e struct{ SandboxID string }
	if r := o.e2b("POST", "/v2/sandboxes", `{"templateID":"base","timeout":600,"metadata":{"suite":"e2b"}}`, key); r.status != http.StatusCreated {
		t.Fatalf("E2B create: %d %s", r.status, r.body)
	} else {
		r.decode(t, &e)
	}
	theirs := o.create(`{"image":{"uri":"base"},"timeout":600,"metadata":{"suite":"osb"}}`, other)

	t.Run("list", func(t *testing.T) {
		o := o.with(t)
		tests := []struct {
			query       string
			want        []string
			total       int
			hasNextPage bool
		}{
			{"", sorted(a.ID, b.ID, e.SandboxID), 3, false},
			{"?metadata=" + url.QueryEscape("suite=osb"), sorted(a.ID, b.ID), 2, false},
			{"?metadata=" + url.QueryEscape("suite=osb&n=2"), []string{b.ID}, 1, false},
			{"?metadata=" + url.QueryEscape("suite=e2b"), []string{e.SandboxID}, 1, false},
			{"?metadata=" + url.QueryEscape("suite=none"), nil, 0, false},
			{"?state=Running", sorted(a.ID, b.ID, e.SandboxID), 3, false},
			{"?state=running&state=Paused", sorted(a.ID, b.ID, e.SandboxID), 3, false},
			{"?state=Paused", nil, 0, false},
			{"?state=Pending", nil, 0, false},
			{"?pageSize=2&page=1", nil, 3, true}, // which two: newest first
			{"?pageSize=2&page=2", nil, 3, false},
			{"?pageSize=2&page=3", nil, 3, false},
			{"?pageSize=200&page=1", sorted(a.ID, b.ID, e.SandboxID), 3, false},
		}
		for _, tc := range tests {
			r := o.osb("GET", "/v1/sandboxes"+tc.query, "", key)
			var p listPage
			r.decode(t, &p)
			if r.status != http.StatusOK || p.Pagination.TotalItems != tc.total || p.Pagination.HasNextPage != tc.hasNextPage {
				t.Errorf("%s: %d %s; want %d items in all, hasNextPage %v", tc.query, r.status, r.body, tc.total, tc.hasNextPage)
			}
			if tc.want != nil && !slices.Equal(p.ids(), tc.want) {
				t.Errorf("%s: items %v, want %v", tc.query, p.ids(), tc.want)
			}
			if tc.want == nil && tc.total == 0 && len(p.Items) != 0 {
				t.Errorf("%s: items %v, want none", tc.query, p.ids())
			}
		}
		// Pages: 2, 1, then none, newest first, together all three.
		var seen []string
		for page, n := range []int{2, 1, 0} {
			var p listPage
			o.osb("GET", fmt.Sprintf("/v1/sandboxes?pageSize=2&page=%d", page+1), "", key).decode(t, &p)
			if len(p.Items) != n || p.Pagination.Page != page+1 || p.Pagination.PageSize != 2 || p.Pagination.TotalPages != 2 {
				t.Errorf("page %d: %d items, pagination %+v; want %d items of 2 pages", page+1, len(p.Items), p.Pagination, n)
			}
			seen = append(seen, p.ids()...)
		}
		if slices.Sort(seen); !slices.Equal(seen, sorted(a.ID, b.ID, e.SandboxID)) {
			t.Errorf("the pages hold %v, want each sandbox once", seen)
		}
		for _, q := range []string{"?pageSize=0", "?pageSize=201", "?page=0", "?page=x", "?pageSize=-1", "?metadata=%25zz"} {
			r := o.osb("GET", "/v1/sandboxes"+q, "", key)
			if e := r.err(t); r.status != http.StatusBadRequest || e.Code != "SANDBOX::INVALID_PARAMETER" {
				t.Errorf("%s: %d %s, want 400 SANDBOX::INVALID_PARAMETER", q, r.status, r.body)
			}
		}
		var p listPage
		o.osb("GET", "/v1/sandboxes", "", other).decode(t, &p)
		if !slices.Equal(p.ids(), []string{theirs.ID}) {
			t.Errorf("the other key lists %v, want only its own %s", p.ids(), theirs.ID)
		}
	})

	t.Run("not found", func(t *testing.T) {
		o := o.with(t)
		for _, c := range []struct{ method, path, body, key string }{
			{"GET", "/v1/sandboxes/i0000000000000000nope", "", key},
			{"DELETE", "/v1/sandboxes/i0000000000000000nope", "", key},
			{"GET", "/v1/sandboxes/" + theirs.ID, "", key},
			{"DELETE", "/v1/sandboxes/" + theirs.ID, "", key},
			{"POST", "/v1/sandboxes/" + theirs.ID + "/pause", "", key},
			{"POST", "/v1/sandboxes/" + theirs.ID + "/resume", "", key},
			{"POST", "/v1/sandboxes/" + theirs.ID + "/renew-expiration", `{"expiresAt":"` + time.Now().Add(time.Hour).Format(time.RFC3339) + `"}`, key},
			{"PATCH", "/v1/sandboxes/" + theirs.ID + "/metadata", `{"a":"b"}`, key},
			{"GET", "/v1/sandboxes/" + theirs.ID + "/endpoints/44772", "", key},
			{"POST", "/v1/sandboxes/" + theirs.ID + "/snapshots", `{}`, key},
		} {
			r := o.osb(c.method, c.path, c.body, c.key)
			if e := r.err(t); r.status != http.StatusNotFound || e.Code != "HUTCH::SANDBOX_NOT_FOUND" {
				t.Errorf("%s %s: %d %s, want 404 HUTCH::SANDBOX_NOT_FOUND", c.method, c.path, r.status, r.body)
			}
		}
		for _, k := range []string{"", "e2b_0000000000000000000000000000000000000000"} {
			r := o.osb("GET", "/v1/sandboxes/"+a.ID, "", k)
			if e := r.err(t); r.status != http.StatusUnauthorized || e.Code != "HUTCH::UNAUTHORIZED" {
				t.Errorf("GET with key %q: %d %s, want 401 HUTCH::UNAUTHORIZED", k, r.status, r.body)
			}
		}
		// E2B's key header serves too; paths Hutch does not serve under
		// /v1 are OpenSandbox's 404.
		if r := o.send("GET", "/v1/sandboxes/"+a.ID, "", http.Header{"X-Api-Key": {key}}); r.status != http.StatusOK {
			t.Errorf("GET with X-API-KEY: %d %s", r.status, r.body)
		}
		for _, c := range []struct{ method, path string }{{"GET", "/v1/nope"}, {"PUT", "/v1/sandboxes"}, {"POST", "/v1/sandboxes/" + a.ID + "/fork"}} {
			r := o.sendUnlisted(c.method, c.path, "", http.Header{"Open-Sandbox-Api-Key": {key}})
			if e := r.err(t); r.status != http.StatusNotFound || e.Code != "HUTCH::NOT_FOUND" {
				t.Errorf("%s %s: %d %s, want 404 HUTCH::NOT_FOUND", c.method, c.path, r.status, r.body)
			}
		}
	})

	t.Run("metrics events", func(t *testing.T) {
		o := o.with(t)
		for _, tc := range []struct {
			body   string
			status int
		}{
			{`{"eventType":"sandbox.create","sandboxId":"` + a.ID + `","createDurationMs":120,"success":true}`, 204},
			{`{}`, 204},
			{`[1]`, 400},
			{``, 400},
			{`{"big":"` + strings.Repeat("x", 64<<10) + `"}`, 413},
		} {
			r := o.osb("POST", "/v1/metrics/events", tc.body, key)
			if r.status != tc.status {
				t.Errorf("POST /v1/metrics/events %.40s: %d %s, want %d", tc.body, r.status, r.body, tc.status)
			}
		}
		if r := o.osb("POST", "/v1/metrics/events", `{}`, ""); r.status != http.StatusUnauthorized {
			t.Errorf("without a key: %d %s, want 401", r.status, r.body)
		}
	})

	t.Run("renew", func(t *testing.T) {
		o := o.with(t)
		renew := func(at time.Time) answer {
			return o.osb("POST", "/v1/sandboxes/"+a.ID+"/renew-expiration", `{"expiresAt":"`+at.UTC().Format(time.RFC3339Nano)+`"}`, key)
		}
		for _, tc := range []struct {
			name string
			r    answer
			code string
		}{
			{"in the past", renew(time.Now().Add(-time.Minute)), "HUTCH::INVALID_EXPIRATION"},
			{"before the current expiry", renew(created.Add(5 * time.Minute)), "HUTCH::EXPIRATION_NOT_EXTENDED"},
			{"past a day", renew(time.Now().Add(25 * time.Hour)), "HUTCH::INVALID_EXPIRATION"},
			{"not a time", o.osb("POST", "/v1/sandboxes/"+a.ID+"/renew-expiration", `{"expiresAt":"tomorrow"}`, key), "SANDBOX::INVALID_PARAMETER"},
			{"no time", o.osb("POST", "/v1/sandboxes/"+a.ID+"/renew-expiration", `{}`, key), "SANDBOX::INVALID_PARAMETER"},
		} {
			if e := tc.r.err(t); tc.r.status != http.StatusBadRequest || e.Code != tc.code {
				t.Errorf("%s: %d %s, want 400 %s", tc.name, tc.r.status, tc.r.body, tc.code)
			}
		}
		if end := o.e2bGet(a.ID, key).EndAt; !near(end, created.Add(600*time.Second)) {
			t.Errorf("after refused renewals E2B's endAt is %v, want %v", end, created.Add(600*time.Second))
		}
		want := time.Now().Add(30 * time.Minute)
		r := renew(want)
		var got struct{ ExpiresAt time.Time }
		r.decode(t, &got)
		if r.status != http.StatusOK || !near(got.ExpiresAt, want) {
			t.Errorf("renew to +30 min: %d %s, want 200 and %v", r.status, r.body, want)
		}
		if end := o.e2bGet(a.ID, key).EndAt; !near(end, want) {
			t.Errorf("E2B's endAt %v, want %v", end, want)
		}
		var sb osbSandbox
		o.osb("GET", "/v1/sandboxes/"+a.ID, "", key).decode(t, &sb)
		if sb.ExpiresAt == nil || !near(*sb.ExpiresAt, want) {
			t.Errorf("GET answers expiresAt %v, want %v", sb.ExpiresAt, want)
		}
	})

	t.Run("endpoints", func(t *testing.T) {
		o := o.with(t)
		host := strings.TrimPrefix(cp.URL, "http://")
		var ep struct {
			Endpoint string
			Headers  map[string]string
		}
		r := o.osb("GET", "/v1/sandboxes/"+a.ID+"/endpoints/44772", "", key)
		r.decode(t, &ep)
		// The SDKs then send policy calls to /networkpolicy, not to a
		// sidecar's port.
		if origin := r.header.Get("OPEN-SANDBOX-ORIGIN"); origin != "template" {
			t.Errorf("OPEN-SANDBOX-ORIGIN %q, want template", origin)
		}
		token := o.e2bGet(a.ID, key).EnvdAccessToken
		if ep.Endpoint != host+"/v1/sandboxes/"+a.ID+"/proxy/44772" || token == "" || ep.Headers["X-EXECD-ACCESS-TOKEN"] != token {
			t.Errorf("execd endpoint %+v; want %s/v1/sandboxes/%s/proxy/44772 with X-EXECD-ACCESS-TOKEN %q (E2B's envdAccessToken)", ep, host, a.ID, token)
		}
		ep.Headers = nil
		o.osb("GET", "/v1/sandboxes/"+a.ID+"/endpoints/8080", "", key).decode(t, &ep)
		if ep.Endpoint != host+"/v1/sandboxes/"+a.ID+"/proxy/8080" || len(ep.Headers) != 0 {
			t.Errorf("port 8080's endpoint %+v; want %s/v1/sandboxes/%s/proxy/8080 and no headers (the sandbox is open to public traffic)", ep, host, a.ID)
		}
		for _, tc := range []struct {
			path   string
			status int
			code   string
		}{
			{"/endpoints/0", 400, "SANDBOX::INVALID_PARAMETER"},
			{"/endpoints/65536", 400, "SANDBOX::INVALID_PARAMETER"},
			{"/endpoints/http", 400, "SANDBOX::INVALID_PARAMETER"},
			{"/endpoints/44772?expires=4102444800", 501, "SANDBOX::API_NOT_SUPPORTED"},
		} {
			r := o.osb("GET", "/v1/sandboxes/"+a.ID+tc.path, "", key)
			if e := r.err(t); r.status != tc.status || e.Code != tc.code {
				t.Errorf("%s: %d %s, want %d %s", tc.path, r.status, r.body, tc.status, tc.code)
			}
		}
	})

	t.Run("metadata", func(t *testing.T) {
		o := o.with(t)
		patch := func(body string) answer { return o.osb("PATCH", "/v1/sandboxes/"+b.ID+"/metadata", body, key) }
		for _, tc := range []struct {
			patch string
			want  map[string]string
		}{
			{`{"team":"platform","stage":"dev"}`, map[string]string{"suite": "osb", "n": "2", "team": "platform", "stage": "dev"}},
			{`{"team":"ml","stage":null}`, map[string]string{"suite": "osb", "n": "2", "team": "ml"}},
			{`{"never":null}`, map[string]string{"suite": "osb", "n": "2", "team": "ml"}},
			{`{}`, map[string]string{"suite": "osb", "n": "2", "team": "ml"}},
			{`{"example.com/owner":"me"}`, map[string]string{"suite": "osb", "n": "2", "team": "ml", "example.com/owner": "me"}},
		} {
			r := patch(tc.patch)
			var sb osbSandbox
			r.decode(t, &sb)
			if rt := sb.Metadata["hutch.runtime"]; rt != "native" {
				t.Errorf("PATCH %s: hutch.runtime %q, want native (the backend, always shown)", tc.patch, rt)
			}
			delete(sb.Metadata, "hutch.runtime")
			if r.status != http.StatusOK || !maps.Equal(sb.Metadata, tc.want) {
				t.Errorf("PATCH %s: %d %s, want metadata %v", tc.patch, r.status, r.body, tc.want)
			}
			got := o.e2bGet(b.ID, key).Metadata
			delete(got, "hutch.runtime")
			if !maps.Equal(got, tc.want) {
				t.Errorf("after PATCH %s E2B sees %v, want %v", tc.patch, got, tc.want)
			}
		}
		for _, tc := range []struct{ patch, code string }{
			{`{"team":"not a label"}`, "SANDBOX::INVALID_METADATA_LABEL"},
			{`{"team":"-dash"}`, "SANDBOX::INVALID_METADATA_LABEL"},
			{`{"team":"` + strings.Repeat("x", 64) + `"}`, "SANDBOX::INVALID_METADATA_LABEL"},
			{`{"bad key":"x"}`, "SANDBOX::INVALID_METADATA_LABEL"},
			{`{"team":7}`, "SANDBOX::INVALID_PARAMETER"},
			{`["team"]`, "SANDBOX::INVALID_PARAMETER"},
			{`{"opensandbox.io/x":"1"}`, "SANDBOX::INVALID_PARAMETER"},
			{`{"hutch.runtime":"gvisor"}`, "SANDBOX::INVALID_PARAMETER"},
		} {
			r := patch(tc.patch)
			if e := r.err(t); r.status != http.StatusBadRequest || e.Code != tc.code {
				t.Errorf("PATCH %s: %d %s, want 400 %s", tc.patch, r.status, r.body, tc.code)
			}
		}
		if got := o.e2bGet(b.ID, key).Metadata; got["team"] != "ml" || len(got) != 5 {
			t.Errorf("refused patches changed the metadata: %v", got)
		}
	})

	t.Run("pause and resume", func(t *testing.T) {
		o := o.with(t)
		state := func() (osb, e2b string) {
			var sb osbSandbox
			o.osb("GET", "/v1/sandboxes/"+b.ID, "", key).decode(t, &sb)
			// A paused sandbox does not expire; a running one does.
			if (sb.ExpiresAt == nil) != (sb.Status.State == "Paused") {
				t.Errorf("a %s sandbox answers expiresAt %v", sb.Status.State, sb.ExpiresAt)
			}
			return sb.Status.State, o.e2bGet(b.ID, key).State
		}
		steps := []struct {
			path, want, code string
			status           int
			osbState, e2b    string
		}{
			{"/pause", "paused", "", http.StatusAccepted, "Paused", "paused"},
			{"/pause", "paused again", "HUTCH::INVALID_STATE", http.StatusConflict, "Paused", "paused"},
			{"/resume", "resumed", "", http.StatusAccepted, "Running", "running"},
			{"/resume", "resumed again", "HUTCH::INVALID_STATE", http.StatusConflict, "Running", "running"},
		}
		for _, s := range steps {
			r := o.osb("POST", "/v1/sandboxes/"+b.ID+s.path, "", key)
			if r.status != s.status {
				t.Errorf("%s: %d %s, want %d", s.want, r.status, r.body, s.status)
			}
			if s.code != "" {
				if e := r.err(t); e.Code != s.code {
					t.Errorf("%s: code %q, want %s", s.want, e.Code, s.code)
				}
			}
			if osb, e2b := state(); osb != s.osbState || e2b != s.e2b {
				t.Errorf("%s: state %q (E2B's %q), want %q (%q)", s.want, osb, e2b, s.osbState, s.e2b)
			}
			if s.path == "/pause" && s.status == http.StatusAccepted {
				var p listPage
				o.osb("GET", "/v1/sandboxes?state=Paused", "", key).decode(t, &p)
				if !slices.Equal(p.ids(), []string{b.ID}) {
					t.Errorf("state=Paused lists %v, want %s", p.ids(), b.ID)
				}
			}
		}
		// A resumed sandbox runs: E2B's router reaches its envd.
		req, _ := http.NewRequest("GET", cp.URL+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", b.ID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Errorf("the resumed sandbox's envd answers %d", resp.StatusCode)
		}
	})

	t.Run("network policy", func(t *testing.T) {
		o := o.with(t)
		type policy struct {
			Status string `json:"status"`
			Mode   string `json:"mode"`
			Policy struct {
				DefaultAction string `json:"defaultAction"`
				Egress        []struct {
					Action string `json:"action"`
					Target string `json:"target"`
				} `json:"egress"`
			} `json:"policy"`
		}
		// rules is the policy as "default action:target ...".
		rules := func(p policy) string {
			out := p.Policy.DefaultAction
			for _, r := range p.Policy.Egress {
				out += " " + r.Action + ":" + r.Target
			}
			return out
		}
		path := "/v1/sandboxes/" + b.ID + "/networkpolicy"
		steps := []struct {
			method, body, mode, want string
			allowOut, denyOut        []string // E2B's view
		}{
			{"GET", "", "allow_all", "allow", nil, nil},
			{"PUT", `{"defaultAction":"deny","egress":[{"action":"allow","target":"1.1.1.1"},{"action":"allow","target":"example.com"}]}`,
				"rules", "deny allow:1.1.1.1 allow:example.com", []string{"1.1.1.1", "example.com"}, []string{"0.0.0.0/0"}},
			{"PATCH", `[{"action":"deny","target":"example.com"},{"action":"allow","target":"8.8.8.0/24"},{"action":"allow","target":"example.com"}]`,
				"rules", "deny allow:1.1.1.1 allow:8.8.8.0/24 deny:example.com", []string{"1.1.1.1", "8.8.8.0/24"}, []string{"example.com", "0.0.0.0/0"}},
			{"DELETE", `["example.com","never.example"]`, "rules", "deny allow:1.1.1.1 allow:8.8.8.0/24", []string{"1.1.1.1", "8.8.8.0/24"}, []string{"0.0.0.0/0"}},
			{"PUT", `{"defaultAction":"deny"}`, "deny_all", "deny", nil, []string{"0.0.0.0/0"}},
			{"PUT", `{"defaultAction":"allow","egress":[{"action":"deny","target":"bad.example.com"}]}`, "rules", "allow deny:bad.example.com", nil, []string{"bad.example.com"}},
			{"PUT", `{}`, "allow_all", "allow", nil, nil},
		}
		for _, st := range steps {
			r := o.osb(st.method, path, st.body, key)
			var p policy
			r.decode(t, &p)
			if r.status != http.StatusOK || p.Status != "ok" || p.Mode != st.mode || sortedRules(rules(p)) != sortedRules(st.want) {
				t.Errorf("%s %s: %d %s; want mode %s, policy %q", st.method, st.body, r.status, r.body, st.mode, st.want)
			}
			var allow, deny []string
			if n := o.e2bGet(b.ID, key).Network; n != nil {
				allow, deny = n.AllowOut, n.DenyOut
			}
			if !sameSet(allow, st.allowOut) || !sameSet(deny, st.denyOut) {
				t.Errorf("after %s %s E2B sees allowOut %v, denyOut %v; want %v, %v", st.method, st.body, allow, deny, st.allowOut, st.denyOut)
			}
		}
		for _, tc := range []struct {
			method, body, key string
			status            int
			code              string
		}{
			{"PUT", `{"defaultAction":"maybe"}`, key, 400, "SANDBOX::INVALID_PARAMETER"},
			{"PUT", `{"egress":[{"action":"log","target":"1.1.1.1"}]}`, key, 400, "SANDBOX::INVALID_PARAMETER"},
			{"PATCH", `{"action":"allow"}`, key, 400, "SANDBOX::INVALID_PARAMETER"},
			{"DELETE", ``, key, 400, "SANDBOX::INVALID_PARAMETER"},
			{"PUT", `{}`, other, 404, "HUTCH::SANDBOX_NOT_FOUND"},
			{"GET", ``, other, 404, "HUTCH::SANDBOX_NOT_FOUND"},
			{"GET", ``, "", 401, "HUTCH::UNAUTHORIZED"},
		} {
			r := o.osb(tc.method, path, tc.body, tc.key)
			if e := r.err(t); r.status != tc.status || e.Code != tc.code {
				t.Errorf("%s %s: %d %s, want %d %s", tc.method, tc.body, r.status, r.body, tc.status, tc.code)
			}
		}
		// A paused sandbox's network is not changed.
		if r := o.osb("POST", "/v1/sandboxes/"+b.ID+"/pause", "", key); r.status != http.StatusAccepted {
			t.Fatalf("pause: %d %s", r.status, r.body)
		}
		r := o.osb("PUT", path, `{"defaultAction":"deny"}`, key)
		if e := r.err(t); r.status != http.StatusConflict || e.Code != "HUTCH::INVALID_STATE" {
			t.Errorf("PUT on a paused sandbox: %d %s, want 409 HUTCH::INVALID_STATE", r.status, r.body)
		}
		if r := o.osb("POST", "/v1/sandboxes/"+b.ID+"/resume", "", key); r.status != http.StatusAccepted {
			t.Fatalf("resume: %d %s", r.status, r.body)
		}
	})

	t.Run("across the APIs", func(t *testing.T) {
		o := o.with(t)
		var sb osbSandbox
		r := o.osb("GET", "/v1/sandboxes/"+e.SandboxID, "", key)
		r.decode(t, &sb)
		if r.status != http.StatusOK || sb.Image == nil || sb.Image.URI != "base" || sb.Status.State != "Running" || sb.Metadata["suite"] != "e2b" {
			t.Errorf("E2B's sandbox through /v1: %d %s", r.status, r.body)
		}
		if r := o.osb("DELETE", "/v1/sandboxes/"+e.SandboxID, "", key); r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Errorf("kill E2B's sandbox through /v1: %d %s, want 204", r.status, r.body)
		}
		if r := o.e2b("GET", "/sandboxes/"+e.SandboxID, "", key); r.status != http.StatusNotFound {
			t.Errorf("E2B's GET of the sandbox /v1 killed: %d %s, want 404", r.status, r.body)
		}
		if r := o.e2b("DELETE", "/sandboxes/"+a.ID, "", key); r.status != http.StatusNoContent {
			t.Errorf("E2B's kill of /v1's sandbox: %d %s, want 204", r.status, r.body)
		}
		r = o.osb("GET", "/v1/sandboxes/"+a.ID, "", key)
		if e := r.err(t); r.status != http.StatusNotFound || e.Code != "HUTCH::SANDBOX_NOT_FOUND" {
			t.Errorf("GET of the sandbox E2B killed: %d %s, want 404 HUTCH::SANDBOX_NOT_FOUND", r.status, r.body)
		}
		if r := o.osb("DELETE", "/v1/sandboxes/"+a.ID, "", key); r.status != http.StatusNotFound {
			t.Errorf("kill again: %d %s, want 404", r.status, r.body)
		}
	})
}

// osbSnapshot is a snapshot as /v1 answers it.
type osbSnapshot struct {
	ID        string `json:"id"`
	SandboxID string `json:"sandboxId"`
	Name      string `json:"name"`
	Status    struct {
		State string `json:"state"`
	} `json:"status"`
	CreatedAt time.Time `json:"createdAt"`
}

// TestOpenSandboxSnapshots: a snapshot taken through /v1 is Ready at
// once, listed, fetched, and made into a sandbox with the files it had;
// deleted, it is gone; snapshots are each key's own.
func TestOpenSandboxSnapshots(t *testing.T) {
	// Snapshots write to the template store: the test's own.
	cp := servertest.StartWith(t, 2, servertest.Options{Templates: testenv.PrivateTemplates(t)})
	o := newOSBAPI(t, cp)
	key, other := cp.Keys[0], cp.Keys[1]
	sb := o.create(`{"image":{"uri":"base"},"timeout":600}`, key)
	writeFile(t, cp.URL, sb.ID, o.e2bGet(sb.ID, key).EnvdAccessToken, "/home/user/mark", "kept")

	name := fmt.Sprintf("osb-snap-%d", time.Now().UnixNano()%1e9)
	r := o.osb("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", `{"name":"`+name+`"}`, key)
	var snap osbSnapshot
	r.decode(t, &snap)
	if r.status != http.StatusAccepted || snap.ID == "" || snap.SandboxID != sb.ID || snap.Name != name || snap.Status.State != "Ready" || !near(snap.CreatedAt, time.Now()) {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	if loc := r.header.Get("Location"); loc != "/v1/snapshots/"+snap.ID {
		t.Errorf("Location %q, want /v1/snapshots/%s", loc, snap.ID)
	}
	// An unnamed one, and the refusals.
	var unnamed osbSnapshot
	o.osb("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", "", key).decode(t, &unnamed)
	if unnamed.ID == "" || unnamed.ID == snap.ID || unnamed.Name == "" {
		t.Errorf("an unnamed snapshot: %+v", unnamed)
	}
	// The other key's snapshot takes a name of its own.
	theirs := o.create(`{"image":{"uri":"base"},"timeout":600}`, other)
	theirName := name + "-theirs"
	if r := o.osb("POST", "/v1/sandboxes/"+theirs.ID+"/snapshots", `{"name":"`+theirName+`"}`, other); r.status != http.StatusAccepted {
		t.Fatalf("the other key's snapshot: %d %s", r.status, r.body)
	}
	for _, tc := range []struct {
		body, key string
		status    int
		code      string
	}{
		{`{"name":"Bad Name"}`, key, 400, "SANDBOX::INVALID_PARAMETER"},
		{`{"name":"base"}`, key, 400, "SANDBOX::INVALID_PARAMETER"}, // Hutch's own template
		{`{"name":"` + theirName + `"}`, key, 403, "HUTCH::FORBIDDEN"},
		{`{"name":"x"}`, other, 404, "HUTCH::SANDBOX_NOT_FOUND"},
		{`{"name":7}`, key, 400, "SANDBOX::INVALID_PARAMETER"},
	} {
		r := o.osb("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", tc.body, tc.key)
		if e := r.err(t); r.status != tc.status || e.Code != tc.code {
			t.Errorf("snapshot %s: %d %s, want %d %s", tc.body, r.status, r.body, tc.status, tc.code)
		}
	}

	list := func(query, k string) []string {
		t.Helper()
		r := o.osb("GET", "/v1/snapshots"+query, "", k)
		var p struct {
			Items      []osbSnapshot
			Pagination struct{ TotalItems int }
		}
		r.decode(t, &p)
		if r.status != http.StatusOK || p.Pagination.TotalItems < len(p.Items) {
			t.Errorf("GET /v1/snapshots%s: %d %s", query, r.status, r.body)
		}
		var ids []string
		for _, s := range p.Items {
			ids = append(ids, s.ID)
		}
		slices.Sort(ids)
		return ids
	}
	both := sorted(snap.ID, unnamed.ID)
	for _, tc := range []struct {
		query, key string
		want       []string
	}{
		{"", key, both},
		{"?sandboxId=" + sb.ID, key, both},
		{"?sandboxId=i0000000000000000nope", key, nil},
		{"?name=" + name, key, []string{snap.ID}},
		{"?state=Ready", key, both},
		{"?state=Creating&state=Failed", key, nil},
		{"?pageSize=1&page=2", key, nil}, // one of the two: checked by count below
	} {
		got := list(tc.query, tc.key)
		if tc.query == "?pageSize=1&page=2" {
			if len(got) != 1 {
				t.Errorf("page 2 of 1: %v, want one snapshot", got)
			}
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("GET /v1/snapshots%s: %v, want %v", tc.query, got, tc.want)
		}
	}
	if r := o.osb("GET", "/v1/snapshots?pageSize=0", "", key); r.status != http.StatusBadRequest {
		t.Errorf("pageSize 0: %d %s, want 400", r.status, r.body)
	}

	var got osbSnapshot
	if r := o.osb("GET", "/v1/snapshots/"+snap.ID, "", key); r.status != http.StatusOK {
		t.Errorf("GET the snapshot: %d %s", r.status, r.body)
	} else if r.decode(t, &got); got.ID != snap.ID || got.SandboxID != sb.ID || got.Name != name || got.Status.State != "Ready" {
		t.Errorf("GET the snapshot: %s", r.body)
	}

	// A sandbox from it has the files; OpenSandbox's GET says where it
	// came from.
	from := o.create(`{"snapshotId":"`+snap.ID+`","timeout":300}`, key)
	var fromGot osbSandbox
	o.osb("GET", "/v1/sandboxes/"+from.ID, "", key).decode(t, &fromGot)
	if fromGot.SnapshotID != snap.ID || fromGot.Image != nil {
		t.Errorf("a sandbox of the snapshot: snapshotId %q, image %+v; want %s and none", fromGot.SnapshotID, fromGot.Image, snap.ID)
	}
	if got := readFile(t, cp.URL, from.ID, o.e2bGet(from.ID, key).EnvdAccessToken, "/home/user/mark"); got != "kept" {
		t.Errorf("the sandbox of the snapshot holds %q, want the snapshot's \"kept\"", got)
	}
	if r := o.osb("POST", "/v1/sandboxes", `{"snapshotId":"`+snap.ID+`"}`, other); r.status/100 == 2 {
		t.Errorf("another key made a sandbox of the snapshot: %d %s", r.status, r.body)
	}

	// Killed before its snapshot is deleted: a sandbox of a deleted
	// snapshot makes the manager collect the store in the background
	// when it ends, which the control plane's close does not wait for,
	// and the test's template store would be removed under it.
	if r := o.osb("DELETE", "/v1/sandboxes/"+from.ID, "", key); r.status != http.StatusNoContent {
		t.Errorf("kill the snapshot's sandbox: %d %s", r.status, r.body)
	}

	notFound := func(what string, r answer) {
		t.Helper()
		if e := r.err(t); r.status != http.StatusNotFound || e.Code != "HUTCH::SNAPSHOT_NOT_FOUND" {
			t.Errorf("%s: %d %s, want 404 HUTCH::SNAPSHOT_NOT_FOUND", what, r.status, r.body)
		}
	}
	notFound("another key's GET", o.osb("GET", "/v1/snapshots/"+snap.ID, "", other))
	notFound("another key's DELETE", o.osb("DELETE", "/v1/snapshots/"+snap.ID, "", other))
	if r := o.osb("DELETE", "/v1/snapshots/"+snap.ID, "", key); r.status != http.StatusNoContent {
		t.Errorf("DELETE: %d %s, want 204", r.status, r.body)
	}
	notFound("GET after the delete", o.osb("GET", "/v1/snapshots/"+snap.ID, "", key))
	notFound("DELETE again", o.osb("DELETE", "/v1/snapshots/"+snap.ID, "", key))
	notFound("DELETE of an id no snapshot can have", o.osb("DELETE", "/v1/snapshots/Not%20An%20Id", "", key))
	notFound("a create from it", o.osb("POST", "/v1/sandboxes", `{"snapshotId":"`+snap.ID+`"}`, key))
	if got := list("", key); !slices.Equal(got, []string{unnamed.ID}) {
		t.Errorf("after the delete the list is %v, want %v", got, []string{unnamed.ID})
	}
}

// envdFiles calls envd's /files in sandbox id through E2B's router,
// with envd's access token.
func envdFiles(t *testing.T, base, id, token, method, path string, body io.Reader, contentType string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, base+"/files?path="+url.QueryEscape(path)+"&username=user", body)
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("X-Access-Token", token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writeFile writes content to path in sandbox id.
func writeFile(t *testing.T, base, id, token, path, content string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "mark")
	io.WriteString(fw, content)
	mw.Close()
	if code, body := envdFiles(t, base, id, token, "POST", path, &buf, mw.FormDataContentType()); code != http.StatusOK {
		t.Fatalf("writing %s in %s: %d %s", path, id, code, body)
	}
}

// waitFile reads path in sandbox id once it is there (up to 20 s).
func waitFile(t *testing.T, base, id, token, path string) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		code, body := envdFiles(t, base, id, token, "GET", path, nil, "")
		if code == http.StatusOK {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading %s in %s: %d %s", path, id, code, body)
		}
	}
}

// readFile reads path in sandbox id.
func readFile(t *testing.T, base, id, token, path string) string {
	t.Helper()
	code, body := envdFiles(t, base, id, token, "GET", path, nil, "")
	if code != http.StatusOK {
		t.Fatalf("reading %s in %s: %d %s", path, id, code, body)
	}
	return body
}

// echoServer is a sandbox's entrypoint: an HTTP server on ports 8000 and
// 18080 that answers each request with its path, headers and body and
// the paths its port was asked for so far.
const echoServer = `
import http.server, json, sys, threading
class Echo(http.server.BaseHTTPRequestHandler):
    seen = {}
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        port = self.server.server_address[1]
        self.seen.setdefault(port, []).append(self.path)
        out = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": body, "seen": self.seen[port]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = answer
    def log_message(self, *args):
        pass
for port in (8000, 18080):
    srv = http.server.ThreadingHTTPServer(("0.0.0.0", port), Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
threading.Event().wait()
`

// echoed is echoServer's answer.
type echoed struct {
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Seen    []string          `json:"seen"`
}

// TestOpenSandboxProxy: the endpoints /v1 hands out reach the sandbox's
// ports through the proxy (the entrypoint serving them), with the SDKs'
// credentials taken off first; the egress sidecar's port 18080 is never
// sent into the sandbox; an unknown sandbox, a bad port and a port
// nobody listens on are answered as the document says.
func TestOpenSandboxProxy(t *testing.T) {
	cp := servertest.Start(t, 2)
	o := newOSBAPI(t, cp)
	key, other := cp.Keys[0], cp.Keys[1]
	body, _ := json.Marshal(map[string]any{"image": map[string]string{"uri": "base"}, "timeout": 600,
		"entrypoint": []string{"python3", "-c", echoServer}})
	sb := o.create(string(body), key)
	token := o.e2bGet(sb.ID, key).EnvdAccessToken
	var ep struct{ Endpoint string }
	o.osb("GET", "/v1/sandboxes/"+sb.ID+"/endpoints/8000", "", key).decode(t, &ep)
	base := "http://" + ep.Endpoint
	if want := cp.URL + "/v1/sandboxes/" + sb.ID + "/proxy/8000"; base != want {
		t.Fatalf("endpoint %s, want %s", base, want)
	}
	path := strings.TrimPrefix(base, cp.URL)

	// The entrypoint is up once the proxy reaches its server.
	var r answer
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if r = o.osb("GET", path+"/ready", "", ""); r.status == http.StatusOK || time.Now().After(deadline) {
			break
		}
	}
	if r.status != http.StatusOK {
		t.Fatalf("the entrypoint's server never answered through the proxy: %d %s", r.status, r.body)
	}

	// What the SDKs send to an endpoint: their key and execd's token in
	// headers, which must not reach the sandbox, nor the key in E2B's
	// headers; everything else does, an app's own Authorization too.
	h := http.Header{"Open-Sandbox-Api-Key": {key}, "X-Execd-Access-Token": {token}, "X-Probe": {"kept"}}
	e2bKey := http.Header{"X-Api-Key": {key}, "Authorization": {"Bearer " + key}, "X-Probe": {"kept"}}
	appAuth := http.Header{"Authorization": {"Bearer app-token"}, "X-Probe": {"kept"}}
	// The key as a bearer token however the API takes it (review 29, G3).
	lowerBearer := http.Header{"Authorization": {"bearer " + key}, "X-Probe": {"kept"}}
	spacedBearer := http.Header{"Authorization": {"Bearer  " + key}, "X-Probe": {"kept"}}
	for _, c := range []struct {
		method, rest, body string
		h                  http.Header
	}{
		{"GET", "/echo?q=1", "", h},
		{"POST", "/echo", `{"hello":"sandbox"}`, h},
		{"DELETE", "/echo", "", h},
		{"GET", "/echo", "", e2bKey},
		{"GET", "/echo", "", lowerBearer},
		{"GET", "/echo", "", spacedBearer},
		{"GET", "/app", "", appAuth},
	} {
		r := o.send(c.method, path+c.rest, c.body, c.h)
		var e echoed
		r.decode(t, &e)
		if r.status != http.StatusOK || e.Path != c.rest || e.Body != c.body || e.Headers["x-probe"] != "kept" {
			t.Errorf("%s %s: %d %s; want the sandbox's echo of %s with its body and X-Probe", c.method, c.rest, r.status, r.body, c.rest)
		}
		// The answer is the API's origin's: a sandboxed one to a browser.
		if csp := r.header.Get("Content-Security-Policy"); csp != "sandbox" {
			t.Errorf("%s %s: Content-Security-Policy %q, want sandbox", c.method, c.rest, csp)
		}
		if c.rest == "/app" && e.Headers["authorization"] != "Bearer app-token" {
			t.Errorf("the app's own Authorization did not reach it: %v", e.Headers)
		}
		for _, secret := range []string{"open-sandbox-api-key", "x-execd-access-token", "x-api-key"} {
			if v, ok := e.Headers[secret]; ok {
				t.Errorf("%s %s: the sandbox saw %s: %q", c.method, c.rest, secret, v)
			}
		}
		for name, v := range e.Headers {
			if strings.Contains(v, key) || strings.Contains(v, token) {
				t.Errorf("%s %s: the sandbox saw the API key or execd's token in %s", c.method, c.rest, name)
			}
		}
	}

	// 18080: answered 501 here, never sent into the sandbox, whose
	// server on that port does answer E2B's router.
	for _, m := range []string{"GET", "PATCH"} {
		r := o.send(m, "/v1/sandboxes/"+sb.ID+"/proxy/18080/policy", `{"defaultAction":"allow"}`, h)
		if e := r.err(t); r.status != http.StatusNotImplemented || e.Code != "SANDBOX::API_NOT_SUPPORTED" {
			t.Errorf("%s 18080/policy: %d %s, want 501 SANDBOX::API_NOT_SUPPORTED", m, r.status, r.body)
		}
	}
	direct := o.send("GET", "/direct", "", http.Header{"E2b-Sandbox-Id": {sb.ID}, "E2b-Sandbox-Port": {"18080"}})
	var e echoed
	direct.decode(t, &e)
	if direct.status != http.StatusOK || !slices.Equal(e.Seen, []string{"/direct"}) {
		t.Errorf("port 18080 through E2B's router: %d %s; want it to have seen only /direct", direct.status, direct.body)
	}

	// execd (44772) takes the endpoint's token, or the owner's API key,
	// and nothing else; whatever it is refused for reads as no sandbox.
	ping := "/v1/sandboxes/" + sb.ID + "/proxy/44772/ping"
	for _, tc := range []struct {
		name   string
		h      http.Header
		status int
	}{
		{"the endpoint's token", http.Header{"X-Execd-Access-Token": {token}}, 200},
		{"the owner's key", http.Header{"Open-Sandbox-Api-Key": {key}}, 200},
		{"nothing", http.Header{}, 404},
		{"another token", http.Header{"X-Execd-Access-Token": {strings.Repeat("0", len(token))}}, 404},
		{"another key's key", http.Header{"Open-Sandbox-Api-Key": {other}}, 404},
		{"a wrong token and the owner's key", http.Header{"X-Execd-Access-Token": {"nope"}, "Open-Sandbox-Api-Key": {key}}, 404},
	} {
		r := o.send("GET", ping, "", tc.h)
		if r.status != tc.status {
			t.Errorf("execd's /ping with %s: %d %s, want %d", tc.name, r.status, r.body, tc.status)
		}
		if tc.status == 404 {
			if e := r.err(t); e.Code != "HUTCH::SANDBOX_NOT_FOUND" {
				t.Errorf("execd's /ping with %s: code %q, want HUTCH::SANDBOX_NOT_FOUND", tc.name, e.Code)
			}
		}
	}

	// Hutch's own answers.
	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/sandboxes/i0000000000000000nope/proxy/8000/echo", 404, "HUTCH::SANDBOX_NOT_FOUND"},
		{"/v1/sandboxes/" + sb.ID + "/proxy/0/echo", 400, "SANDBOX::INVALID_PARAMETER"},
		{"/v1/sandboxes/" + sb.ID + "/proxy/65536/echo", 400, "SANDBOX::INVALID_PARAMETER"},
		{"/v1/sandboxes/" + sb.ID + "/proxy/http/echo", 400, "SANDBOX::INVALID_PARAMETER"},
	} {
		r := o.osb("GET", tc.path, "", key)
		if e := r.err(t); r.status != tc.status || e.Code != tc.code {
			t.Errorf("GET %s: %d %s, want %d %s", tc.path, r.status, r.body, tc.status, tc.code)
		}
	}
	closed := o.osb("GET", "/v1/sandboxes/"+sb.ID+"/proxy/9/echo", "", key)
	var edge struct {
		SandboxID string `json:"sandboxId"`
		Port      int    `json:"port"`
		Code      int    `json:"code"`
	}
	closed.decode(t, &edge)
	if closed.status != http.StatusBadGateway || edge.SandboxID != sb.ID || edge.Port != 9 || edge.Code != 502 {
		t.Errorf("a port nobody listens on: %d %s, want E2B's 502", closed.status, closed.body)
	}

	// Killed, its ports are gone too.
	o.osb("DELETE", "/v1/sandboxes/"+sb.ID, "", key)
	if r := o.osb("GET", path+"/echo", "", ""); r.status != http.StatusNotFound {
		t.Errorf("a killed sandbox's port: %d %s, want 404", r.status, r.body)
	}
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// sortedRules is a policy written "default rule rule ..." with its rules
// sorted: what a rule allows or denies does not depend on their order in
// Hutch (allowOut wins over denyOut).
func sortedRules(p string) string {
	f := strings.Fields(p)
	if len(f) > 1 {
		slices.Sort(f[1:])
	}
	return strings.Join(f, " ")
}
