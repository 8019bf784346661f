// Package server is `hutch serve`'s HTTP side: E2B's control-plane REST API
// (shared/specs/e2b-protocol.md §2) authenticated by API keys, and the edge
// router that sends a sandbox's traffic to its envd. One listener serves
// both: requests that name a sandbox — by the E2b-Sandbox-Id header or a
// Host of "<port>-<id>.<domain>" — are routed; all others are API calls.
package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/builder"
	"github.com/hutch-sandbox/hutch/internal/cluster"
	"github.com/hutch-sandbox/hutch/internal/console"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/volume"
)

// maxBody caps REST request bodies.
const maxBody = 1 << 20

// Options configure a Server.
type Options struct {
	// Manager is the server's one way to state: sandboxes, keys, lists.
	Manager *sandbox.Manager
	// Domain is the sandbox domain: "<port>-<id>.<Domain>" hosts are routed
	// to sandboxes, and create answers it as the sandbox's domain.
	Domain string
	Logger *slog.Logger
	// BodyGrace and BodyMinRate (bytes per second) are the pace every
	// request body must keep (body.go): the time spent waiting for a
	// body's bytes may exceed one second per BodyMinRate bytes by at most
	// BodyGrace. Zero: 20 s and 500 bytes per second.
	BodyGrace   time.Duration
	BodyMinRate int
	// Templates and Builder serve the template API; nil answers it 501.
	Templates *template.Store
	Builder   *builder.Builder
	// Volumes serves the volume and volume content APIs; nil answers
	// them 501.
	Volumes *volume.Manager
	// Cluster, when the node is one of a cluster, sends requests for
	// other nodes' sandboxes there and places creates (cluster.go); nil
	// for a single node.
	Cluster *cluster.Node
	// Metrics counts the API's and the edge's requests; nil counts
	// nothing.
	Metrics *metrics.Metrics
	// Audit records the audit trail of what keys do through the API and
	// the edge, and serves it at /events; nil records nothing and answers
	// /events 501.
	Audit *audit.Log
	// MetricsOnAPI serves Metrics at GET /metrics to requests with an
	// API key; false answers that route 404 (the operator may serve them
	// on a listener of their own instead, see internal/serve).
	MetricsOnAPI bool
	// Execd serves OpenSandbox's in-sandbox API at the endpoints of
	// OpenSandbox's lifecycle API (opensandboxproxy.go); nil answers it
	// 501.
	Execd Execd
	// MCPRegistryMirror, when set, is the registry ("host[:port][/path]")
	// the images of MCP catalog servers are pulled from in place of their
	// own (catalog.Mirror).
	MCPRegistryMirror string
}

// Server serves the API and routes sandbox traffic. Safe for concurrent use.
type Server struct {
	mgr         *sandbox.Manager
	domain      string
	logger      *slog.Logger
	api         *http.ServeMux
	patterns    []string // the api mux's, in the order registered (handle)
	bodyGrace   time.Duration
	bodyMinRate int64
	templates   *template.Store
	builder     *builder.Builder
	uploadKey   [32]byte // signs upload links (templates.go)
	volumes     *volume.Manager
	cluster     *cluster.Node    // see Options.Cluster
	prom        *metrics.Metrics // Options.Metrics
	// promAPI serves the metrics at GET /metrics (Options.MetricsOnAPI);
	// nil when they are not served there.
	promAPI   http.Handler
	promSlots chan struct{} // scrapes in flight on the API listener
	audit     *audit.Log    // Options.Audit
	// gatewaySecrets are the values of each sandbox's MCP gateway
	// configuration, seen when the gateway started (auditedge.go).
	gatewaySecrets *secretBook
	// auditBodies bounds the request bodies the edge holds at once to
	// read them for the audit trail (auditBodyBudget).
	auditBodies *bodyBudget
	// gatewayBodies bounds the bytes of MCP gateway calls kept at once
	// to record them (gatewayBodyBudget).
	gatewayBodies *bodyBudget
	// console serves the web console's files; nil when they did not load.
	console *console.Console
	// execd serves OpenSandbox's in-sandbox API (Options.Execd).
	execd Execd
	// mcpMirror is Options.MCPRegistryMirror.
	mcpMirror string
}

// Execd serves OpenSandbox's in-sandbox API (execd) for one sandbox at a
// time by calling its envd (internal/osbexecd implements it).
type Execd interface {
	// ServeSandbox answers r, whose path is execd's own ("/ping", "/command"),
	// for sandbox id, whose envd transport reaches and whose envd access
	// token is token ("" for none). The caller authenticated r.
	// metrics is the sandbox's latest sample as the host measures it.
	// tenant is the key whose sandbox it is.
	ServeSandbox(w http.ResponseWriter, r *http.Request, id, tenant string, transport http.RoundTripper, token string,
		metrics func(context.Context) (cpus, cpuPct, memTotalMiB, memUsedMiB float64, ok bool))
	// Forget drops what is kept for sandbox id, which is gone.
	Forget(id string)
}

