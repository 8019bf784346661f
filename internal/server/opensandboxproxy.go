package server

import (
	"cmp"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/osbapi"
)

// osbProxy serves /v1/sandboxes/{id}/proxy/{port}/...: the endpoints the
// lifecycle API hands out (osbEndpoint). Port 44772 is OpenSandbox's
// execd, which Hutch answers itself by calling the sandbox's envd
// (internal/osbexecd): no daemon of OpenSandbox's runs in the sandbox.
// Every other port goes to the sandbox as E2B's router sends it
// (proxy.go), with its rules: the traffic token of a sandbox closed to
// public traffic.
//
// execd is reached with the endpoint's header X-EXECD-ACCESS-TOKEN, which
// is the sandbox's envd access token (what an E2B client holds to reach
// envd), or with an API key of the sandbox's owner (the SDKs' server
// proxy mode sends it). A sandbox without a token (an E2B sandbox made
// without `secure`) lets anyone who can reach the server run commands
// through execd, as through envd.
func (s *Server) osbProxy(w http.ResponseWriter, r *http.Request) {
	// These paths share the API's origin, and so the web console's:
	// nothing they answer may run as that origin (review: a sandbox's page
	// created an API key with a signed-in console user's session).
	w = &sandboxedWriter{ResponseWriter: w}
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		osbapi.Write(w, s.logger, osbapi.BadRequest(fmt.Sprintf("port: want 1-65535, got %q", r.PathValue("port"))))
		return
	}
	rest := "/" + strings.TrimPrefix(r.URL.Path, osbProxyPrefix(id, port)+"/")
	switch port {
	case osbapi.ExecdPort:
	case osbapi.EgressPort:
		// OpenSandbox's egress sidecar: Hutch enforces egress on the
		// host, and never sends this port's calls into the sandbox — the
		// TypeScript SDK puts the API key on them.
		osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusNotImplemented, osbapi.CodeNotSupported,
			"Hutch runs no egress sidecar: a sandbox's egress policy is set at create (networkPolicy) and enforced on the host; see docs/opensandbox.md"))
		return
	default:
		if !s.osbReachable(id) {
			// The path names the sandbox: one that is not here is this
			// path's 404, in the body OpenSandbox's clients read, not the
			// edge's 502 (which the router still answers for a sandbox
			// that stops on the way, or a port nobody listens on).
			osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusNotFound, osbapi.CodeNotFound,
				fmt.Sprintf("sandbox %s does not exist, or is not running", id)))
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = rest, ""
		// The SDKs send their credentials to every endpoint (the
		// TypeScript one its API key too): none reaches the sandbox's
		// own services.
		for _, h := range []string{osbapi.HeaderAPIKey, osbapi.HeaderExecdToken, "X-API-Key"} {
			r2.Header.Del(h)
		}
		for _, a := range r2.Header.Values("Authorization") {
			// A Hutch API key as a bearer token, however it is spelled:
			// the server's, not the sandbox's (any other Authorization
			// is the app's own).
			if scheme, token, _ := strings.Cut(strings.TrimSpace(a), " "); strings.EqualFold(scheme, "bearer") &&
				strings.HasPrefix(strings.TrimSpace(token), "e2b_") {
				r2.Header.Del("Authorization")
				break
			}
		}
		s.proxy(w, r2, id, port)
		return
	}
	if s.execd == nil {
		osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusNotImplemented, osbapi.CodeNotSupported, "this server does not serve OpenSandbox's execd"))
		return
	}
	owner, token, ok := s.mgr.Principal(id)
	if !ok || !s.execdAllowed(r, owner, token) {
		// Unknown, not running and not this caller's look the same: no
		// probing of other keys' sandbox ids.
		osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusNotFound, osbapi.CodeNotFound,
			fmt.Sprintf("sandbox %s is not running, or this request does not carry its execd token (%s)", id, osbapi.HeaderExecdToken)))
		return
	}
	transport, ok := s.mgr.Transport(id, envdapi.Port)
	if !ok {
		osbapi.Write(w, s.logger, osbapi.Errorf(http.StatusConflict, osbapi.CodeInvalidState, fmt.Sprintf("sandbox %s is not running", id)))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// What an agent does through execd, for the audit trail: the
		// call, not its body (a command's text is in its query or body;
		// the trail keeps the call's kind and path).
		s.audit.Record(audit.Event{KeyID: owner, SandboxID: id, Kind: execdKind(rest), Action: "execd " + r.Method + " " + rest,
			Outcome: "requested", Detail: map[string]any{"path": r.URL.Query().Get("path")}})
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = rest, ""
	metrics := func(ctx context.Context) (cpus, cpuPct, memTotal, memUsed float64, ok bool) {
		ms, err := s.mgr.LatestMetrics(ctx, owner, []string{id})
		m, ok := ms[id]
		if err != nil || !ok {
			return 0, 0, 0, 0, false
		}
		return float64(m.CPUCount), m.CPUUsedPct, float64(m.MemTotal) / (1 << 20), float64(m.MemUsed) / (1 << 20), true
	}
	s.execd.ServeSandbox(w, r2, id, owner, transport, token, metrics)
}

// osbReachable reports whether the router may reach sandbox id's ports:
// it runs here, or is paused to be resumed by traffic (the router decides
// then whether this request may wake it).
func (s *Server) osbReachable(id string) bool {
	if _, ok := s.mgr.Ingress(id); ok {
		return true
	}
	_, _, wakes := s.mgr.WakeRules(id)
	return wakes
}

// execdAllowed reports whether r may use the execd of a sandbox of key
// owner whose envd token is token.
func (s *Server) execdAllowed(r *http.Request, owner, token string) bool {
	if token == "" {
		return true
	}
	if got := r.Header.Get(osbapi.HeaderExecdToken); got != "" {
		return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
	}
	key := cmp.Or(r.Header.Get(osbapi.HeaderAPIKey), r.Header.Get("X-API-Key"))
	if key == "" {
		return false
	}
	id, err := s.mgr.VerifyKey(r.Context(), key)
	return err == nil && id == owner
}

// execdKind is the audit kind of an execd call to path.
func execdKind(path string) string {
	switch {
	case strings.HasPrefix(path, "/command"), strings.HasPrefix(path, "/session"):
		return audit.KindCommand
	case strings.HasPrefix(path, "/files"), strings.HasPrefix(path, "/directories"):
		return audit.KindFile
	}
	return audit.KindAPI
}

// forgetExecd drops what execd keeps for sandbox id.
func (s *Server) forgetExecd(id string) {
	if s.execd != nil {
		s.execd.Forget(id)
	}
}

// sandboxedWriter answers with a Content-Security-Policy of "sandbox",
// over whatever the sandbox sent: a browser runs the page, if it is one,
// in an origin of its own, so that its scripts neither read the API's
// answers nor send the console's cookie (SameSite=Strict, and custom
// headers need a CORS preflight no route answers).
type sandboxedWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *sandboxedWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		// 1xx answers (100 Continue, 101 Switching Protocols' is final)
		// go as they are; the policy goes on the final one.
		w.wrote = true
		h := w.Header()
		h.Set("Content-Security-Policy", "sandbox")
		h.Set("X-Content-Type-Options", "nosniff")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *sandboxedWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes for
// streams, hijacks for upgrades).
func (w *sandboxedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
