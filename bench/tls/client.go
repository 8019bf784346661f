package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/sdk"
)

// target is one row: how the client reaches the sandbox's envd. Every
// row uses the same client code (Go's net/http and connect-go, as Hutch's
// Go SDK does), and dials addr directly, so that no name resolution is in
// the timings; TLS rows verify the certificate for the URL's host
// (<port>-<id>.<domain>) against the server's CA alone.
type target struct {
	key, name string
	addr      string         // where every connection goes
	roots     *x509.CertPool // nil: plain HTTP
	h2        bool           // HTTP/2 (ALPN h2 only); else HTTP/1.1 only
	// routed: E2B_API_URL mode, requests to http://addr with the
	// E2b-Sandbox-Id and E2b-Sandbox-Port headers; else by host name.
	routed bool

	dials atomic.Int64 // connections opened
	// What the first connection negotiated, for the header.
	negotiated string
}

// base is envd's base URL for the sandbox id.
func (t *target) base(id, domain string) string {
	if t.routed {
		return "http://" + t.addr
	}
	return fmt.Sprintf("https://%d-%s.%s", sdk.EnvdPort, id, domain)
}

// transport is a new transport of the row's kind, with no connection yet.
func (t *target) transport() *http.Transport {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			t.dials.Add(1)
			return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, t.addr)
		},
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		// Measure the transport, not gzip.
		DisableCompression: true,
		// Large enough buffers that the client is not what limits /files.
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
		Protocols:       new(http.Protocols),
	}
	if t.roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: t.roots}
	}
	if t.h2 {
		tr.Protocols.SetHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	return tr
}

// routedRT adds what every envd request of the E2B SDKs carries: the
// access token and, in E2B_API_URL mode, the routing headers.
type routedRT struct {
	rt        http.RoundTripper
	id, token string
	routed    bool
	wantHTTP2 bool
}

func (r *routedRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req2 := *req
	req2.Header = req.Header.Clone()
	if r.routed {
		req2.Header.Set("E2b-Sandbox-Id", r.id)
		req2.Header.Set("E2b-Sandbox-Port", strconv.Itoa(sdk.EnvdPort))
	}
	if r.token != "" {
		req2.Header.Set(envdapi.HeaderAccessToken, r.token)
	}
	resp, err := r.rt.RoundTrip(&req2)
	if err == nil && (resp.ProtoMajor == 2) != r.wantHTTP2 {
		resp.Body.Close()
		return nil, fmt.Errorf("answered over %s, not the row's protocol", resp.Proto)
	}
	return resp, err
}

// envd is a client of the sandbox's envd over one transport.
type envd struct {
	t  *target
	tr *http.Transport
	*harness.EnvdTimer
}

// client is a new client of the row's kind for sandbox s, on a new
// transport.
func (t *target) client(s *sdk.Sandbox, domain string) *envd {
	tr := t.transport()
	hc := &http.Client{Transport: &routedRT{rt: tr, id: s.ID, token: s.EnvdAccessToken, routed: t.routed, wantHTTP2: t.h2}}
	base := t.base(s.ID, domain)
	return &envd{t: t, tr: tr, EnvdTimer: harness.NewEnvdTimer(hc, base)}
}

// close closes the client's idle connections.
func (e *envd) close() { e.tr.CloseIdleConnections() }

// newConn is a new connection (TCP, and TLS with a full handshake: the
// client keeps no session tickets) and one GET /health on it, timed from
// the dial to the answer.
func (t *target) newConn(ctx context.Context, s *sdk.Sandbox, domain string) (time.Duration, error) {
	e := t.client(s, domain)
	defer e.close()
	if t.negotiated == "" && t.roots != nil {
		e.tr.TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			t.negotiated = describeTLS(cs)
			return nil
		}
	}
	return e.Health(ctx)
}

// describeTLS names what a TLS connection negotiated.
func describeTLS(cs tls.ConnectionState) string {
	proto := cs.NegotiatedProtocol
	if proto == "" {
		proto = "no ALPN"
	}
	curve := cs.CurveID.String()
	if cs.CurveID == 0 {
		curve = "key exchange not reported"
	}
	return fmt.Sprintf("%s, %s, %s, ALPN %s", tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite), curve, proto)
}
