package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/network/policy"
)

// Every connection in these tests stays on loopback: the proxy is told
// fake public destinations (documentation ranges) and its Dial maps them
// to test servers on 127.0.0.1.
var (
	sandbox = netip.MustParseAddr("127.0.0.1") // the client, as the proxy sees it
	tlsDst  = netip.MustParseAddrPort("203.0.113.10:443")
	httpDst = netip.MustParseAddrPort("203.0.113.10:80")
	echoDst = netip.MustParseAddrPort("203.0.113.20:80")
	echo2   = netip.MustParseAddrPort("198.51.100.20:80")
	eofDst  = netip.MustParseAddrPort("198.51.100.30:80") // answers after the client's EOF
)

// harness is a proxy on loopback with test servers behind fake
// destinations.
type harness struct {
	t     *testing.T
	px    *Proxy
	addr  string // the proxy's listener
	ln    net.Listener
	pool  *x509.CertPool // trusts the TLS server
	pol   atomic.Pointer[policy.Egress]
	alien atomic.Bool // Policy: 127.0.0.1 is not a sandbox

	mu       sync.Mutex
	dsts     map[int]netip.AddrPort    // original destination by client port
	wake     chan struct{}             // closed when dsts grows
	backends map[netip.AddrPort]string // fake destination → loopback server
	dials    map[netip.AddrPort]int
	resolved map[netip.Addr]bool

	served chan error // Serve's result
	cancel context.CancelFunc
}

// newHarness starts test servers and a proxy with an open policy; edit
// adjusts its options.
func newHarness(t *testing.T, edit func(*Options)) *harness {
	t.Helper()
	h := &harness{
		t: t, dsts: map[int]netip.AddrPort{}, wake: make(chan struct{}),
		backends: map[netip.AddrPort]string{}, dials: map[netip.AddrPort]int{}, resolved: map[netip.Addr]bool{},
		served: make(chan error, 1),
	}
	h.setPolicy(true, nil, nil)

	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls %s", r.Host)
	}))
	t.Cleanup(ts.Close)
	h.pool = x509.NewCertPool()
	h.pool.AddCert(ts.Certificate())
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "http %s", r.Host)
	}))
	t.Cleanup(hs.Close)
	h.backends[tlsDst] = ts.Listener.Addr().String()
	h.backends[httpDst] = hs.Listener.Addr().String()
	h.backends[echoDst] = serveTCP(t, func(c net.Conn) { io.Copy(c, c) })
	h.backends[echo2] = h.backends[echoDst]
	h.backends[eofDst] = serveTCP(t, func(c net.Conn) {
		b, _ := io.ReadAll(c)
		fmt.Fprintf(c, "got %q", b)
	})

	opts := Options{
		Policy: func(client netip.Addr) (*policy.Egress, bool) {
			if client != sandbox || h.alien.Load() {
				return nil, false
			}
			return h.pol.Load(), true
		},
		Resolved: func(client, dst netip.Addr) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return client == sandbox && h.resolved[dst]
		},
		OriginalDst: h.originalDst,
		Dial:        h.dial,
	}
	if edit != nil {
		edit(&opts)
	}
	h.px = New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.ln, h.addr = ln, ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.served <- h.px.Serve(ctx, ln) }()
	t.Cleanup(func() { h.stop() })
	return h
}

// stop cancels Serve and returns its result.
func (h *harness) stop() error {
	h.cancel()
	select {
	case err := <-h.served:
		h.served <- err // for a second stop
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Serve did not return")
		return nil
	}
}

// serveTCP runs a TCP server on loopback that hands each connection to
// handle and closes it after.
func serveTCP(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				handle(c)
			})
		}
	}()
	return ln.Addr().String()
}

func (h *harness) setPolicy(internet bool, allow, deny []string) {
	h.t.Helper()
	p, err := policy.Parse(internet, allow, deny)
	if err != nil {
		h.t.Fatal(err)
	}
	h.pol.Store(p)
}

func (h *harness) setResolved(a netip.AddrPort, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resolved[a.Addr()] = ok
}

