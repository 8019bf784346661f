// Package metrics is `hutch serve`'s Prometheus metrics (docs/metrics.md):
// their names, labels and help, one registry per server, and the handler
// that serves them in Prometheus' text format.
//
// Two kinds of metric live here. Counters and histograms are observed at
// events by the packages where the events happen (the manager counts
// creates, kills and pauses; the edge its requests; the builder its
// builds), through the methods of Metrics, each safe on a nil *Metrics so
// that code built without metrics (tests, `hutch run`) needs no branch.
// Gauges of what exists (sandboxes by state, warm pools, committed
// resources) are not kept up to date by events at all: a Census function
// is read at each scrape, so they are always what the manager holds, never
// a count that drifted.
//
// Every label takes its values from a small fixed set or from names the
// operator chose (templates, warm pools, API routes): never a sandbox id,
// a key or a snapshot name, so the series stay few however many sandboxes
// come and go.
package metrics

import (
	"github.com/hutch-sandbox/hutch/internal/respstatus"

	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// namespace prefixes every metric of Hutch's own.
const namespace = "hutch"

// Outcomes: the outcome label of creates, kills, pauses, resumes and
// builds, one per error class of package errdefs (Outcome).
const (
	OutcomeSuccess        = "success"
	OutcomeInvalid        = "invalid"
	OutcomeNotFound       = "not_found"
	OutcomeDenied         = "denied"
	OutcomeLimit          = "limit"
	OutcomeUnavailable    = "unavailable"
	OutcomeConflict       = "conflict"
	OutcomeNotImplemented = "not_implemented"
	OutcomeCanceled       = "canceled"
	OutcomeError          = "error"
)

// Outcome is the outcome label of an operation that ended with err: its
// errdefs class, "canceled" for a context that ended, "error" for
// anything else (a runtime or disk failure: the operator's to look at).
func Outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeSuccess
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCanceled
	case errors.Is(err, errdefs.ErrInvalidArgument):
		return OutcomeInvalid
	case errors.Is(err, errdefs.ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, errdefs.ErrPermissionDenied):
		return OutcomeDenied
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return OutcomeLimit
	case errors.Is(err, errdefs.ErrUnavailable):
		return OutcomeUnavailable
	case errors.Is(err, errdefs.ErrFailedPrecondition), errors.Is(err, errdefs.ErrAlreadyExists):
		return OutcomeConflict
	case errors.Is(err, errdefs.ErrNotImplemented):
		return OutcomeNotImplemented
	}
	return OutcomeError
}

// Create paths: how a created sandbox came to run, the path label of the
// create latency histogram.
const (
	// PathCold is a sandbox started on demand.
	PathCold = "cold"
	// PathPool is one taken from a warm pool.
	PathPool = "pool"
	// PathSnapshot is one made from a snapshot or a fork's capture
	// (its files, and its memory where the backend checkpoints).
	PathSnapshot = "snapshot"
)

// Kill reasons: why a sandbox was removed, the reason label of kills.
const (
	// KillRequest is a kill its client asked for.
	KillRequest = "request"
	// KillTimeout is the end of its timeout.
	KillTimeout = "timeout"
	// KillRetention is a paused sandbox past --paused-retention.
	KillRetention = "retention"
	// KillEnded is a sandbox whose envd exited on its own (killed from
	// inside, say): removed, not killed, but gone all the same.
	KillEnded = "ended"
)

// Edge targets: what a request the edge router forwards goes to.
const (
	// TargetEnvd is a sandbox's envd (commands, files).
	TargetEnvd = "envd"
	// TargetPort is any other port of a sandbox.
	TargetPort = "port"
)

// Edge errors: why the edge router answered a request for a sandbox
// itself instead of forwarding it.
const (
	// EdgeNotFound: no running sandbox of that id here.
	EdgeNotFound = "sandbox_not_found"
	// EdgePortClosed: nothing listens on that port in the sandbox.
	EdgePortClosed = "port_closed"
	// EdgeForbidden: the sandbox's ports need its traffic token, and the
	// request had another or none.
	EdgeForbidden = "forbidden"
	// EdgeUnreachable: the sandbox went away mid-request, or its envd
	// did not answer.
	EdgeUnreachable = "unreachable"
)

// Pool results: a create of a template with a warm pool found a warm
// sandbox there (hit) or started one on demand (miss).
const (
	PoolHit  = "hit"
	PoolMiss = "miss"
)

