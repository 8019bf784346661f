package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// routes registers the API's patterns, each through handle: the OpenAPI
// document (api/openapi) must describe every one (openapi_test.go).
func (s *Server) routes() {
	s.handle("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	s.handle("GET /openapi.json", s.openAPI)
	s.handle("GET /metrics", s.authed(s.serveMetrics))
	s.handle("POST /v2/sandboxes", s.authed(s.placed(s.createV2)))
	s.handle("POST /sandboxes", s.authed(s.placed(s.createV1)))
	s.handle("GET /cluster/nodes", s.authed(s.clusterNodes))
	s.handle("GET /v2/sandboxes", s.authed(s.list))
	s.handle("GET /sandboxes", s.authed(s.listLegacy))
	s.handle("GET /sandboxes/{id}", s.authed(s.get))
	s.handle("DELETE /sandboxes/{id}", s.authed(s.kill))
	s.handle("POST /sandboxes/{id}/timeout", s.authed(s.setTimeout))
	s.handle("POST /sandboxes/{id}/refreshes", s.authed(s.refresh))
	s.handle("POST /v2/sandboxes/{id}/connect", s.authed(s.connect))
	s.handle("POST /sandboxes/{id}/connect", s.authed(s.connect))
	s.handle("POST /sandboxes/{id}/pause", s.authed(s.pause))
	s.handle("GET /sandboxes/{id}/metrics", s.authed(s.metrics))
	s.handle("GET /sandboxes/metrics", s.authed(s.batchMetrics))
	s.handle("PUT /sandboxes/{id}/network", s.authed(s.updateNetwork))
	s.handle("GET /v2/sandboxes/{id}/logs", s.authed(s.logs))
	s.handle("GET /sandboxes/{id}/logs", s.authed(s.legacyLogs))
	s.templateRoutes()
	s.snapshotRoutes()
	s.osbRoutes()
	// Known to the SDKs, not in Hutch yet: a clear 501 in E2B's error body,
	// never a silent success, nor a 404 that reads like a mistyped URL.
	// The template and secret APIs go whole, by path prefix and
	// for every method: E2B's OpenAPI document has a dozen template paths
	// (build, status, logs, files, tags, aliases), deprecated ones besides.
	const buildHint = "see docs/templates.md for the template calls Hutch serves"
	for pattern, answer := range map[string]http.HandlerFunc{
		"/templates/":    s.notYet("this call of the template API", buildHint),
		"/v2/templates/": s.notYet("this call of the template API", buildHint),
		"/v3/templates/": s.notYet("this call of the template API", buildHint),
		"/secrets":       s.notYet("the secrets API", ""),
		"/secrets/":      s.notYet("the secrets API", ""),
	} {
		s.handle(pattern, s.authed(answer))
	}
	s.volumeRoutes()
	s.eventRoutes()
	s.consoleRoutes()
	s.handle("/", func(w http.ResponseWriter, r *http.Request) {
		e2bapi.Write(w, s.logger, e2bapi.NotFound("no such endpoint: "+r.Method+" "+r.URL.Path))
	})
}

// notYet answers notSupported(feature, hint).
func (s *Server) notYet(feature, hint string) http.HandlerFunc {
	err := notSupported(feature, hint)
	return func(w http.ResponseWriter, r *http.Request) { e2bapi.Write(w, s.logger, err) }
}

// notSupported is a 501 "<feature> is not supported by Hutch yet", followed
// by ": <hint>" when there is one.
func notSupported(feature, hint string) *e2bapi.StatusError {
	err := e2bapi.NotSupported(feature)
	if hint != "" {
		err.Message += ": " + hint
	}
	return err
}

// decode reads a JSON body (optional: an empty body is fine) into v and
// validates it; on failure it has answered and returns false.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v interface{ Validate() error }, optional bool) bool {
	var err error
	if optional {
		err = e2bapi.DecodeOptionalJSON(r, v, maxBody)
	} else {
		err = e2bapi.DecodeJSON(r, v, maxBody)
	}
	if err == nil {
		err = v.Validate()
	}
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return false
	}
	return true
}

