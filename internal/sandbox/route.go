package sandbox

import (
	"bufio"
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// ErrPortClosed is returned (wrapped) by a sandbox's port transports when
// nothing listens on that port inside the sandbox.
var ErrPortClosed = errors.New("port is not open in the sandbox")

// route is the host's way into one sandbox, through the two unix sockets
// its envd serves (so it works whether or not the sandbox has a network):
//
//	api      envd's API, every request token-checked by envd: what the
//	         edge router forwards clients to.
//	control  the host's own: POST /init (which sets the access token) and
//	         CONNECT tunnels to the sandbox's other ports. Nothing a client
//	         sends is ever written to it: the router reaches other ports
//	         only through tunnels the host opens itself.
//
// envd's API and the control socket have a transport each. Other ports
// have one each too, but only the maxPortTransports used most recently: a
// transport keeps state per address it was asked for (idle connections and
// a wait queue that stays after a failed dial, about 0.5 KB), so a route
// holding one for every port ever asked for would grow with each distinct
// port a client names (review R9). A transport dropped from the cache
// closes its idle connections, and those of its requests still in flight
// when they end; the next request for its port makes a new one.
type route struct {
	api, control string // socket paths; equal for a sandbox made before the split

	envd *http.Transport // to envd's API: the edge's requests for envd's port
	host *http.Transport // to envd on the control socket: the manager's own calls

	mu     sync.Mutex
	token  string    // envd's access token, sent with each CONNECT
	ports  list.List // of *portTransport, the one used most recently first
	byPort map[int]*list.Element
	owned  []ownedPort // ownedTransport's, made when asked for
}

// maxPortTransports is the number of ports per sandbox whose connections
// are kept for reuse, and maxIdlePerPort the idle connections each keeps:
// a sandbox holds at most 64 idle tunnels, whatever ports are used.
const (
	maxPortTransports = 16
	maxIdlePerPort    = 4
)

func newRoute(api, control string) *route {
	r := &route{api: api, control: control, byPort: make(map[int]*list.Element)}
	unixDial := func(path string) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}
	}
	// Answers come from inside the sandbox: their headers are bounded.
	r.envd = &http.Transport{DialContext: unixDial(api), DisableCompression: true, MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second, MaxResponseHeaderBytes: maxAnswerHeader}
	r.host = &http.Transport{DialContext: unixDial(control), DisableCompression: true, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second, MaxResponseHeaderBytes: maxAnswerHeader}
	return r
}

// legacy reports whether the sandbox predates the control socket: its one
// socket serves /init and tunnels too, which the router must then refuse.
func (r *route) legacy() bool { return r.api == r.control }

func (r *route) setToken(token string) {
	r.mu.Lock()
	r.token = token
	r.mu.Unlock()
}

func (r *route) accessToken() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.token
}

// transport returns the round tripper the edge uses for port inside the
// sandbox: envd's API for envdapi.Port, a tunnel for any other.
func (r *route) transport(port int) http.RoundTripper {
	if port == envdapi.Port {
		return portTransport{Transport: r.envd, port: port}
	}
	r.mu.Lock()
	if e, ok := r.byPort[port]; ok {
		r.ports.MoveToFront(e)
		t := e.Value.(*portTransport)
		r.mu.Unlock()
		return *t
	}
	t := &portTransport{Transport: r.newPortTransport(port), port: port}
	r.byPort[port] = r.ports.PushFront(t)
	var evicted *portTransport
	if r.ports.Len() > maxPortTransports {
		evicted = r.ports.Remove(r.ports.Back()).(*portTransport)
		delete(r.byPort, evicted.port)
	}
	r.mu.Unlock()
	if evicted != nil {
		evicted.CloseIdleConnections()
	}
	return *t
}

// ownedTransport is transport(port) for a port whose listener must be
// root's or owner's (OwnedTransport): one per route and port, kept for the
// route's life (there are two such ports).
func (r *route) ownedTransport(port int, owner string) http.RoundTripper {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.owned {
		if t.port == port && t.owner == owner {
			return t.portTransport
		}
	}
	t := ownedPort{portTransport: portTransport{Transport: r.newTunnelTransport(port, owner), port: port}, owner: owner}
	r.owned = append(r.owned, t)
	return t.portTransport
}

// ownedPort is an ownedTransport: a port's transport whose listener must
// be root's or owner's.
type ownedPort struct {
	portTransport
	owner string
}

// newPortTransport returns a transport that tunnels to port through envd's
// control socket.
func (r *route) newPortTransport(port int) *http.Transport {
	return r.newTunnelTransport(port, "")
}