// Metrics is one server's metrics and their registry. The zero value is
// not usable; use New. A nil *Metrics observes nothing: every method is a
// no-op on it. Safe for concurrent use.
type Metrics struct {
	reg    *prometheus.Registry
	logger *slog.Logger

	creates       *prometheus.CounterVec
	createSeconds *prometheus.HistogramVec
	kills         *prometheus.CounterVec
	pauses        *prometheus.CounterVec
	resumes       *prometheus.CounterVec
	poolTakes     *prometheus.CounterVec
	builds        *prometheus.CounterVec
	buildSeconds  prometheus.Histogram
	buildsRunning prometheus.Gauge
	apiRequests   *prometheus.CounterVec
	apiSeconds    *prometheus.HistogramVec
	edgeRequests  *prometheus.CounterVec
	edgeErrors    *prometheus.CounterVec
	auditEvents   *prometheus.CounterVec
	auditLost     prometheus.Counter
}

// New returns a server's metrics in a registry of their own (never
// Prometheus' global one: two servers in one test process must not share
// counters), with the Go runtime's and the process' collectors beside
// them. logger gets the errors of scrapes; nil discards them.
func New(logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{reg: prometheus.NewRegistry(), logger: logger}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	m.creates = counter("sandbox_creates_total",
		"Sandbox creates, by outcome (success, or the class of the error that refused or failed it).", "outcome")
	m.createSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "sandbox_create_duration_seconds",
		Help: "Time a successful create took, until envd answered in the new sandbox, by path (cold: started on demand, pool: from a warm pool, snapshot: from a snapshot or fork).",
		// From a warm sandbox's few milliseconds to a cold start on a
		// busy host or a memory restore's seconds.
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"path"})
	m.kills = counter("sandbox_kills_total",
		"Sandboxes removed, by reason (request, timeout, retention, ended: its envd exited) and outcome.", "reason", "outcome")
	m.pauses = counter("sandbox_pauses_total",
		"Sandbox pauses, by whether memory was kept and outcome.", "memory", "outcome")
	m.resumes = counter("sandbox_resumes_total",
		"Resumes of paused sandboxes (by connect or by traffic), by outcome.", "outcome")
	m.poolTakes = counter("pool_takes_total",
		"Creates of a template that has a warm pool, by template and result (hit: a warm sandbox was handed out; miss: none was ready, or it was stale, and one was started on demand).", "template", "result")
	m.builds = counter("template_builds_total",
		"Template builds through the API or the builder, by outcome.", "outcome")
	m.buildSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "template_build_duration_seconds",
		Help:    "Time template builds took, successful or not.",
		Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600}})
	m.buildsRunning = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "template_builds_running",
		Help: "Template builds running now."})
	m.apiRequests = counter("api_requests_total",
		"Requests to the REST API, by route (the router's pattern, as METHOD /path) and status code.", "route", "code")
	m.apiSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "api_request_duration_seconds",
		Help: "Time REST API requests took to answer, by route.", Buckets: prometheus.DefBuckets}, []string{"route"})
	m.edgeRequests = counter("edge_requests_total",
		"Requests the edge router forwarded to sandboxes, or answered for them, by target (envd, port) and status class (2xx, 4xx, ...; 1xx for upgrades such as WebSockets).", "target", "code")
	m.edgeErrors = counter("edge_errors_total",
		"Requests for a sandbox the edge router answered itself, by target and reason (sandbox_not_found, port_closed, forbidden, unreachable).", "target", "reason")
	m.auditEvents = counter("audit_events_total",
		"Events recorded in the audit trail (docs/audit.md), by kind (api, command, file, network, mcp).", "kind")
	m.auditLost = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "audit_events_lost_total",
		Help: "Audit events that could not be written to the store (each is also logged as an error)."})
	m.reg.MustRegister(m.creates, m.createSeconds, m.kills, m.pauses, m.resumes, m.poolTakes,
		m.builds, m.buildSeconds, m.buildsRunning, m.apiRequests, m.apiSeconds, m.edgeRequests, m.edgeErrors,
		m.auditEvents, m.auditLost,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewBuildInfoCollector(),
		newHostCollector())
	// Series that exist at 0 from the start: a rate over a counter that
	// appears only with its first event misses that event.
	for _, o := range []string{OutcomeSuccess, OutcomeInvalid, OutcomeNotFound, OutcomeDenied, OutcomeLimit,
		OutcomeUnavailable, OutcomeConflict, OutcomeNotImplemented, OutcomeCanceled, OutcomeError} {
		m.creates.WithLabelValues(o)
	}
	for _, r := range []string{KillRequest, KillTimeout, KillRetention, KillEnded} {
		m.kills.WithLabelValues(r, OutcomeSuccess)
	}
	for _, mem := range []string{"true", "false"} {
		m.pauses.WithLabelValues(mem, OutcomeSuccess)
	}
	m.resumes.WithLabelValues(OutcomeSuccess)
	for _, k := range []string{"api", "command", "file", "network", "mcp"} {
		m.auditEvents.WithLabelValues(k)
	}
	m.builds.WithLabelValues(OutcomeSuccess)
	m.builds.WithLabelValues(OutcomeError)
	for _, p := range []string{PathCold, PathPool, PathSnapshot} {
		m.createSeconds.WithLabelValues(p)
	}
	return m
}