func (s *Server) createV2(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.NewSandboxV2
	if err := e2bapi.DecodeJSON(r, &req, maxBody); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if err := req.Normalize(); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	// v2 sandboxes are always secured (spec §2.4).
	s.create(w, r, req, true)
}

func (s *Server) createV1(w http.ResponseWriter, r *http.Request) {
	var req e2bapi.NewSandboxV1
	if err := e2bapi.DecodeJSON(r, &req, maxBody); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	if err := req.Normalize(); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	s.create(w, r, req.NewSandboxV2, req.IsSecure())
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, req e2bapi.NewSandboxV2, secure bool) {
	cr := sandbox.CreateRequest{
		KeyID: keyID(r), Template: req.TemplateID, Timeout: time.Duration(*req.Timeout) * time.Second,
		Metadata: req.Metadata, Envs: req.EnvVars, Secure: secure,
		Network: sandbox.Network{Internet: req.AllowInternetAccess},
	}
	if rt, ok := req.Metadata[RuntimeMetadata]; ok {
		// E2B's API has no field for it: the metadata key names it, and
		// Hutch keeps it out of the creator's metadata (it adds its own).
		cr.Runtime = rt
		cr.Metadata = maps.Clone(req.Metadata)
		delete(cr.Metadata, RuntimeMetadata)
	}
	for _, v := range req.VolumeMounts {
		cr.Volumes = append(cr.Volumes, sandbox.VolumeMount{Name: v.Name, Path: v.Path})
	}
	autoPause := req.AutoPause != nil && *req.AutoPause
	keepMemory := req.AutoPauseMemory == nil || *req.AutoPauseMemory
	autoResume := req.AutoResume != nil && req.AutoResume.Enabled
	// E2B's rules, with its messages' sense.
	switch {
	case req.AutoPauseMemory != nil && !autoPause:
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("autoPauseMemory can only be set with autoPause"))
		return
	case autoResume && !autoPause:
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("autoResume needs autoPause: only a sandbox paused at its timeout can be resumed by traffic"))
		return
	case autoResume && !keepMemory:
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("autoResume needs a pause that keeps memory (autoPauseMemory true)"))
		return
	}
	if autoPause {
		cr.Lifecycle.OnTimeout = sandbox.OnTimeoutPause
		cr.Lifecycle.PauseFilesystem = !keepMemory
	}
	cr.Lifecycle.AutoResume = autoResume
	if n := req.Network; n != nil {
		if err := unapplied(n.EgressProxy, n.Rules, n.HTTPSPorts); err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
		cr.Network.AllowOut, cr.Network.DenyOut, cr.Network.PublicTraffic = n.AllowOut, n.DenyOut, n.AllowPublicTraffic
		if n.MaskRequestHost != nil {
			cr.Network.MaskRequestHost = *n.MaskRequestHost
		}
	}
	images, hosts, err := s.mcpImages(r.Context(), keyID(r), req.MCP)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	cr.Images = images
	cr.Network.AllowOut = mcpEgress(cr.Network.AllowOut, cr.Network.DenyOut, hosts)
	if hasMCP(req.MCP) {
		// MCP servers are untrusted code in the sandbox: envd, which runs
		// anything as root, must ask them for its token (review 31, F3).
		cr.Secure = true
	}
	auditNote(r, "template", req.TemplateID)
	if env := audit.Env(req.EnvVars, nil); len(env) > 0 {
		auditNote(r, "envVars", env)
	}
	if len(req.Metadata) > 0 {
		auditNote(r, "metadata", req.Metadata)
	}
	auditNote(r, "timeoutSeconds", *req.Timeout)
	policy := networkDetail(cr.Network.Internet, cr.Network.AllowOut, cr.Network.DenyOut)
	if policy != nil {
		auditNote(r, "network", policy)
	}
	sb, err := s.mgr.Create(r.Context(), cr)
	if err == nil {
		auditSandbox(r, sb.ID)
		if policy != nil {
			s.audit.Record(audit.Event{KeyID: keyID(r), SandboxID: sb.ID, Kind: audit.KindNetwork, Action: "network.set", Detail: policy})
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, sandbox.ErrPrivateInsecure):
			// Only v1 bodies get here: v2 sandboxes are always secure.
			err = e2bapi.BadRequest(e2bapi.MsgPrivateNeedsSecure)
		}
		e2bapi.Write(w, s.logger, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(sb))
}

