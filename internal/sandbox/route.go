package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envd"
)

// ErrPortClosed is returned (wrapped) by a sandbox's port transports when
// nothing listens on that port inside the sandbox.
var ErrPortClosed = errors.New("port is not open in the sandbox")

// route is the host's way into one sandbox: HTTP to its envd, and tunnels
// to its other ports, all through envd's unix socket (so they work whether
// or not the sandbox has a network). Transports are kept per port so that
// connections are reused across requests, like any HTTP client's.
type route struct {
	sock string

	mu    sync.Mutex
	ports map[int]*http.Transport
}

func newRoute(sock string) *route {
	return &route{sock: sock, ports: map[int]*http.Transport{}}
}

// transport returns the transport to port inside the sandbox.
func (r *route) transport(port int) *http.Transport {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := r.ports[port]; t != nil {
		return t
	}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", r.sock)
	}
	if port != envd.Port {
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialTunnel(ctx, r.sock, port)
		}
	}
	t := &http.Transport{
		DialContext:         dial,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	r.ports[port] = t
	return t
}

// close drops every idle connection; in-flight ones end with the sandbox.
func (r *route) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.ports {
		t.CloseIdleConnections()
	}
	clear(r.ports)
}

// dialTunnel opens a connection to a port inside the sandbox: it asks envd,
// through its socket, to CONNECT to that port on the sandbox's loopback.
func dialTunnel(ctx context.Context, sock string, port int) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	target := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("tunnel to port %d: %w", port, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		conn.Close()
		if resp.StatusCode == http.StatusBadGateway {
			return nil, fmt.Errorf("port %d: %w", port, ErrPortClosed)
		}
		return nil, fmt.Errorf("tunnel to port %d: envd answered %s: %s", port, resp.Status, msg)
	}
	conn.SetDeadline(time.Time{})
	if br.Buffered() == 0 {
		return conn, nil
	}
	// The service spoke first (e.g. a banner) and envd's 200 came in the
	// same read.
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Ingress is how requests to a sandbox's ports (not envd's) are let in.
type Ingress struct {
	// TrafficToken, when set, must come in the e2b-traffic-access-token
	// header.
	TrafficToken string
	// MaskHost replaces the Host header ("${PORT}" becomes the port).
	MaskHost string
}

// Ingress returns the inbound rules of a running sandbox's ports.
func (m *Manager) Ingress(id string) (Ingress, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.live[id]
	if l == nil {
		return Ingress{}, false
	}
	return Ingress{TrafficToken: l.trafficToken, MaskHost: l.maskHost}, true
}

// Transport returns the round tripper that reaches port inside a running
// sandbox (envd.Port for envd itself), and false when the manager runs no
// sandbox with that id. Routing does not check API keys: envd checks its
// own access token, and ports are the sandbox's public face.
func (m *Manager) Transport(id string, port int) (http.RoundTripper, bool) {
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil {
		return nil, false
	}
	return l.route.transport(port), true
}
