package metrics

import (
	"github.com/hutch-sandbox/hutch/internal/respstatus"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, OutcomeSuccess},
		{fmt.Errorf("template %q: %w", "x", errdefs.ErrNotFound), OutcomeNotFound},
		{fmt.Errorf("timeout: %w", errdefs.ErrInvalidArgument), OutcomeInvalid},
		{fmt.Errorf("cap: %w", errdefs.ErrResourceExhausted), OutcomeLimit},
		{fmt.Errorf("no lease: %w", errdefs.ErrUnavailable), OutcomeUnavailable},
		{fmt.Errorf("another key's: %w", errdefs.ErrPermissionDenied), OutcomeDenied},
		{fmt.Errorf("paused: %w", errdefs.ErrFailedPrecondition), OutcomeConflict},
		{fmt.Errorf("being built: %w", errdefs.ErrAlreadyExists), OutcomeConflict},
		{fmt.Errorf("volumes: %w", errdefs.ErrNotImplemented), OutcomeNotImplemented},
		{fmt.Errorf("create: %w", context.Canceled), OutcomeCanceled},
		{fmt.Errorf("envd: %w", context.DeadlineExceeded), OutcomeCanceled},
		// A context that ended wins over the class of what it cut short.
		{errors.Join(context.Canceled, errdefs.ErrNotFound), OutcomeCanceled},
		{errors.New("mount: no space left on device"), OutcomeError},
	} {
		if got := Outcome(c.err); got != c.want {
			t.Errorf("Outcome(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// scrape serves h's /metrics and parses it with Prometheus' own text
// parser, as a Prometheus server would.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return fams
}

// value is the value of the series of family name whose labels include
// want ("k=v" each), and whether there is one. A histogram's value is its
// count.
func value(fams map[string]*dto.MetricFamily, name string, want ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
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
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestScrape(t *testing.T) {
	m := New(nil)
	census := Census{
		Sandboxes: []SandboxCount{
			{State: "running", Template: "base", Count: 2},
			{State: "paused", Template: "base", Count: 1},
			{State: "running", Template: "(snapshot)", Count: 1},
			// Two causes of one stand-in: summed.
			{State: "running", Template: "(snapshot)", Count: 2},
		},
		Pools:         []PoolCount{{Template: "base", Ready: 3, Size: 4}},
		CPUsCommitted: 7, MemoryCommittedBytes: 7 << 29, MaxSandboxes: 100,
	}
	if err := m.Register(NewCensusCollector(func(context.Context) (Census, error) { return census, nil })); err != nil {
		t.Fatal(err)
	}
	m.Create(PathCold, 300*time.Millisecond, nil)
	m.Create(PathPool, 5*time.Millisecond, nil)
	m.Create(PathPool, 6*time.Millisecond, nil)
	m.Create(PathCold, time.Second, fmt.Errorf("cap: %w", errdefs.ErrResourceExhausted))
	m.PoolTake("base", true)
	m.PoolTake("base", true)
	m.PoolTake("base", false)
	m.Kill(KillRequest, nil)
	m.Kill(KillTimeout, nil)
	m.Kill(KillRequest, errdefs.ErrNotFound)
	m.Pause(true, nil)
	m.Resume(errors.New("thaw: no such cgroup"))
	done := m.BuildStarted()
	done(errors.New("step 2 failed"))
	running := m.BuildStarted()

	// The API's and the edge's requests, through their wrappers.
	api := m.InstrumentAPI("GET /sandboxes/{id}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such sandbox", http.StatusNotFound)
	}))
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest("GET", "/sandboxes/abc", nil))
	for _, code := range []int{200, 200, 502} {
		w, done := m.Edge(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), TargetEnvd)
		w.WriteHeader(code)
		done()
	}
	m.EdgeError(TargetPort, EdgePortClosed)

	fams := scrape(t, m.Handler())
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hutch_sandbox_creates_total", []string{"outcome=success"}, 3},
		{"hutch_sandbox_creates_total", []string{"outcome=limit"}, 1},
		// At 0 before anything failed so: every outcome has its series.
		{"hutch_sandbox_creates_total", []string{"outcome=not_found"}, 0},
		{"hutch_sandbox_create_duration_seconds", []string{"path=cold"}, 1},
		{"hutch_sandbox_create_duration_seconds", []string{"path=pool"}, 2},
		{"hutch_sandbox_create_duration_seconds", []string{"path=snapshot"}, 0},
		{"hutch_pool_takes_total", []string{"template=base", "result=hit"}, 2},
		{"hutch_pool_takes_total", []string{"template=base", "result=miss"}, 1},
		{"hutch_sandbox_kills_total", []string{"reason=request", "outcome=success"}, 1},
		{"hutch_sandbox_kills_total", []string{"reason=request", "outcome=not_found"}, 1},
		{"hutch_sandbox_kills_total", []string{"reason=timeout", "outcome=success"}, 1},
		{"hutch_sandbox_kills_total", []string{"reason=ended", "outcome=success"}, 0},
		{"hutch_sandbox_pauses_total", []string{"memory=true", "outcome=success"}, 1},
		{"hutch_sandbox_resumes_total", []string{"outcome=error"}, 1},
		{"hutch_template_builds_total", []string{"outcome=error"}, 1},
		{"hutch_template_build_duration_seconds", nil, 1},
		{"hutch_template_builds_running", nil, 1},
		{"hutch_api_requests_total", []string{"route=GET /sandboxes/{id}", "code=404"}, 1},
		{"hutch_api_request_duration_seconds", []string{"route=GET /sandboxes/{id}"}, 1},
		{"hutch_edge_requests_total", []string{"target=envd", "code=2xx"}, 2},
		{"hutch_edge_requests_total", []string{"target=envd", "code=5xx"}, 1},
		{"hutch_edge_errors_total", []string{"target=port", "reason=port_closed"}, 1},
		{"hutch_sandboxes", []string{"state=running", "template=base"}, 2},
		{"hutch_sandboxes", []string{"state=paused", "template=base"}, 1},
		{"hutch_sandboxes", []string{"state=running", "template=(snapshot)"}, 3},
		{"hutch_pool_ready_sandboxes", []string{"template=base"}, 3},
		{"hutch_pool_size_sandboxes", []string{"template=base"}, 4},
		{"hutch_node_committed_cpus", nil, 7},
		{"hutch_node_committed_memory_bytes", nil, 7 << 29},
		{"hutch_node_max_sandboxes", nil, 100},
	} {
		got, ok := value(fams, c.name, c.labels...)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (found: %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	running(nil)
	// What the runtime and the host say: present, and sane.
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "hutch_node_cpus", "hutch_node_memory_bytes", "hutch_node_memory_available_bytes"} {
		if v, ok := value(fams, name); !ok || v <= 0 {
			t.Errorf("%s = %v (found: %v), want > 0", name, v, ok)
		}
	}
	if total, _ := value(fams, "hutch_node_memory_bytes"); total > 0 {
		if avail, _ := value(fams, "hutch_node_memory_available_bytes"); avail > total {
			t.Errorf("memory available %v > total %v", avail, total)
		}
	}
	// Every one of Hutch's own metrics follows Prometheus' naming: the
	// prefix, _total on counters only.
	for name, f := range fams {
		if !strings.HasPrefix(name, "hutch_") {
			continue
		}
		if isCounter := f.GetType() == dto.MetricType_COUNTER; isCounter != strings.HasSuffix(name, "_total") {
			t.Errorf("%s is a %s: _total is for counters, and every counter", name, f.GetType())
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
	}
}

// A census that fails leaves its metrics out of that scrape; the rest
// are served.
func TestCensusError(t *testing.T) {
	m := New(nil)
	m.Register(NewCensusCollector(func(context.Context) (Census, error) { return Census{}, errors.New("database is locked") }))
	m.Create(PathCold, time.Second, nil)
	fams := scrape(t, m.Handler())
	if _, ok := fams["hutch_sandboxes"]; ok {
		t.Error("hutch_sandboxes served from a census that failed")
	}
	if v, ok := value(fams, "hutch_sandbox_creates_total", "outcome=success"); !ok || v != 1 {
		t.Errorf("creates = %v (found: %v), want 1", v, ok)
	}
}

// Code built without metrics calls them all the same.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.Create(PathCold, time.Second, nil)
	m.Kill(KillRequest, nil)
	m.Pause(false, nil)
	m.Resume(nil)
	m.PoolTake("base", true)
	m.BuildStarted()(nil)
	m.EdgeError(TargetEnvd, EdgeNotFound)
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := m.InstrumentAPI("GET /health", h); got == nil {
		t.Error("InstrumentAPI on nil returned nil")
	}
	rec := httptest.NewRecorder()
	w, done := m.Edge(rec, httptest.NewRequest("GET", "/", nil), TargetEnvd)
	if w != http.ResponseWriter(rec) {
		t.Error("Edge on nil wrapped the writer")
	}
	done()
}