// originalDst is the proxy's OriginalDst: the destination connect
// registered for the client's port, waited for as the proxy may accept
// before connect registers it.
func (h *harness) originalDst(c net.Conn) (netip.AddrPort, error) {
	port := c.RemoteAddr().(*net.TCPAddr).Port
	timeout := time.After(5 * time.Second)
	for {
		h.mu.Lock()
		dst, ok := h.dsts[port]
		delete(h.dsts, port)
		wake := h.wake
		h.mu.Unlock()
		if ok {
			return dst, nil
		}
		select {
		case <-wake:
		case <-timeout:
			return netip.AddrPort{}, errors.New("no destination registered")
		}
	}
}

// dial is the proxy's Dial: fake destinations to loopback servers. Any
// other address fails the test and is never dialled.
func (h *harness) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dst, err := netip.ParseAddrPort(addr)
	h.mu.Lock()
	backend, ok := h.backends[dst]
	h.dials[dst]++
	h.mu.Unlock()
	if err != nil || !ok {
		h.t.Errorf("proxy dialled %s %s", network, addr)
		return nil, errors.New("unexpected destination")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, backend)
}

func (h *harness) dialCount(dst netip.AddrPort) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dials[dst]
}

// connect opens a connection through the proxy to dst.
func (h *harness) connect(dst netip.AddrPort) net.Conn {
	h.t.Helper()
	c, err := h.dialProxy(dst)
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// dialProxy opens a connection through the proxy to dst; it is closed
// when the test ends.
func (h *harness) dialProxy(dst netip.AddrPort) (net.Conn, error) {
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		return nil, err
	}
	h.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	h.mu.Lock()
	h.dsts[c.LocalAddr().(*net.TCPAddr).Port] = dst
	close(h.wake)
	h.wake = make(chan struct{})
	h.mu.Unlock()
	return c, nil
}

// client returns an HTTP client whose every connection goes through the
// proxy to dst; wrap, when set, wraps each connection.
func (h *harness) client(dst netip.AddrPort, conf *tls.Config, wrap func(net.Conn) net.Conn) *http.Client {
	if conf == nil {
		conf = &tls.Config{RootCAs: h.pool}
	}
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				c, err := h.dialProxy(dst)
				if err == nil && wrap != nil {
					c = wrap(c)
				}
				return c, err
			},
			TLSClientConfig:   conf,
			DisableKeepAlives: true,
		},
		Timeout: 10 * time.Second,
	}
}

// get fetches url through the proxy to dst and returns the status and
// body.
func (h *harness) get(dst netip.AddrPort, conf *tls.Config, url string) (int, string, error) {
	resp, err := h.client(dst, conf, nil).Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitConns waits for the proxy to count n connections of the sandbox.
func (h *harness) waitConns(n int) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.px.Conns(sandbox) != n {
		if time.Now().After(deadline) {
			h.t.Fatalf("Conns = %d, want %d", h.px.Conns(sandbox), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// echoes reports whether c passes msg to the echo server and back.
func echoes(c net.Conn, msg string) bool {
	if _, err := io.WriteString(c, msg); err != nil {
		return false
	}
	b := make([]byte, len(msg))
	_, err := io.ReadFull(c, b)
	return err == nil && string(b) == msg
}

// closedByProxy reports whether the proxy closes c without a word (EOF or
// reset), rather than letting it through or leaving it open.
func closedByProxy(t *testing.T, c net.Conn) bool {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil && !isReset(err) {
		t.Logf("read: %v", err)
		return false
	}
	if len(b) > 0 {
		t.Logf("read %q", b)
		return false
	}
	return true
}

func isReset(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "connection reset") || errors.Is(err, io.EOF))
}

func TestTLSBySNI(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"api.example.com"}, []string{"0.0.0.0/0"})
	// The sandbox resolved the allowed name to the server first.
	h.setResolved(tlsDst, true)
	h.setResolved(httpDst, true)

	status, body, err := h.get(tlsDst, nil, "https://api.example.com/hello")
	if err != nil || status != 200 || body != "tls api.example.com" {
		t.Fatalf("allowed SNI: %d %q %v", status, body, err)
	}
	if n := h.dialCount(tlsDst); n != 1 {
		t.Errorf("dials = %d, want 1", n)
	}

	// Same destination, another name: the proxy answers access_denied and
	// never reaches the server.
	_, _, err = h.get(tlsDst, nil, "https://www.example.com/")
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Errorf("other SNI: err = %v, want a TLS access denied alert", err)
	}
	if n := h.dialCount(tlsDst); n != 1 {
		t.Errorf("dials = %d after a denied SNI, want 1", n)
	}
	h.waitConns(0)
}

