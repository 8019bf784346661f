package connlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// serve runs an HTTP server on a loopback listener capped by opts, with
// the ConnState hook unless noHook, and returns the listener.
func serve(t *testing.T, opts Options, h http.Handler, noHook bool) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if opts.OverClient == nil {
		opts.OverClient = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 10\r\nConnection: close\r\n\r\nper client")
	}
	if opts.OverTotal == nil {
		opts.OverTotal = []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\nConnection: close\r\n\r\ntotal")
	}
	l := New(ln, opts)
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	}
	srv := &http.Server{Handler: h}
	if !noHook {
		srv.ConnState = l.ConnState
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l
}

// client is one keep-alive connection from a loopback source address.
type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, l *Listener, from string) *client {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial from %s: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{Conn: c, r: bufio.NewReader(c)}
}

// get sends GET / and returns the answer's status and body; status 0 when
// the connection ended instead.
func (c *client) get(t *testing.T) (int, string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err.Error()
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// closedByServer reports whether the server has closed c (waiting up to
// the deadline for it).
func (c *client) closedByServer(wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.r.ReadByte()
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

func waitOpen(t *testing.T, l *Listener, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); l.Open() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Open() = %d, want %d", l.Open(), want)
		}
	}
}

func waitIdle(t *testing.T, l *Listener, want int) {
	t.Helper()
	idle := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.idle.Len()
	}
	for deadline := time.Now().Add(10 * time.Second); idle() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections idle, want %d", idle(), want)
		}
	}
}

func TestPerClientCap(t *testing.T) {
	l := serve(t, Options{PerClient: 3}, nil, false)
	var mine []*client
	for i := range 3 {
		c := dial(t, l, "127.0.0.1")
		if status, body := c.get(t); status != 200 {
			t.Fatalf("connection %d within the cap: %d %q", i, status, body)
		}
		mine = append(mine, c)
	}
	// Over the cap: the refusal, or a reset when it raced the request.
	for range 5 {
		c := dial(t, l, "127.0.0.1")
		if status, body := c.get(t); status == 200 {
			t.Fatalf("a 4th connection of one client was served: %d %q", status, body)
		} else if status != 0 && (status != 503 || body != "per client") {
			t.Fatalf("over the cap: %d %q, want the refusal", status, body)
		}
	}
	// Another client is served, and the first one is again once it closes
	// a connection.
	if status, _ := dial(t, l, "127.0.0.2").get(t); status != 200 {
		t.Errorf("another client: %d, want 200", status)
	}
	mine[0].Close()
	waitOpen(t, l, 3)
	if status, _ := dial(t, l, "127.0.0.1").get(t); status != 200 {
		t.Errorf("after a close: %d, want 200", status)
	}
	for _, c := range mine[1:] {
		if status, _ := c.get(t); status != 200 {
			t.Errorf("a connection within the cap was not served again: %d", status)
		}
	}
}

// TestTotalCapClosesIdle: a new connection past the total replaces the
// one idle longest; connections in a request are never closed for it.
func TestTotalCapClosesIdle(t *testing.T) {
	release, started := make(chan struct{}), make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			started <- true
			<-release
		}
		io.WriteString(w, "ok")
	})
	l := serve(t, Options{Total: 3}, h, false)
	busy := dial(t, l, "127.0.0.1")
	io.WriteString(busy, "GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	var oldest, newer *client
	for i, c := range []**client{&oldest, &newer} {
		*c = dial(t, l, "127.0.0.3")
		if status, _ := (*c).get(t); status != 200 {
			t.Fatalf("within the cap: %d", status)
		}
		// The server marks a connection idle after it has answered.
		waitIdle(t, l, i+1)
	}
	if status, _ := dial(t, l, "127.0.0.2").get(t); status != 200 {
		t.Fatalf("past the total with idle connections: %d, want 200", status)
	}
	if !oldest.closedByServer(5 * time.Second) {
		t.Error("the connection idle longest was kept")
	}
	if newer.closedByServer(100 * time.Millisecond) {
		t.Error("a newer idle connection was closed")
	}
	if got := l.Open(); got > 3 {
		t.Errorf("Open() = %d past a total of 3", got)
	}
	close(release)
	resp, err := http.ReadResponse(busy.r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the busy connection: %v, %v", resp, err)
	}
	resp.Body.Close()
}

