// Package metrics_test scrapes the Prometheus metrics of a real `hutch
// serve` built from this checkout, on its own listener (--metrics-listen)
// and on the API's behind a key (--metrics-api), parses them with
// Prometheus' own text parser, and holds their values to what the test did
// through the Go SDK: creates from the warm pool and on demand, creates
// refused, kills, pauses, resumes, commands through the edge.
package metrics_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) {
	testenv.RequireRootMain("hutch serve runs sandboxes: namespaces, cgroups and mounts")
	code := m.Run()
	hutchBin.Remove()
	os.Exit(code)
}

// sandboxMemory is hutch serve's memory limit of every sandbox.
const sandboxMemory = 512 << 20

// scrape is one scrape of the metrics, parsed.
type scrape map[string]*dto.MetricFamily

// get scrapes url with the headers given ("Name: value" each), as a
// Prometheus server would, and parses the answer with Prometheus' text
// parser; it fails the test unless the answer is a 200 that parses.
func get(t *testing.T, url string, headers ...string) scrape {
	t.Helper()
	resp := request(t, url, headers...)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("GET %s: Content-Type %q, want Prometheus' text format", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: the text parser: %v", url, err)
	}
	return fams
}

// request sends GET url with headers; the caller closes the body.
func request(t *testing.T, url string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp
}