func TestHTTPByHost(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"allowed.test"}, []string{"0.0.0.0/0"})
	// The sandbox resolved the allowed name to the server first.
	h.setResolved(tlsDst, true)
	h.setResolved(httpDst, true)

	for url, want := range map[string]string{
		"http://allowed.test/":            "http allowed.test",
		"http://ALLOWED.test.:8080/x?y=z": "http ALLOWED.test.:8080",
	} {
		status, body, err := h.get(httpDst, nil, url)
		if err != nil || status != 200 || body != want {
			t.Errorf("GET %s: %d %q %v, want 200 %q", url, status, body, err, want)
		}
	}
	status, body, err := h.get(httpDst, nil, "http://denied.test/")
	if err != nil || status != http.StatusForbidden ||
		!strings.Contains(body, "denied.test") || !strings.Contains(body, "blocked by the sandbox's network policy") {
		t.Errorf("denied Host: %d %q %v", status, body, err)
	}
	if n := h.dialCount(httpDst); n != 2 {
		t.Errorf("dials = %d, want 2", n)
	}
}

func TestWildcard(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"*.example.com"}, []string{"0.0.0.0/0"})
	// The sandbox resolved the allowed name to the server first.
	h.setResolved(tlsDst, true)
	h.setResolved(httpDst, true)
	insecure := &tls.Config{InsecureSkipVerify: true}
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"api.example.com", true},
		{"a.b.example.com", true},
		{"example.com", false}, // the wildcard covers names below only
		{"badexample.com", false},
	} {
		status, _, err := h.get(httpDst, nil, "http://"+tt.name+"/")
		if got := err == nil && status == 200; got != tt.want {
			t.Errorf("HTTP %s: status %d, err %v; want allowed %v", tt.name, status, err, tt.want)
		}
		status, _, err = h.get(tlsDst, insecure, "https://"+tt.name+"/")
		if got := err == nil && status == 200; got != tt.want {
			t.Errorf("TLS %s: status %d, err %v; want allowed %v", tt.name, status, err, tt.want)
		}
	}
}

// Without a name the destination address decides.
func TestNoName(t *testing.T) {
	h := newHarness(t, nil)
	for _, tt := range []struct {
		name        string
		internet    bool
		allow, deny []string
		resolved    bool
		want        bool
	}{
		{"default allows", true, nil, nil, false, true},
		{"allow list denies", true, []string{"example.com"}, []string{"0.0.0.0/0"}, false, false},
		{"allow list, address of an allowed name", true, []string{"example.com"}, []string{"0.0.0.0/0"}, true, true},
		{"allow list, allowed range", true, []string{"203.0.113.0/24"}, []string{"0.0.0.0/0"}, false, true},
		{"deny list, denied range", true, nil, []string{"203.0.113.0/24"}, false, false},
		{"no internet", false, nil, nil, true, false},
	} {
		h.setPolicy(tt.internet, tt.allow, tt.deny)
		h.setResolved(echoDst, tt.resolved)
		c := h.connect(echoDst)
		if tt.want {
			if !echoes(c, "\x00hello") {
				t.Errorf("%s: not echoed", tt.name)
			}
		} else {
			io.WriteString(c, "\x00hello")
			if !closedByProxy(t, c) {
				t.Errorf("%s: not closed", tt.name)
			}
		}
		c.Close()

		// TLS without SNI is judged the same way.
		h.setResolved(tlsDst, tt.resolved)
		status, _, err := h.get(tlsDst, &tls.Config{InsecureSkipVerify: true}, "https://203.0.113.10/")
		if got := err == nil && status == 200; got != tt.want {
			t.Errorf("%s: TLS without SNI: status %d, err %v; want allowed %v", tt.name, status, err, tt.want)
		}
	}
}