// Register adds collectors to the registry: scrape-time readers of
// other parts' state (see Census). It fails for a collector whose metrics
// clash with those registered.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// MaxScrapes is how many scrapes are served at once.
const MaxScrapes = 4

// Handler serves the metrics in Prometheus' text (or protobuf, as the
// scraper asks) exposition format. A collector that fails is logged and
// left out of that scrape; the rest are served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      slogPrinter{m.logger},
		ErrorHandling: promhttp.ContinueOnError,
		// Scrapes are cheap; more than a few at once is a misconfigured
		// scraper, answered 503 rather than queued (MaxScrapes; the API
		// listener counts its own first, to answer in its own shape).
		MaxRequestsInFlight: MaxScrapes,
	})
}

// slogPrinter is promhttp's error log on slog.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Warn("metrics", "err", v) }

// Create counts a create that ended with err and, when it succeeded,
// observes its latency d under path (PathCold, PathPool, PathSnapshot).
func (m *Metrics) Create(path string, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.creates.WithLabelValues(Outcome(err)).Inc()
	if err == nil {
		m.createSeconds.WithLabelValues(path).Observe(d.Seconds())
	}
}

// Kill counts a sandbox's removal for reason (KillRequest, ...) that
// ended with err.
func (m *Metrics) Kill(reason string, err error) {
	if m == nil {
		return
	}
	m.kills.WithLabelValues(reason, Outcome(err)).Inc()
}

// Pause counts a pause, keeping the memory or not, that ended with err.
func (m *Metrics) Pause(keepMemory bool, err error) {
	if m == nil {
		return
	}
	mem := "false"
	if keepMemory {
		mem = "true"
	}
	m.pauses.WithLabelValues(mem, Outcome(err)).Inc()
}

// Resume counts a resume of a paused sandbox that ended with err.
func (m *Metrics) Resume(err error) {
	if m == nil {
		return
	}
	m.resumes.WithLabelValues(Outcome(err)).Inc()
}

// PoolTake counts a create of template, which has a warm pool, that took
// a warm sandbox (hit) or found none ready.
func (m *Metrics) PoolTake(template string, hit bool) {
	if m == nil {
		return
	}
	result := PoolMiss
	if hit {
		result = PoolHit
	}
	m.poolTakes.WithLabelValues(template, result).Inc()
}

// AuditEvents counts n events of kind written to the audit trail.
func (m *Metrics) AuditEvents(kind string, n int) {
	if m == nil {
		return
	}
	m.auditEvents.WithLabelValues(kind).Add(float64(n))
}

// AuditLost counts n audit events the store refused, or that were
// dropped while the disk had no room.
func (m *Metrics) AuditLost(n int) {
	if m == nil {
		return
	}
	m.auditLost.Add(float64(n))
}

// BuildStarted counts a template build as running; call the function it
// returns with the build's error when the build ends.
func (m *Metrics) BuildStarted() (done func(err error)) {
	if m == nil {
		return func(error) {}
	}
	start := time.Now()
	m.buildsRunning.Inc()
	return func(err error) {
		m.buildsRunning.Dec()
		m.builds.WithLabelValues(Outcome(err)).Inc()
		m.buildSeconds.Observe(time.Since(start).Seconds())
	}
}

// InstrumentAPI wraps the handler of one API route, counting its
// requests by status code and timing them. route is the router's
// pattern: a name the code chose, never the request's path, whose ids
// would make a series per sandbox. On a nil *Metrics it returns h.
func (m *Metrics) InstrumentAPI(route string, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	labels := prometheus.Labels{"route": route}
	return promhttp.InstrumentHandlerDuration(m.apiSeconds.MustCurryWith(labels),
		promhttp.InstrumentHandlerCounter(m.apiRequests.MustCurryWith(labels), h))
}

// Edge starts counting one request the edge router handles for a
// sandbox's target (TargetEnvd, TargetPort): it returns the writer to
// answer on, which sees the status, and a function to call when the
// request is done.
func (m *Metrics) Edge(w http.ResponseWriter, r *http.Request, target string) (http.ResponseWriter, func()) {
	if m == nil {
		return w, func() {}
	}
	sw := &statusWriter{respstatus.Writer{ResponseWriter: w}}
	return sw, func() { m.edgeRequests.WithLabelValues(target, sw.class(r)).Inc() }
}

// EdgeError counts a request for target that the edge router answered
// itself, for reason (EdgeNotFound, ...).
func (m *Metrics) EdgeError(target, reason string) {
	if m == nil {
		return
	}
	m.edgeErrors.WithLabelValues(target, reason).Inc()
}