// sum is the sum of the values of family name's series whose labels
// include want ("k=v" each; a histogram counts its observations): 0 when
// there is none, as Prometheus' sum() reads a series that is absent.
func (s scrape) sum(name string, want ...string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	total := 0.0
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for _, kv := range want {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// check is one expectation of a scrape.
type check struct {
	name   string
	labels []string
	want   float64
}

// expect fails the test for each check the scrape does not meet.
func (s scrape) expect(t *testing.T, when string, checks ...check) {
	t.Helper()
	for _, c := range checks {
		if got := s.sum(c.name, c.labels...); got != c.want {
			t.Errorf("%s: %s%v = %v, want %v", when, c.name, c.labels, got, c.want)
		}
	}
}

func TestMetricsFollowActions(t *testing.T) {
	metricsAddr := hutchtest.FreeAddr(t)
	// One warm sandbox, two per key: the third create is refused.
	srv := hutchtest.StartServe(t, hutchBin.Path(t), "--warm", "1", "--max-sandboxes-per-key", "2",
		"--metrics-listen", metricsAddr, "--metrics-api")
	own := "http://" + metricsAddr + "/metrics"
	cfg := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
	ctx := t.Context()

	// The warm pool fills: the census reads it at each scrape.
	var s scrape
	waitFor(t, time.Minute, "the warm pool to fill", func() bool {
		s = get(t, own)
		return s.sum("hutch_pool_ready_sandboxes", "template=base") == 1
	})
	s.expect(t, "at start",
		check{"hutch_pool_size_sandboxes", []string{"template=base"}, 1},
		check{"hutch_sandboxes", nil, 0},
		check{"hutch_sandbox_creates_total", nil, 0},
	)
	// Go's runtime, the process and the host, beside Hutch's own.
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "hutch_node_cpus", "hutch_node_memory_bytes", "hutch_node_memory_available_bytes"} {
		if s.sum(name) <= 0 {
			t.Errorf("%s = %v, want > 0", name, s.sum(name))
		}
	}

	// Two creates: the first takes the warm sandbox; the second finds the
	// pool empty unless its refill was quicker.
	a, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfg})
	if err != nil {
		t.Fatalf("create a: %v", err)
	}
	b, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfg})
	if err != nil {
		t.Fatalf("create b: %v", err)
	}
	t.Cleanup(func() {
		for _, sbx := range []*sdk.Sandbox{a, b} {
			sbx.Kill(context.Background())
		}
	})
	// A third is past the key's cap; a template that does not exist is
	// not found. Both are creates that failed, by outcome.
	if _, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfg}); !errors.Is(err, sdk.ErrRateLimit) {
		t.Fatalf("create past the cap: %v, want a rate limit (429)", err)
	}
	if _, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfg, Template: "no-such-template"}); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("create of no template: %v, want not found", err)
	}
	// A command through the edge to b's envd, and a request for a
	// sandbox that does not exist.
	if res, err := b.Commands.Run(ctx, "echo hello", nil); err != nil || strings.TrimSpace(res.Stdout) != "hello" {
		t.Fatalf("echo: %v, %+v", err, res)
	}
	resp := request(t, srv.URL()+"/health", "E2b-Sandbox-Id: nosuchsandbox0")
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a request for no sandbox: %s, want 502", resp.Status)
	}

	s = get(t, own)
	hits, misses := s.sum("hutch_pool_takes_total", "template=base", "result=hit"), s.sum("hutch_pool_takes_total", "template=base", "result=miss")
	if hits < 1 || hits+misses != 2 {
		t.Errorf("pool takes: %v hits, %v misses; want the first create a hit, two takes in all", hits, misses)
	}
	s.expect(t, "after two creates and two refused",
		check{"hutch_sandboxes", []string{"state=running", "template=base"}, 2},
		check{"hutch_sandbox_creates_total", []string{"outcome=success"}, 2},
		check{"hutch_sandbox_creates_total", []string{"outcome=limit"}, 1},
		check{"hutch_sandbox_creates_total", []string{"outcome=not_found"}, 1},
		check{"hutch_sandbox_create_duration_seconds", []string{"path=pool"}, hits},
		check{"hutch_sandbox_create_duration_seconds", []string{"path=cold"}, misses},
		check{"hutch_sandbox_create_duration_seconds", []string{"path=snapshot"}, 0},
		check{"hutch_edge_errors_total", []string{"target=envd", "reason=sandbox_not_found"}, 1},
		// The API's creates by route: two made, two refused.
		check{"hutch_api_requests_total", []string{"route=POST /v2/sandboxes", "code=201"}, 2},
		check{"hutch_api_requests_total", []string{"route=POST /v2/sandboxes", "code=429"}, 1},
		check{"hutch_api_requests_total", []string{"route=POST /v2/sandboxes", "code=404"}, 1},
	)
	if n := s.sum("hutch_edge_requests_total", "target=envd", "code=2xx"); n < 1 {
		t.Errorf("edge requests to envd answered 2xx: %v, want the command's", n)
	}
	if n := s.sum("hutch_edge_requests_total", "target=envd", "code=5xx"); n != 1 {
		t.Errorf("edge requests to envd answered 5xx: %v, want the one for no sandbox", n)
	}

	// Kill a, twice: the second finds nothing.
	if err := a.Kill(ctx); err != nil {
		t.Fatalf("kill a: %v", err)
	}
	if err := a.Kill(ctx); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("kill a again: %v, want not found", err)
	}
	// b paused as its files: kept in the store only, no longer running.
	if _, err := b.Pause(ctx, sdk.PauseOptions{Filesystem: true}); err != nil {
		t.Fatalf("pause b: %v", err)
	}
	s = get(t, own)
	s.expect(t, "after a kill and a pause",
		check{"hutch_sandboxes", []string{"state=running"}, 0},
		check{"hutch_sandboxes", []string{"state=paused", "template=base"}, 1},
		check{"hutch_sandbox_kills_total", []string{"reason=request", "outcome=success"}, 1},
		check{"hutch_sandbox_kills_total", []string{"reason=request", "outcome=not_found"}, 1},
		check{"hutch_sandbox_pauses_total", []string{"memory=false", "outcome=success"}, 1},
	)

	// Resumed by a connect.
	if _, err := sdk.Connect(ctx, b.ID, sdk.ConnectOptions{Config: cfg}); err != nil {
		t.Fatalf("connect b: %v", err)
	}
	// What the node promised: the limits of what runs, warm sandboxes
	// included, read once the pool is full again (a scrape reads the
	// pool and the sandboxes at one moment).
	waitFor(t, time.Minute, "the warm pool to fill again", func() bool {
		s = get(t, own)
		return s.sum("hutch_pool_ready_sandboxes", "template=base") == 1
	})
	s.expect(t, "after a resume",
		check{"hutch_sandboxes", []string{"state=running", "template=base"}, 1},
		check{"hutch_sandboxes", []string{"state=paused"}, 0},
		check{"hutch_sandbox_resumes_total", []string{"outcome=success"}, 1},
		check{"hutch_node_committed_cpus", nil, 2},
		check{"hutch_node_committed_memory_bytes", nil, 2 * sandboxMemory},
	)

	// The same metrics on the API's listener, with a key in either
	// header; none without one.
	for _, h := range []string{"X-API-Key: " + hutchtest.TestKey, "Authorization: Bearer " + hutchtest.TestKey} {
		api := get(t, srv.URL()+"/metrics", h)
		api.expect(t, "on the API's listener",
			check{"hutch_sandbox_creates_total", []string{"outcome=success"}, 2},
			check{"hutch_sandboxes", []string{"state=running", "template=base"}, 1})
	}
	for _, h := range [][]string{nil, {"X-API-Key: e2b_00000000000000000000000000000000000000ff"}} {
		resp := request(t, srv.URL()+"/metrics", h...)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /metrics with %q: %s, want 401", h, resp.Status)
		}
	}
	// The metrics' own listener serves nothing else.
	resp = request(t, "http://"+metricsAddr+"/v2/sandboxes", "X-API-Key: "+hutchtest.TestKey)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("the API on the metrics' listener: %s, want 404", resp.Status)
	}
}

// Without --metrics-api the API's listener has no metrics, key or not.
func TestMetricsOffTheAPI(t *testing.T) {
	srv := hutchtest.StartServe(t, hutchBin.Path(t), "--warm", "0")
	resp := request(t, srv.URL()+"/metrics", "X-API-Key: "+hutchtest.TestKey)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics without --metrics-api: %s, want 404", resp.Status)
	}
}

// waitFor polls cond every 100 ms until it is true, failing the test when
// timeout passes first.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
	}
}