// A name the domain rules do not know is judged by address, without
// credit for DNS answers: they vouched for another name.
func TestOtherNameOnResolvedAddress(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"allowed.test"}, []string{"0.0.0.0/0"})
	h.setResolved(httpDst, true)
	if status, _, err := h.get(httpDst, nil, "http://allowed.test/"); err != nil || status != 200 {
		t.Errorf("allowed name: %d %v", status, err)
	}
	if status, _, err := h.get(httpDst, nil, "http://other.test/"); err != nil || status != 403 {
		t.Errorf("other name: %d %v, want 403", status, err)
	}
}

// A client that speaks TLS or HTTP but whose name cannot be read is
// judged as if it named the worst server: allowed only where every name
// would be.
func TestUnreadableName(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PeekTimeout = 200 * time.Millisecond })
	unreadable := []string{
		"\x16\x03\x01\x00\x05hello", // not a ClientHello
		"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: evil.test\r\n\r\n",
		"GET http://allowed.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GE", // and then nothing until the peek timeout
	}
	for _, tt := range []struct {
		name        string
		allow, deny []string
		want        bool
	}{
		{"allow list, address of an allowed name", []string{"allowed.test"}, []string{"0.0.0.0/0"}, false},
		{"allow list, allowed range", []string{"allowed.test", "203.0.113.0/24"}, []string{"0.0.0.0/0"}, true},
		{"a denied domain", nil, []string{"bad.test"}, false},
		{"a denied domain in an allowed range", []string{"203.0.113.0/24"}, []string{"bad.test"}, false},
		{"no domain denied", []string{"allowed.test"}, nil, true},
	} {
		h.setPolicy(true, tt.allow, tt.deny)
		h.setResolved(echoDst, true)
		for _, in := range unreadable {
			c := h.connect(echoDst)
			io.WriteString(c, in)
			if tt.want {
				b := make([]byte, len(in))
				if _, err := io.ReadFull(c, b); err != nil || string(b) != in {
					t.Errorf("%s: %q not forwarded: read %q, %v", tt.name, in, b, err)
				}
				c.Close()
				continue
			}
			b, _ := io.ReadAll(c)
			if strings.Contains(string(b), in) {
				t.Errorf("%s: %q reached the server", tt.name, in)
			}
			if in[0] != 'G' && in[0] != 'P' {
				continue
			}
			if in != "GE" && !strings.HasPrefix(string(b), "HTTP/1.1 403 Forbidden") {
				t.Errorf("%s: %q answered %q, want a 403", tt.name, in, b)
			}
		}
		// Bytes that name nothing are judged by address, with the credit
		// of DNS answers.
		if c := h.connect(echoDst); !echoes(c, "\x00binary") {
			t.Errorf("%s: unnamed protocol to a resolved address: not echoed", tt.name)
		}
	}
}

func TestClientHelloByteByByte(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"api.example.com"}, []string{"0.0.0.0/0"})
	// The sandbox resolved the allowed name to the server first.
	h.setResolved(tlsDst, true)
	h.setResolved(httpDst, true)
	trickle := func(c net.Conn) net.Conn { return &trickleConn{Conn: c} }
	resp, err := h.client(tlsDst, nil, trickle).Get("https://api.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "tls api.example.com" {
		t.Errorf("body %q", b)
	}
}

// trickleConn writes its first Write one byte at a time, so that the
// ClientHello reaches the proxy in many segments.
type trickleConn struct {
	net.Conn
	done bool
}