// New returns a server.
func New(opts Options) *Server {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Host names are compared in lower case, without the root's dot.
	domain := strings.ToLower(strings.TrimSuffix(opts.Domain, "."))
	s := &Server{mgr: opts.Manager, domain: domain, logger: logger, api: http.NewServeMux(),
		bodyGrace: opts.BodyGrace, bodyMinRate: int64(opts.BodyMinRate), templates: opts.Templates, builder: opts.Builder, volumes: opts.Volumes, cluster: opts.Cluster,
		prom: opts.Metrics, audit: opts.Audit, gatewaySecrets: newSecretBook(), auditBodies: newBodyBudget(auditBodyBudget, auditKeyBudget), gatewayBodies: newBodyBudget(gatewayBodyBudget, gatewayKeyBudget)}
	s.execd = opts.Execd
	s.mcpMirror = opts.MCPRegistryMirror
	if opts.MetricsOnAPI && opts.Metrics != nil {
		s.promAPI = opts.Metrics.Handler()
		s.promSlots = make(chan struct{}, metrics.MaxScrapes)
	}
	rand.Read(s.uploadKey[:])
	if s.cluster != nil {
		s.cluster.SetSigner(s.signedBy)
	}
	if s.bodyGrace <= 0 {
		s.bodyGrace = defaultBodyGrace
	}
	if s.bodyMinRate <= 0 {
		s.bodyMinRate = defaultBodyMinRate
	}
	if c, err := console.New(); err != nil {
		logger.Error("web console disabled", "err", err)
	} else {
		s.console = c
	}
	s.routes()
	return s
}

// ServeHTTP routes a request to a sandbox or to the API. Request bodies
// must keep a minimum pace, and a connection whose body is not read to its
// end is closed after the answer (body.go). It never forwards CONNECT: a
// raw tunnel of the client's choosing would skip both envd's token and
// the traffic token (a sandbox's ports are reached by HTTP, WebSocket or
// any other Upgrade through the router's own tunnels).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.paceBodies(w, r, s.serve)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		e2bapi.WriteError(w, http.StatusMethodNotAllowed, "CONNECT is not served: reach a sandbox's ports with E2b-Sandbox-Id/E2b-Sandbox-Port or a <port>-<id> host", "")
		return
	}
	id, port, ok, bad := s.sandboxTarget(r)
	if bad {
		e2bapi.WriteBadSandboxHost502(w, hostOnly(r.Host), s.domain)
		return
	}
	if ok {
		if !sandbox.ValidPort(port) {
			e2bapi.WriteError(w, http.StatusBadRequest, "invalid sandbox port: want 1-65535", "")
			return
		}
		if s.forward(w, r, id, true) {
			return
		}
		s.proxy(w, r, id, port)
		return
	}
	if q := r.URL.Query(); r.URL.Path == "/files" && q.Get("signature") != "" {
		// A signed file URL made with E2B_SANDBOX_URL names no sandbox
		// (spec §3.9): the signature hashes the sandbox's token, so at
		// most one sandbox's token produces it.
		if id, ok := s.signedBy(r.Method, q); ok {
			s.proxy(w, r, id, envdapi.Port)
			return
		}
		if _, ok := fileSignature(r.Method, q); ok && s.clustered(r) {
			// Another node's sandbox, perhaps: each node tries its own,
			// sent what is signed and nothing more (review 26: the whole
			// query went, escaped again, to every node).
			p, id, ok, err := s.cluster.FindSigned(lookupContext(r), r.Method, signedFields(q))
			if err != nil {
				s.busy(w, err)
				return
			}
			if ok {
				s.toPeer(w, r, p, func(w http.ResponseWriter, err error) { e2bapi.WriteSandboxNotFound502(w, id) })
				return
			}
		}
		// What the sandbox's envd says of a signature not its own, word
		// for word: at E2B the URL's host names the sandbox, and its envd
		// answers.
		e2bapi.WriteError(w, http.StatusUnauthorized, "invalid signature", "")
		return
	}
	if s.forward(w, r, apiSandboxID(r.URL.Path), false) || s.forwardVolume(w, r, volumeID(r.URL.Path)) {
		return
	}
	s.api.ServeHTTP(w, r)
}

// signedBy finds the sandbox whose access token signed a /files URL of
// query q.
func (s *Server) signedBy(method string, q url.Values) (string, bool) {
	signed, ok := fileSignature(method, q)
	if !ok {
		return "", false
	}
	// Each running sandbox's token is tried: what the URL names is hashed
	// once (envdapi.Signer).
	return s.mgr.FindByEnvdToken(signed.by)
}

// signedFile is a signed /files URL, read once.
type signedFile struct {
	want []byte
	sign func(token string) string
	// expires is the signature_expiration, when the URL has one.
	expires    int64
	hasExpires bool
}