// unapplied refuses, with a 501, the network settings E2B has and Hutch
// does not apply, rather than accept them and do nothing: an egress proxy,
// per-host request rules and ports served over TLS.
func unapplied(egressProxy, rules json.RawMessage, httpsPorts []int) error {
	set := func(raw json.RawMessage) bool {
		v := strings.TrimSpace(string(raw))
		return v != "" && v != "null" && v != "{}" && v != "[]"
	}
	switch {
	case set(egressProxy):
		return e2bapi.NotSupported("egress proxies (network.egressProxy)")
	case set(rules):
		return e2bapi.NotSupported("per-host request rules (network.rules)")
	case len(httpsPorts) > 0:
		return e2bapi.NotSupported("ports served over TLS (network.httpsPorts)")
	}
	return nil
}

func (s *Server) sandboxJSON(sb *sandbox.Sandbox) e2bapi.Sandbox {
	out := e2bapi.Sandbox{
		SandboxID: sb.ID, TemplateID: sb.TemplateID, ClientID: e2bapi.ClientID,
		EnvdVersion: sb.EnvdVersion, EnvdAccessToken: sb.EnvdAccessToken, Alias: sb.Alias,
	}
	if s.domain != "" {
		d := s.domain
		out.Domain = &d
	}
	if sb.TrafficAccessToken != "" {
		t := sb.TrafficAccessToken
		out.TrafficAccessToken = &t
	}
	return out
}

func listed(sb *sandbox.Sandbox) e2bapi.ListedSandbox {
	return e2bapi.ListedSandbox{
		TemplateID: sb.TemplateID, Alias: sb.Alias, SandboxID: sb.ID, ClientID: e2bapi.ClientID,
		StartedAt: e2bapi.Time(sb.StartedAt), EndAt: e2bapi.Time(sb.EndAt),
		CPUCount: int32(sb.Limits.CPUs), MemoryMB: int32(sb.Limits.MemoryMB), DiskSizeMB: int32(sb.Limits.DiskMB),
		Metadata: withRuntime(sb), State: string(sb.State), EnvdVersion: sb.EnvdVersion,
		VolumeMounts: volumeMountsJSON(sb.Volumes),
	}
}

// RuntimeMetadata is the metadata key that names a sandbox's runtime
// backend ("native", "gvisor"): a create request's picks it, and every
// sandbox Hutch lists or describes carries it.
const RuntimeMetadata = "hutch.runtime"