func TestEdgeStatusClass(t *testing.T) {
	for _, c := range []struct {
		name    string
		upgrade bool
		answer  func(w http.ResponseWriter)
		want    string
	}{
		{"written", false, func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }, "2xx"},
		{"body only", false, func(w http.ResponseWriter) { w.Write([]byte("hi")) }, "2xx"},
		{"nothing", false, func(w http.ResponseWriter) {}, "2xx"},
		{"not found", false, func(w http.ResponseWriter) { w.WriteHeader(http.StatusNotFound) }, "4xx"},
		{"bad gateway", false, func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }, "5xx"},
		{"interim then final", false, func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusServiceUnavailable)
		}, "5xx"},
		{"flushed", false, func(w http.ResponseWriter) { http.NewResponseController(w).Flush() }, "2xx"},
		// httputil.ReverseProxy writes a 101 on the hijacked connection.
		{"upgraded", true, func(w http.ResponseWriter) {}, "1xx"},
		{"upgrade refused", true, func(w http.ResponseWriter) { w.WriteHeader(http.StatusForbidden) }, "4xx"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if c.upgrade {
				r.Header.Set("Connection", "keep-alive, Upgrade")
				r.Header.Set("Upgrade", "websocket")
			}
			sw := &statusWriter{respstatus.Writer{ResponseWriter: httptest.NewRecorder()}}
			c.answer(sw)
			if got := sw.class(r); got != c.want {
				t.Errorf("class = %q, want %q", got, c.want)
			}
		})
	}
}