func (c *trickleConn) Write(p []byte) (int, error) {
	if c.done {
		return c.Conn.Write(p)
	}
	c.done = true
	for i := range p {
		if _, err := c.Conn.Write(p[i : i+1]); err != nil {
			return i, err
		}
		if i%16 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return len(p), nil
}

func TestGarbage(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PeekTimeout = 500 * time.Millisecond })
	h.setPolicy(true, []string{"allowed.test"}, []string{"0.0.0.0/0"})
	// The sandbox resolved the allowed name to the server first.
	h.setResolved(tlsDst, true)
	h.setResolved(httpDst, true)
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := []string{
		"\x16\x03\x01\xff\xff" + strings.Repeat("\x00", 100),
		"\x16\x03\x03\x00\x10\x01\x00\x00\x0c\x03\x03",
		"GET / HTTP/1.1\r\nHo st: x\r\n\r\n",
		"GET http://[::1/ HTTP/1.1\r\n\r\n",
		"\r\n\r\n\r\n",
		strings.Repeat("A", 5000),
	}
	for range 20 {
		b := make([]byte, 1+rng.IntN(3000))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if rng.IntN(2) == 0 {
			b[0] = 0x16
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		c := h.connect(echoDst)
		c.Write([]byte(in))
		b, _ := io.ReadAll(c)
		if strings.Contains(string(b), in) {
			t.Errorf("%q reached the server", in[:min(len(in), 20)])
		}
		c.Close()
	}
	if n := h.dialCount(echoDst); n != 0 {
		t.Errorf("dials = %d, want 0", n)
	}
	// The proxy still serves.
	if status, _, err := h.get(httpDst, nil, "http://allowed.test/"); err != nil || status != 200 {
		t.Errorf("after garbage: %d %v", status, err)
	}
	h.waitConns(0)
}

func TestSlowClient(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.PeekTimeout = 200 * time.Millisecond })
	h.setPolicy(true, nil, []string{"bad.test"})
	for _, in := range []string{"", "\x16\x03\x01", "GET / HTTP/1.1\r\nHost: bad"} {
		c := h.connect(echoDst)
		io.WriteString(c, in)
		start := time.Now()
		b, err := io.ReadAll(c)
		if err != nil && !isReset(err) {
			t.Errorf("%q: not closed: %v", in, err)
		}
		if strings.Contains(string(b), in) && in != "" {
			t.Errorf("%q: forwarded", in)
		}
		if d := time.Since(start); d < 100*time.Millisecond || d > 3*time.Second {
			t.Errorf("%q: closed after %v, want about 200ms", in, d)
		}
	}
	if n := h.dialCount(echoDst); n != 0 {
		t.Errorf("dials = %d, want 0", n)
	}
	h.waitConns(0)
}

func TestRecheck(t *testing.T) {
	h := newHarness(t, nil)
	cut := h.connect(echoDst)
	kept := h.connect(echo2)
	// An HTTP connection keeps its name: the echo server answers the
	// request with the request.
	named := h.connect(echo2)
	req := "GET / HTTP/1.1\r\nHost: named.test\r\n\r\n"
	for _, c := range []net.Conn{cut, kept, named} {
		msg := "\x00hi"
		if c == named {
			msg = req
		}
		if !echoes(c, msg) {
			t.Fatal("not echoed")
		}
	}
	h.waitConns(3)
	if n := h.px.Recheck(sandbox); n != 0 {
		t.Errorf("Recheck under the same policy cut %d", n)
	}

	h.setPolicy(true, nil, []string{"203.0.113.0/24"})
	if n := h.px.Recheck(sandbox); n != 1 {
		t.Errorf("Recheck cut %d, want 1", n)
	}
	if !closedByProxy(t, cut) {
		t.Error("denied connection still open")
	}
	if !echoes(kept, "\x00still") {
		t.Error("allowed connection cut")
	}
	if h.px.Conns(sandbox) != 2 {
		t.Errorf("Conns = %d, want 2", h.px.Conns(sandbox))
	}

	h.setPolicy(true, nil, []string{"203.0.113.0/24", "named.test"})
	if n := h.px.Recheck(sandbox); n != 1 {
		t.Errorf("Recheck by name cut %d, want 1", n)
	}
	if !closedByProxy(t, named) {
		t.Error("connection to a denied name still open")
	}

	// A client that is no longer a sandbox loses everything.
	h.alien.Store(true)
	if n := h.px.Recheck(sandbox); n != 1 {
		t.Errorf("Recheck of a gone sandbox cut %d, want 1", n)
	}
	h.waitConns(0)
}

func TestHalfClose(t *testing.T) {
	h := newHarness(t, nil)
	c := h.connect(eofDst)
	io.WriteString(c, "ping")
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil || string(b) != `got "ping"` {
		t.Errorf("read %q, %v; want the server's answer after EOF", b, err)
	}
	h.waitConns(0)
}