// newTunnelTransport is newPortTransport with the listener's owner given
// to envd (dialTunnelTo).
func (r *route) newTunnelTransport(port int, owner string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialTunnelTo(ctx, r.control, r.accessToken(), port, owner)
		},
		DisableCompression:     true,
		MaxIdleConns:           maxIdlePerPort,
		MaxIdleConnsPerHost:    maxIdlePerPort,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxAnswerHeader,
	}
}

// maxAnswerHeader bounds the headers of an answer from inside a sandbox
// (net/http's default is 10 MiB).
const maxAnswerHeader = 1 << 20

// portTransport sends every request to one port of a sandbox, whatever
// its URL's host (so its transport keeps state for one address only).
type portTransport struct {
	*http.Transport
	port int
}

// RoundTrip implements http.RoundTripper.
func (t portTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(t.port))
	if req.URL.Host != host {
		r := *req
		u := *req.URL
		u.Host = host
		r.URL = &u
		req = &r
	}
	return t.Transport.RoundTrip(req)
}

// ValidPort reports whether port can be a port inside a sandbox.
func ValidPort(port int) bool { return port >= 1 && port <= 65535 }

// close drops every idle connection; in-flight ones end with the sandbox.
func (r *route) close() {
	r.mu.Lock()
	all := []*http.Transport{r.envd, r.host}
	for e := r.ports.Front(); e != nil; e = e.Next() {
		all = append(all, e.Value.(*portTransport).Transport)
	}
	for _, t := range r.owned {
		all = append(all, t.Transport)
	}
	r.mu.Unlock()
	for _, t := range all {
		t.CloseIdleConnections()
	}
}

// Bounds on envd's answer to a CONNECT. envd runs inside the sandbox, and
// a sandbox's root may have replaced it: its answer is untrusted input,
// which must neither hold a descriptor for long nor grow the server's
// memory (net/http's Transport dials detached from the request, so a
// client that gives up does not end a dial).
const (
	tunnelHandshakeTimeout = 5 * time.Second
	tunnelMaxAnswer        = 16 << 10
)

// dialTunnel opens a connection to a port inside the sandbox: it asks envd,
// through its control socket, to CONNECT to that port on the sandbox's
// loopback, with envd's access token when the sandbox has one.
func dialTunnel(ctx context.Context, sock, token string, port int) (net.Conn, error) {
	return dialTunnelTo(ctx, sock, token, port, "")
}

// dialTunnelTo is dialTunnel with envd told whose listener the port must
// be (envdapi.HeaderPortOwner), "" for anyone's.
func dialTunnelTo(ctx context.Context, sock, token string, port int, owner string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, tunnelHandshakeTimeout)
	defer cancel()
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
	var auth string
	if token != "" {
		auth = envdapi.HeaderAccessToken + ": " + token + "\r\n"
	}
	if owner != "" {
		auth += envdapi.HeaderPortOwner + ": " + owner + "\r\n"
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, auth); err != nil {
		conn.Close()
		return nil, err
	}
	// At most tunnelMaxAnswer bytes are read before the answer is judged.
	br := bufio.NewReader(&io.LimitedReader{R: conn, N: tunnelMaxAnswer})
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("tunnel to port %d: %w", port, err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
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
	// same read: those bytes first, then the connection itself (past the
	// limit the handshake had).
	early, _ := br.Peek(br.Buffered())
	return &bufferedConn{Conn: conn, r: io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn)}, nil
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r io.Reader
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
	if l == nil || !l.routable() {
		return Ingress{}, false
	}
	return Ingress{TrafficToken: l.trafficToken, MaskHost: l.maskHost}, true
}

// Transport returns the round tripper that reaches port inside a running
// sandbox (envdapi.Port for envd's API), and false when the manager runs no
// sandbox with that id or port is not 1-65535. Routing does not check API
// keys: envd checks its own access token, and ports are the sandbox's
// public face. Nothing reached this way can set envd's token or open a
// tunnel of the client's choosing (see route).
func (m *Manager) Transport(id string, port int) (http.RoundTripper, bool) {
	if !ValidPort(port) {
		return nil, false
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil || !l.routable() {
		return nil, false
	}
	return l.route.transport(port), true
}

// OwnedTransport is Transport for a port only the sandbox's root or the
// user named owner ("root": root alone) may serve (the MCP gateway's, the
// code interpreter's): envd tunnels only to a listener one of them owns,
// so a process of another uid that took the port gets none of its clients.
func (m *Manager) OwnedTransport(id string, port int, owner string) (http.RoundTripper, bool) {
	if !ValidPort(port) || port == envdapi.Port {
		return m.Transport(id, port)
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil || !l.routable() {
		return nil, false
	}
	return l.route.ownedTransport(port, owner), true
}

// Legacy reports whether a running sandbox predates envd's control socket:
// its envd serves POST /init and CONNECT on the socket the router uses, so
// the router must refuse them itself.
func (m *Manager) Legacy(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.live[id]
	return l != nil && l.route.legacy()
}