// The sample Grafana dashboard is valid JSON and asks only for metrics
// that exist: a renamed metric must not leave it with empty panels.
func TestDashboardNamesMetrics(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/hutch.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("deploy/grafana/hutch.json: %v", err)
	}
	m := New(nil)
	m.Register(NewCensusCollector(func(context.Context) (Census, error) {
		return Census{Sandboxes: []SandboxCount{{State: "running", Template: "base", Count: 1}}, Pools: []PoolCount{{Template: "base", Ready: 1, Size: 1}}}, nil
	}))
	m.PoolTake("base", true)
	m.EdgeError(TargetEnvd, EdgeNotFound)
	_, done := m.Edge(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), TargetEnvd)
	done()
	m.InstrumentAPI("GET /health", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
	fams := scrape(t, m.Handler())
	name := regexp.MustCompile(`\b(hutch|go|process)_[a-z_]+\b`)
	seen := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				seen++
				base := n
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if f := fams[strings.TrimSuffix(n, suffix)]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
						base = strings.TrimSuffix(n, suffix)
					}
				}
				if fams[base] == nil {
					t.Errorf("panel %q asks for %s, which hutch serve does not serve", p.Title, n)
				}
			}
		}
	}
	if seen < 20 {
		t.Errorf("the dashboard names %d metrics in all: did its layout change?", seen)
	}
}