func TestConns(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxConnsPerClient = 2 })
	a, b := h.connect(echoDst), h.connect(echoDst)
	if !echoes(a, "\x00a") || !echoes(b, "\x00b") {
		t.Fatal("not echoed")
	}
	if n := h.px.Conns(sandbox); n != 2 {
		t.Errorf("Conns = %d, want 2", n)
	}
	if n := h.px.Conns(netip.MustParseAddr("127.0.0.2")); n != 0 {
		t.Errorf("Conns of another client = %d", n)
	}
	// A third is one too many.
	c := h.connect(echoDst)
	io.WriteString(c, "\x00c")
	if !closedByProxy(t, c) {
		t.Error("connection over the limit not closed")
	}
	a.Close()
	h.waitConns(1)
	if c := h.connect(echoDst); !echoes(c, "\x00d") {
		t.Error("no room after a close")
	}
}

func TestNotASandbox(t *testing.T) {
	h := newHarness(t, nil)
	h.alien.Store(true)
	c := h.connect(echoDst)
	io.WriteString(c, "\x00hi")
	if !closedByProxy(t, c) {
		t.Error("not closed")
	}
	if n := h.dialCount(echoDst); n != 0 {
		t.Errorf("dials = %d, want 0", n)
	}
}

func TestConnectionToProxyItself(t *testing.T) {
	h := newHarness(t, nil)
	c := h.connect(netip.MustParseAddrPort(h.addr))
	io.WriteString(c, "\x00hi")
	if !closedByProxy(t, c) {
		t.Error("not closed")
	}
}

func TestServeReturnClosesAll(t *testing.T) {
	h := newHarness(t, nil)
	open := h.connect(echoDst)
	if !echoes(open, "\x00hi") {
		t.Fatal("not echoed")
	}
	idle := h.connect(echoDst) // still being peeked at
	h.waitConns(2)
	if err := h.stop(); err != nil {
		t.Errorf("Serve = %v, want nil after its context ended", err)
	}
	for _, c := range []net.Conn{open, idle} {
		if !closedByProxy(t, c) {
			t.Error("connection open after Serve returned")
		}
	}
	if n := h.px.Conns(sandbox); n != 0 {
		t.Errorf("Conns = %d after Serve returned", n)
	}
	if _, err := net.Dial("tcp", h.addr); err == nil {
		t.Error("listener still open")
	}

	// Closing the listener ends Serve too, with net.ErrClosed.
	px := New(Options{Policy: func(netip.Addr) (*policy.Egress, bool) { return nil, false }})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- px.Serve(context.Background(), ln) }()
	ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Serve = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

// The default OriginalDst asks conntrack, which knows nothing of a plain
// loopback connection unless it tracks loopback too (then it answers the
// destination itself).
func TestDefaultOriginalDst(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dst, err := originalDst(s)
	if err == nil && dst.String() != ln.Addr().String() {
		t.Errorf("originalDst = %v, want an error or %v", dst, ln.Addr())
	}
	t.Logf("originalDst of a loopback connection: %v, %v", dst, err)

	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if _, err := originalDst(p1); err == nil {
		t.Error("originalDst of a pipe: no error")
	}
}

// The default Dial refuses to connect the host to itself: the policy
// cannot tell the host's public addresses from others.
func TestDialOutRefusesThisHost(t *testing.T) {
	addr := serveTCP(t, func(c net.Conn) { io.WriteString(c, "host service") })
	c, err := dialOut(context.Background(), "tcp", addr)
	if !errors.Is(err, errSelf) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dialOut(%s) = %v, want errSelf", addr, err)
	}
}

// The 403 is a well-formed response a client can read whole.
func TestForbiddenResponse(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, nil, []string{"bad.test"})
	c := h.connect(httpDst)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: bad.test\r\nContent-Length: 5\r\n\r\nhello")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 403 || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" ||
		string(b) != "hutch: connection to bad.test blocked by the sandbox's network policy\n" {
		t.Errorf("%d %v %q %v", resp.StatusCode, resp.Header, b, err)
	}
}