// withRuntime is sb's metadata with RuntimeMetadata added.
func withRuntime(sb *sandbox.Sandbox) map[string]string {
	md := maps.Clone(sb.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	if sb.Runtime != "" {
		md[RuntimeMetadata] = sb.Runtime
	}
	return md
}

// volumeMountsJSON is a sandbox's volumes as E2B lists them (nil for none).
func volumeMountsJSON(vs []sandbox.VolumeMount) []e2bapi.VolumeMount {
	var out []e2bapi.VolumeMount
	for _, v := range vs {
		out = append(out, e2bapi.VolumeMount{Name: v.Name, Path: v.Path})
	}
	return out
}

// networkJSON is getInfo's network object: the policy in force, or nil for
// a sandbox created without one and never updated.
func networkJSON(n sandbox.Network) *e2bapi.NetworkConfig {
	out := &e2bapi.NetworkConfig{AllowPublicTraffic: n.PublicTraffic}
	if len(n.AllowOut) > 0 {
		out.AllowOut = n.AllowOut
	}
	if len(n.DenyOut) > 0 {
		out.DenyOut = n.DenyOut
	}
	if n.MaskRequestHost != "" {
		h := n.MaskRequestHost
		out.MaskRequestHost = &h
	}
	if out.AllowOut == nil && out.DenyOut == nil && out.AllowPublicTraffic == nil && out.MaskRequestHost == nil {
		return nil
	}
	return out
}

// notFound turns a missing sandbox into the spec's 404 with code 404.
func (s *Server) notFound(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, errdefs.ErrNotFound) {
		err = e2bapi.SandboxNotFound(id)
	}
	e2bapi.Write(w, s.logger, err)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rec, err := s.mgr.Get(r.Context(), keyID(r), id)
	if err != nil {
		s.notFound(w, id, err)
		return
	}
	detail := e2bapi.SandboxDetail{ListedSandbox: listed(rec), EnvdAccessToken: rec.EnvdAccessToken,
		AllowInternetAccess: rec.Network.Internet, Network: networkJSON(rec.Network)}
	if s.domain != "" {
		d := s.domain
		detail.Domain = &d
	}
	detail.Lifecycle = &e2bapi.Lifecycle{OnTimeout: string(rec.Lifecycle.OnTimeout), AutoResume: rec.Lifecycle.AutoResume}
	writeJSON(w, http.StatusOK, detail)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.mgr.Kill(r.Context(), keyID(r), id); err != nil {
		s.notFound(w, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req e2bapi.TimeoutRequest
	if !s.decode(w, r, &req, false) {
		return
	}
	if err := s.mgr.SetTimeout(r.Context(), keyID(r), id, time.Duration(req.Timeout)*time.Second); err != nil {
		s.notFound(w, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req e2bapi.RefreshRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	if err := s.mgr.Refresh(r.Context(), keyID(r), id, time.Duration(req.DurationSeconds())*time.Second); err != nil {
		s.notFound(w, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req e2bapi.ConnectRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	connect := s.mgr.Connect
	if req.Memory != nil && !*req.Memory {
		connect = s.mgr.ConnectReboot // onResume 'reboot'
	}
	rec, resumed, err := connect(r.Context(), keyID(r), id, time.Duration(req.TimeoutSeconds())*time.Second)
	if err != nil {
		s.notFound(w, id, err)
		return
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated // E2B's answer for a sandbox resumed
	}
	writeJSON(w, status, s.sandboxJSON(rec))
}

// pause answers POST /sandboxes/{id}/pause: 204 paused (keeping its
// memory, frozen in place; or, with memory false, keeping its files only),
// 409 already paused, 404 unknown.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req e2bapi.PauseRequest
	if !s.decode(w, r, &req, true) {
		return
	}
	keep := req.Memory == nil || *req.Memory
	if err := s.mgr.Pause(r.Context(), keyID(r), id, keep); err != nil {
		if errors.Is(err, sandbox.ErrAlreadyPaused) {
			e2bapi.Write(w, s.logger, e2bapi.Conflict(fmt.Sprintf("sandbox %s is already paused", id)))
			return
		}
		s.notFound(w, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q, err := e2bapi.ParseListQuery(r.URL.Query())
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	f := sandbox.ListFilter{
		KeyID: keyID(r), Metadata: q.Metadata, StartedAfter: q.StartedAfter,
		Template: q.Template, Ascending: q.Order == e2bapi.OrderAsc, Limit: q.Limit, NextToken: q.NextToken,
	}
	for _, st := range q.States {
		f.States = append(f.States, sandbox.State(st))
	}
	items, next, err := s.mgr.List(r.Context(), f)
	if err != nil {
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			err = e2bapi.BadRequest("Invalid next token")
		}
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := make([]e2bapi.ListedSandbox, 0, len(items))
	for _, sb := range items {
		out = append(out, listed(sb))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listLegacy(w http.ResponseWriter, r *http.Request) {
	q, err := e2bapi.ParseLegacyListQuery(r.URL.Query())
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := []e2bapi.ListedSandbox{}
	next := ""
	for {
		items, tok, err := s.mgr.List(r.Context(), sandbox.ListFilter{KeyID: keyID(r), Metadata: q.Metadata, States: []sandbox.State{sandbox.StateRunning}, NextToken: next})
		if err != nil {
			e2bapi.Write(w, s.logger, err)
			return
		}
		for _, sb := range items {
			out = append(out, listed(sb))
		}
		if tok == "" {
			break
		}
		next = tok
	}
	writeJSON(w, http.StatusOK, out)
}

// metrics answers a sandbox's samples (every 5 s, the last 15 minutes),
// between the optional start and end query parameters (Unix seconds).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var bounds [2]time.Time
	for i, name := range []string{"start", "end"} {
		v := r.URL.Query().Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			e2bapi.Write(w, s.logger, e2bapi.BadRequest(fmt.Sprintf("%s must be a Unix time in seconds, got %q", name, v)))
			return
		}
		bounds[i] = time.Unix(n, 0)
	}
	if !bounds[0].IsZero() && !bounds[1].IsZero() && bounds[1].Before(bounds[0]) {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("end is before start"))
		return
	}
	samples, err := s.mgr.Metrics(r.Context(), keyID(r), id, bounds[0], bounds[1])
	if err != nil {
		s.notFound(w, id, err)
		return
	}
	out := make([]e2bapi.SandboxMetric, 0, len(samples))
	for _, m := range samples {
		out = append(out, metricJSON(m))
	}
	writeJSON(w, http.StatusOK, out)
}

// batchMetrics answers the newest sample of each sandbox named in
// sandbox_ids (comma-separated): {"sandboxes": {"<id>": SandboxMetric}}.
// Ids the key cannot see are left out.
func (s *Server) batchMetrics(w http.ResponseWriter, r *http.Request) {
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for _, id := range strings.Split(v, ",") {
			if id = strings.TrimSpace(id); id != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 || len(ids) > 100 {
		e2bapi.Write(w, s.logger, e2bapi.BadRequest("sandbox_ids must name 1 to 100 sandboxes"))
		return
	}
	latest, err := s.mgr.LatestMetrics(r.Context(), keyID(r), ids)
	if err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	out := map[string]e2bapi.SandboxMetric{}
	for id, m := range latest {
		out[id] = metricJSON(m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": out})
}

func metricJSON(m sandbox.Metric) e2bapi.SandboxMetric {
	out := e2bapi.NewSandboxMetric(m.Time)
	out.CPUCount = int32(m.CPUCount)
	out.CPUUsedPct = float32(m.CPUUsedPct)
	out.MemUsed, out.MemTotal, out.MemCache = int64(m.MemUsed), int64(m.MemTotal), int64(m.MemCache)
	out.DiskUsed, out.DiskTotal = int64(m.DiskUsed), int64(m.DiskTotal)
	return out
}

// networkUpdate is PUT /sandboxes/{id}/network's body. It replaces the
// egress configuration: absent fields are cleared (E2B's semantics).
type networkUpdate struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	Rules               json.RawMessage `json:"rules"`
}

// Validate refuses what Hutch does not apply and lists past the create's
// bound (each entry costs firewall rules); the rules themselves are the
// manager's to parse.
func (u *networkUpdate) Validate() error {
	if err := unapplied(u.EgressProxy, u.Rules, nil); err != nil {
		return err
	}
	return e2bapi.ValidateEgressRules("", u.AllowOut, u.DenyOut)
}

// updateNetwork replaces a running sandbox's egress rules at once (spec
// §2.4 updateNetwork; omitted fields are cleared, as E2B documents): 204,
// connections the new rules deny are cut.
func (s *Server) updateNetwork(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var req networkUpdate
	if !s.decode(w, r, &req, false) {
		return
	}
	upd := sandbox.EgressUpdate{Internet: req.AllowInternetAccess, AllowOut: req.AllowOut, DenyOut: req.DenyOut}
	for k, v := range networkDetail(req.AllowInternetAccess, req.AllowOut, req.DenyOut) {
		auditNote(r, k, v)
	}
	if err := s.mgr.UpdateEgress(r.Context(), keyID(r), id, upd); err != nil {
		s.notFound(w, id, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// networkDetail is a network policy as the audit trail records it; nil
// when the request set none.
func networkDetail(internet *bool, allowOut, denyOut []string) map[string]any {
	if internet == nil && allowOut == nil && denyOut == nil {
		return nil
	}
	d := map[string]any{}
	if internet != nil {
		d["allowInternetAccess"] = *internet
	}
	if allowOut != nil {
		d["allowOut"] = allowOut
	}
	if denyOut != nil {
		d["denyOut"] = denyOut
	}
	return d
}
