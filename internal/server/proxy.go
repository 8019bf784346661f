package server

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// trafficTokenHeader carries a sandbox's traffic access token (E2B's
// "restrict public access").
const trafficTokenHeader = "E2b-Traffic-Access-Token"

// mayWake reports whether r may resume paused sandbox id (made to resume
// on traffic) on its way to port: only with the credentials the request
// would need once the sandbox runs — its traffic access token for a port
// of a sandbox closed to public traffic, envd's access token or a valid,
// unexpired URL signature for envd. Anyone else is answered as for a
// sandbox that is not running, and wakes nothing.
func mayWake(mgr *sandbox.Manager, r *http.Request, id string, port int) bool {
	traffic, envd, ok := mgr.WakeRules(id)
	switch {
	case !ok:
		return false
	case port != envdapi.Port:
		return traffic == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get(trafficTokenHeader)), []byte(traffic)) == 1
	case envd == "":
		return true
	case r.Header.Get(envdapi.HeaderAccessToken) != "":
		return subtle.ConstantTimeCompare([]byte(r.Header.Get(envdapi.HeaderAccessToken)), []byte(envd)) == 1
	}
	return signedURL(r, envd, time.Now())
}

// signedURL reports whether r is a /files URL signed with envd's token
// that has not expired: what envd accepts in place of the token (envd's
// files.authorize).
func signedURL(r *http.Request, token string, now time.Time) bool {
	// The path as envd compares it: exactly /files.
	if r.URL.Path != "/files" {
		return false
	}
	signed, ok := fileSignature(r.Method, r.URL.Query())
	return ok && (!signed.hasExpires || signed.expires >= now.Unix()) && signed.by(token)
}

// proxy sends a request to a port of a sandbox: envd's (49983) or any
// other, tunnelled through envd's socket. Unknown and dead sandboxes answer
// 502 with the edge proxy's JSON (spec §2.8): the SDKs read it as "not
// running any more"; a port nobody listens on answers 502 saying so.
// Upgrades (WebSockets) and streaming bodies pass through in both
// directions.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id string, port int) {
	target := metrics.TargetPort
	if port == envdapi.Port {
		target = metrics.TargetEnvd
	}
	w, done := s.prom.Edge(w, r, target)
	defer done()
	// envd authenticates requests itself (access token); the routing only
	// needs the sandbox to exist.
	transportOf := s.mgr.Transport
	switch port {
	case mcpGatewayPort:
		// The gateway runs as the sandbox's root and holds its token; its
		// servers (untrusted code, other uids) must never stand in for it
		// should it die (review 31, round 3).
		transportOf = func(id string, port int) (http.RoundTripper, bool) { return s.mgr.OwnedTransport(id, port, "root") }
	case codeInterpreterPort:
		// The SDKs send the sandbox's envd token to the code interpreter:
		// only its server (the template's user's) or root may be sent it,
		// not a process of another uid that took the port (review 32).
		transportOf = func(id string, port int) (http.RoundTripper, bool) {
			return s.mgr.OwnedTransport(id, port, codeInterpreterUser)
		}
	}
	transport, ok := transportOf(id, port)
	if !ok && mayWake(s.mgr, r, id, port) && s.mgr.Wake(r.Context(), id) {
		// Paused, made to resume on traffic: resumed, then on its way.
		transport, ok = transportOf(id, port)
	}
	if !ok {
		s.prom.EdgeError(target, metrics.EdgeNotFound)
		e2bapi.WriteSandboxNotFound502(w, id)
		return
	}
	if port == envdapi.Port && s.mgr.Legacy(id) && path.Clean("/"+r.URL.Path) == "/init" {
		// A sandbox made before envd's control socket serves /init on the
		// socket this request would go to.
		s.prom.EdgeError(target, metrics.EdgeForbidden)
		e2bapi.WriteError(w, http.StatusForbidden, "POST /init is the host's, not a client's", "")
		return
	}
	host := r.Host
	if port != envdapi.Port {
		in, _ := s.mgr.Ingress(id)
		if in.TrafficToken != "" {
			got := r.Header.Get(trafficTokenHeader)
			if subtle.ConstantTimeCompare([]byte(got), []byte(in.TrafficToken)) != 1 {
				s.prom.EdgeError(target, metrics.EdgeForbidden)
				e2bapi.WriteError(w, http.StatusForbidden, "the sandbox's ports need its traffic access token in the "+trafficTokenHeader+" header", "")
				return
			}
		}
		// The sandbox's services never see the token.
		r.Header.Del(trafficTokenHeader)
		if in.MaskHost != "" {
			host = strings.ReplaceAll(in.MaskHost, "${PORT}", strconv.Itoa(port))
		}
	}
	// What the request does, for the audit trail, read before it goes.
	ea := s.auditEdge(r, id, port)
	defer ea.done()
	if ea != nil && ea.refusal != nil {
		ea.refusal.write(w)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))})
			pr.Out.Host = host
			stripConsoleCookie(pr.Out.Header)
		},
		ModifyResponse: dropConsoleSetCookie,
		Transport:      transport,
		// Stream responses as they come (Connect server streams, SSE).
		FlushInterval: -1,
		// Streams cut by a sandbox's end are routine, not warnings.
		ErrorLog: slog.NewLogLogger(s.logger.Handler(), slog.LevelDebug),
		// The request it is given is the outgoing one: tooSlow looks at
		// the client's.
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			s.logger.Debug("sandbox unreachable", "sandbox", id, "port", port, "err", err)
			if ea != nil && ea.failed != nil {
				ea.failed()
			}
			if tooSlow(r) {
				// The client's doing, not the sandbox's: its status says
				// so in the requests' count.
				e2bapi.Write(w, s.logger, errBodyTooSlow)
				return
			}
			if errors.Is(err, sandbox.ErrPortClosed) {
				s.prom.EdgeError(target, metrics.EdgePortClosed)
				e2bapi.WritePortClosed502(w, id, port)
				return
			}
			s.prom.EdgeError(target, metrics.EdgeUnreachable)
			e2bapi.WriteSandboxNotFound502(w, id)
		},
	}
	if ea != nil && ea.modify != nil {
		rp.ModifyResponse = func(resp *http.Response) error {
			if err := dropConsoleSetCookie(resp); err != nil {
				return err
			}
			return ea.modify(resp)
		}
	}
	// A proxy reads the request while it writes the response. Without full
	// duplex, net/http's HTTP/1 server drains the unread request body when
	// the response headers go out, racing the transport that is still
	// forwarding it; on a keep-alive connection that cut one proxied stream
	// in a few hundred (the transport closed the upstream connection
	// mid-body).
	if err := http.NewResponseController(w).EnableFullDuplex(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.logger.Debug("full duplex", "err", err)
	}
	rp.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