// by reports whether token made the URL's signature.
func (f signedFile) by(token string) bool {
	return subtle.ConstantTimeCompare([]byte(f.sign(token)), f.want) == 1
}

// fileSignature reads the signature of a /files request (method, query
// q) and what it signs: the operation is a read for GET and HEAD, a write
// for POST, as envd's handlers decide. ok is false for a request no token
// can have signed for envd: another method (envd answers it 405), no
// signature, an expiration that is not a number, or a path or username
// longer than any a sandbox can open, which are refused before anything
// is hashed (review 7: a 1 MB path cost 0.3 s of CPU with 78 sandboxes).
func fileSignature(method string, q url.Values) (signedFile, bool) {
	if q.Get("signature") == "" || len(q.Get("signature")) > maxSignature ||
		len(q.Get("path")) > maxSignedPath || len(q.Get("username")) > maxSignedPath {
		return signedFile{}, false
	}
	var op string
	switch method {
	case http.MethodGet, http.MethodHead:
		op = envdapi.OpRead
	case http.MethodPost:
		op = envdapi.OpWrite
	default:
		return signedFile{}, false
	}
	exp, unix, err := envdapi.Expiration(q)
	if err != nil {
		return signedFile{}, false
	}
	return signedFile{want: []byte(q.Get("signature")), sign: envdapi.Signer(q.Get("path"), op, q.Get("username"), exp),
		expires: unix, hasExpires: exp != ""}, true
}

// maxSignedPath is the longest path or username a signed URL may name:
// Linux's PATH_MAX.
const maxSignedPath = 4096

// maxSignature is the longest signature a signed URL may carry: envd's
// are "v1_" and a SHA-256 in unpadded base64, 46 bytes.
const maxSignature = 128

// signedFields is what of a signed /files URL's query its signature
// covers (envdapi.Signer, envdapi.Expiration).
func signedFields(q url.Values) url.Values {
	out := url.Values{}
	for _, k := range []string{"path", "username", "signature", "signature_expiration"} {
		if q.Has(k) {
			out[k] = q[k][:1]
		}
	}
	return out
}

// sandboxTarget finds the sandbox a request is for, if any. A port that
// is not a number in 1-65535 comes back as 0, for the caller to refuse.
// bad is a Host under the sandbox domain that names no sandbox port (not
// api.<domain>, not <port>-<id>.<domain>): the caller answers it as the
// edge proxy does a sandbox it cannot find.
func (s *Server) sandboxTarget(r *http.Request) (id string, port int, ok, bad bool) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port := envdapi.Port
		if v := r.Header.Get("E2b-Sandbox-Port"); v != "" {
			port = parsePort(v)
		}
		return id, port, true, false
	}
	if s.domain == "" {
		return "", 0, false, false
	}
	host := strings.ToLower(strings.TrimSuffix(hostOnly(r.Host), "."))
	label, found := strings.CutSuffix(host, "."+s.domain)
	if !found || label == "api" {
		// The domain itself and api.<domain> are the control plane's, as
		// is every other name (an address, E2B_API_URL's host).
		return "", 0, false, false
	}
	p, id, found := strings.Cut(label, "-")
	if !found || id == "" || p == "" || strings.Trim(p, "0123456789") != "" || strings.Contains(id, ".") {
		return "", 0, false, true
	}
	return id, parsePort(p), true, false
}

// hostOnly is host without its port.
func hostOnly(host string) string {
	if i := strings.LastIndexByte(host, ':'); i > strings.LastIndexByte(host, ']') {
		return host[:i]
	}
	return host
}

// parsePort reads a port number, 0 when it is not one in 1-65535.
func parsePort(v string) int {
	p, err := strconv.Atoi(v)
	if err != nil || !sandbox.ValidPort(p) {
		return 0
	}
	return p
}

type keyCtx struct{}

// authed wraps an API handler: the X-API-KEY (or Bearer e2b_…, or the web
// console's cookie: consoleKey) must be a live key; the handler sees its id
// in the context.
func (s *Server) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := cmp.Or(e2bapi.APIKeyFromRequest(r), consoleKey(r))
		if key == "" {
			e2bapi.Write(w, s.logger, e2bapi.Unauthorized("missing API key: send it in the X-API-KEY header"))
			return
		}
		keyID, err := s.mgr.VerifyKey(r.Context(), key)
		if err != nil {
			if errdefs.IsNotFound(err) {
				e2bapi.Write(w, s.logger, e2bapi.Unauthorized("invalid API key"))
				return
			}
			e2bapi.Write(w, s.logger, err)
			return
		}
		auditKey(r, keyID)
		h(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, keyID)))
	}
}

func keyID(r *http.Request) string { id, _ := r.Context().Value(keyCtx{}).(string); return id }