// TestTotalCapRefuses: with every connection in a request (or a server
// that reports no idle ones), one past the total is refused.
func TestTotalCapRefuses(t *testing.T) {
	for _, noHook := range []bool{false, true} {
		release, started := make(chan struct{}), make(chan bool)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { started <- true; <-release })
		l := serve(t, Options{Total: 2}, h, noHook)
		for _, from := range []string{"127.0.0.1", "127.0.0.2"} {
			io.WriteString(dial(t, l, from), "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			<-started
		}
		if status, body := dial(t, l, "127.0.0.3").get(t); status != 0 && (status != 503 || body != "total") {
			t.Errorf("noHook %v: past the total: %d %q, want the refusal", noHook, status, body)
		} else if status == 200 {
			t.Errorf("noHook %v: past the total: served", noHook)
		}
		if got := l.Open(); got != 2 {
			t.Errorf("noHook %v: Open() = %d, want 2", noHook, got)
		}
		close(release)
	}
}

// TestHijackedCount: a hijacked connection (a WebSocket through the
// router) holds its slot until whoever hijacked it closes it.
func TestHijackedCount(t *testing.T) {
	hijacked := make(chan net.Conn, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, "ok")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		hijacked <- c
	})
	l := serve(t, Options{PerClient: 1}, h, false)
	c := dial(t, l, "127.0.0.1")
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	tunnel := <-hijacked
	if line, err := c.r.ReadString('\n'); err != nil || !strings.Contains(line, "101") {
		t.Fatalf("upgrade: %q, %v", line, err)
	}
	if got := l.Open(); got != 1 {
		t.Errorf("Open() = %d with a hijacked connection, want 1", got)
	}
	if status, _ := dial(t, l, "127.0.0.1").get(t); status == 200 {
		t.Error("a second connection was served while the hijacked one holds the client's slot")
	}
	// Half-closes pass through the wrapper (ReverseProxy relies on it).
	if err := tunnel.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Errorf("CloseWrite: %v", err)
	}
	tunnel.Close()
	waitOpen(t, l, 0)
	if status, _ := dial(t, l, "127.0.0.1").get(t); status != 200 {
		t.Errorf("after the tunnel ended: %d, want 200", status)
	}
}

func TestClientOf(t *testing.T) {
	tests := []struct{ addr, want string }{
		{"127.0.0.1:80", "127.0.0.1"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1"},
		{"[2001:db8:1:2:aaaa::1]:80", "2001:db8:1:2::"},
		{"[2001:db8:1:2:bbbb::9]:443", "2001:db8:1:2::"},
		{"[fe80::1%eth0]:80", "fe80::"},
	}
	for _, tc := range tests {
		addr, _ := net.ResolveTCPAddr("tcp", tc.addr)
		if got := clientOf(addr); got != netip.MustParseAddr(tc.want) {
			t.Errorf("clientOf(%s) = %v, want %s", tc.addr, got, tc.want)
		}
	}
	if got := clientOf(&net.UnixAddr{Name: "@x", Net: "unix"}); got.IsValid() {
		t.Errorf("clientOf(a unix address) = %v, want the zero Addr", got)
	}
}

func TestClient(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.0.0.1:443", "10.0.0.1"},
		{"[::ffff:10.0.0.1]:443", "10.0.0.1"},
		{"[2001:db8::1]:443", "2001:db8::"},
		{"[2001:db8::2]:80", "2001:db8::"},
		{"[2001:db8:0:1::1]:80", "2001:db8:0:1::"},
		{"@", ""},
	} {
		if got := Client(tc.addr); got != tc.want {
			t.Errorf("Client(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