// TestAllowedNameToAnotherAddress: a client writes any SNI or Host it
// likes; an allowed name sent to an address no allowed name resolved to
// (an attacker's server) is refused in an allow list.
func TestAllowedNameToAnotherAddress(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"api.example.com", "allowed.test"}, []string{"0.0.0.0/0"})
	h.setResolved(tlsDst, false)
	h.setResolved(httpDst, false)
	if status, _, err := h.get(tlsDst, nil, "https://api.example.com/hello"); err == nil || status == 200 {
		t.Errorf("allowed SNI to an unresolved address: %d %v, want refused", status, err)
	}
	if status, _, _ := h.get(httpDst, nil, "http://allowed.test/"); status != 403 {
		t.Errorf("allowed Host to an unresolved address: %d, want 403", status)
	}
	if n := h.dialCount(tlsDst) + h.dialCount(httpDst); n != 0 {
		t.Errorf("dials = %d, want 0", n)
	}
}

// TestHTTPEveryRequestJudged: on a kept-alive plain-HTTP connection every
// request must name the server the first did (review 2, N1: a second
// request naming another server at the same address was served). Bodies
// pass as they are, whatever they look like; framing the proxy and a
// server could read differently is refused.
func TestHTTPEveryRequestJudged(t *testing.T) {
	const hidden = "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"
	get := func(host string) string { return "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n" }
	for _, tc := range []struct {
		name, send string
		want       []string // status and body of each response, in order
		closedOnly bool     // the connection just ends, after at most the first answer
	}{
		{name: "same server, pipelined", send: get("allowed.test") + get("ALLOWED.test.:80") + "\r\n" + get("allowed.test"),
			want: []string{"200 http allowed.test", "200 http ALLOWED.test.:80", "200 http allowed.test"}},
		{name: "another server kept alive", send: get("allowed.test") + get("other.test") + get("allowed.test"),
			want: []string{"200 http allowed.test", "403 hutch: connection to other.test blocked by the sandbox's network policy\n"}},
		// A request with a body is the connection's last: the server is
		// told so (Connection: close), and nothing after it is sent.
		{name: "nothing after a body", send: "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 5\r\n\r\nhello" + get("other.test"),
			want: []string{"200 http allowed.test"}},
		{name: "a request inside a chunked body is body",
			send: "POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
				fmt.Sprintf("%x;ext=1\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n", len(hidden), hidden) + get("allowed.test"),
			want: []string{"200 http allowed.test"}},
		{name: "nothing after a chunked body",
			send: "POST / HTTP/1.1\r\nHost: allowed.test\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + get("other.test"),
			want: []string{"200 http allowed.test"}},
		{name: "a folded field", send: "GET / HTTP/1.1\r\nHost: allowed.test\r\nX-A: 1\r\n 2\r\n\r\n",
			want: []string{"403 hutch: connection to allowed.test blocked by the sandbox's network policy\n"}},
		{name: "both lengths", send: "POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get("other.test"),
			want: []string{"403 hutch: connection to allowed.test blocked by the sandbox's network policy\n"}},
		{name: "an Upgrade the server ignores", send: "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n" + get("other.test"),
			want: []string{"200 http allowed.test", "403 hutch: connection to other.test blocked by the sandbox's network policy\n"}},
		{name: "Connection: upgrade without Upgrade", send: "GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: keep-alive, Upgrade\r\n\r\n" + get("other.test"),
			want: []string{"200 http allowed.test", "403 hutch: connection to other.test blocked by the sandbox's network policy\n"}},
		{name: "CONNECT is a request like another", send: "CONNECT allowed.test:80 HTTP/1.1\r\nHost: allowed.test:80\r\n\r\n" + get("other.test"),
			want: []string{"200 http allowed.test:80", "403 hutch: connection to other.test blocked by the sandbox's network policy\n"}},
		{name: "a chunk size servers may read differently", send: "POST / HTTP/1.1\r\nHost: allowed.test\r\nTransfer-Encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n" + get("other.test"),
			closedOnly: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.setPolicy(true, []string{"allowed.test"}, []string{"0.0.0.0/0"})
			h.setResolved(httpDst, true)
			c := h.connect(httpDst)
			if _, err := io.WriteString(c, tc.send); err != nil {
				t.Fatal(err)
			}
			c.(*net.TCPConn).CloseWrite()
			br := bufio.NewReader(c)
			var got []string
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				b, _ := io.ReadAll(resp.Body)
				got = append(got, fmt.Sprintf("%d %s", resp.StatusCode, b))
			}
			if tc.closedOnly {
				// The server may answer the request whose body broke off
				// before the proxy closes; nothing after it may pass.
				got = slices.DeleteFunc(got, func(r string) bool { return r == "200 http allowed.test" })
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("responses %q, want %q", got, tc.want)
			}
			h.waitConns(0)
		})
	}
}

