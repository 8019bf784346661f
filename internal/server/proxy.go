package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/hutch-sandbox/hutch/internal/server/e2bapi"
)

// envdPort is where the SDKs address envd.
const envdPort = 49983

// proxy sends a request to the sandbox's envd through its host socket.
// Unknown and dead sandboxes answer 502 with the edge proxy's JSON (spec
// §2.8): the SDKs read it as "not running any more".
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, id string, port int) {
	// envd authenticates requests itself (access token); the routing only
	// needs the sandbox to exist.
	sock, err := s.mgr.Socket(r.Context(), "", id)
	if err != nil {
		e2bapi.WriteSandboxNotFound502(w, id)
		return
	}
	if port != envdPort {
		e2bapi.Write(w, s.logger, e2bapi.NotSupported("routing to ports other than envd's"))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: "envd"})
			pr.Out.Host = r.Host
		},
		Transport: s.transport(sock),
		// Stream responses as they come (Connect server streams).
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.logger.Debug("envd unreachable", "sandbox", id, "err", err)
			e2bapi.WriteSandboxNotFound502(w, id)
		},
	}
	rp.ServeHTTP(w, r)
}

// transport returns the long-lived transport to one envd socket, so that
// connections are reused across requests like any HTTP client's.
func (s *Server) transport(sock string) http.RoundTripper {
	if t, ok := s.transports.Load(sock); ok {
		return t.(http.RoundTripper)
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	actual, _ := s.transports.LoadOrStore(sock, t)
	return actual.(http.RoundTripper)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