// TestHTTPUpgradeAgreed: once the server has answered an Upgrade with 101,
// the connection carries the new protocol's bytes as they are, and the
// proxy no longer reads them as requests; a 101 nobody asked for ends the
// connection; a HEAD's answer has no body, whatever its Content-Length.
func TestHTTPUpgradeAgreed(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"allowed.test"}, []string{"0.0.0.0/0"})
	upDst := netip.MustParseAddrPort("203.0.113.40:80")
	h.setResolved(upDst, true)
	// Answers each request head: HEAD with a length and no body, GET with
	// 101 if it asks to upgrade (then echoes), else with an unasked 101.
	h.backends[upDst] = serveTCP(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			switch {
			case req.Method == http.MethodHead:
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
			case req.Header.Get("Upgrade") != "":
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
				io.Copy(c, br)
				return
			default:
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\n\r\nsurprise")
			}
		}
	})
	t.Run("upgraded", func(t *testing.T) {
		c := h.connect(upDst)
		io.WriteString(c, "HEAD / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		br := bufio.NewReader(c)
		for _, want := range []int{200, 101} {
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
			if err != nil || resp.StatusCode != want {
				t.Fatalf("response: %v, %v; want %d", resp, err, want)
			}
		}
		// Not a request any more: the echo server's bytes.
		const frames = "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"
		io.WriteString(c, frames)
		b := make([]byte, len(frames))
		if _, err := io.ReadFull(br, b); err != nil || string(b) != frames {
			t.Fatalf("after the upgrade read %q, %v", b, err)
		}
		c.Close()
	})
	t.Run("unasked 101", func(t *testing.T) {
		c := h.connect(upDst)
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		got, _ := io.ReadAll(c)
		if strings.Contains(string(got), "surprise") {
			t.Errorf("a 101 nobody asked for passed: %q", got)
		}
	})
	h.waitConns(0)
}

// TestHTTPBodyIgnoringServer: a server that does not read a body it did
// not expect (Python's http.server leaves a GET's unread) would take the
// body for the next request; the proxy tells it the connection ends with
// that request, and sends nothing after it (review 4: a request for
// another server, hidden in an allowed GET's body, was served, and its
// answer came back as the next request's).
func TestHTTPBodyIgnoringServer(t *testing.T) {
	h := newHarness(t, nil)
	h.setPolicy(true, []string{"allowed.test"}, []string{"0.0.0.0/0"})
	dst := netip.MustParseAddrPort("203.0.113.41:80")
	h.setResolved(dst, true)
	served := make(chan string, 16)
	h.backends[dst] = serveTCP(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			served <- req.Host // the body is left unread, as a request
			body := "host=" + req.Host
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			if req.Close {
				return
			}
		}
	})
	const hidden = "GET /secret HTTP/1.1\r\nHost: other.test\r\n\r\n"
	// With and without an Upgrade the server ignores (review 5: a request
	// asking for one skipped the rule).
	for _, conn := range []string{"keep-alive", "keep-alive, Upgrade\r\nUpgrade: x"} {
		c := h.connect(dst)
		fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: allowed.test\r\nConnection: %s\r\nContent-Length: %d\r\n\r\n%sGET /b HTTP/1.1\r\nHost: allowed.test\r\n\r\n", conn, len(hidden), hidden)
		c.(*net.TCPConn).CloseWrite()
		got, _ := io.ReadAll(c)
		if strings.Contains(string(got), "other.test") {
			t.Errorf("Connection: %s: the hidden request was answered: %q", conn, got)
		}
	}
	close(served)
	for host := range served {
		if host != "allowed.test" {
			t.Errorf("the server was asked for %s", host)
		}
	}
	h.waitConns(0)
}
