package sdk_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// TestServeConnectionCaps: a client holding idle connections cannot take
// `hutch serve` down (review R5). One address gets --max-conns-per-client
// connections and no more while others are served, sandboxes included;
// keep-alive connections idle past --idle-timeout are closed; all clients
// together hold at most --max-conns-total, connections waiting for a
// request making room for new ones; an Upgrade tunnel through the router
// holds its slot until it ends. Each address is one of the loopback's
// 127.0.0.0/8, bound by the dialer.
func TestServeConnectionCaps(t *testing.T) {
	t.Run("per client", func(t *testing.T) {
		e := startServer(t, "--max-conns-per-client", "50")
		flood := holdIdle(t, e.srv.Addr, "127.0.0.3", 80)
		if len(flood) != 50 {
			t.Fatalf("one address was served on %d connections at once, want --max-conns-per-client 50", len(flood))
		}
		// Everyone else is served: the API, a new sandbox and its envd.
		other := fromAddr("127.0.0.2")
		if status := get(t, other, "http://"+e.srv.Addr+"/health"); status != 200 {
			t.Fatalf("/health from another address: %d", status)
		}
		cfg := e.cfg
		cfg.HTTPClient = other
		sbx, err := sdk.Create(t.Context(), sdk.CreateOptions{Config: cfg})
		must(t, err, "Create from another address")
		killAtEnd(t, sbx)
		if out := run(t, sbx, "echo hello", nil).Stdout; out != "hello\n" {
			t.Errorf("a command from another address: %q", out)
		}
		for i, c := range flood {
			if c.closed(50 * time.Millisecond) {
				t.Fatalf("held connection %d was closed", i)
			}
		}

		// An Upgrade tunnel to a port of the sandbox counts as one of its
		// client's connections until it ends.
		_, err = sbx.Commands.Start(t.Context(), `python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8000)); s.listen()
while True:
    c, _ = s.accept(); f = c.makefile("rb")
    while f.readline() not in (b"\r\n", b""): pass
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
    while (d := f.read1(4096)): c.sendall(d.upper())
    f.close(); c.close()
'`, &sdk.RunOptions{Timeout: sdk.NoTimeout})
		must(t, err, "start the echo service")
		var tunnel *heldConn
		waitFor(t, 20*time.Second, func() string { return "an Upgrade tunnel to port 8000" }, func() bool {
			tunnel = dialFrom(t, "127.0.0.4", e.srv.Addr)
			status := tunnel.request(t, "GET / HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: "+sbx.ID+"\r\nE2b-Sandbox-Port: 8000\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
			if status != http.StatusSwitchingProtocols {
				tunnel.Close()
				return false
			}
			return true
		})
		io.WriteString(tunnel, "ping")
		buf := make([]byte, 4)
		tunnel.SetReadDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.ReadFull(tunnel.r, buf); err != nil || string(buf) != "PING" {
			t.Fatalf("through the tunnel: %q, %v", buf, err)
		}
		rest := holdIdle(t, e.srv.Addr, "127.0.0.4", 60)
		if len(rest) != 49 {
			t.Errorf("with a tunnel open, its address was served on %d more connections, want 49", len(rest))
		}
		// The client ends the tunnel (a half-close, passed through to the
		// service, which closes); its slot is free again.
		tunnel.Conn.(*net.TCPConn).CloseWrite()
		tunnel.SetReadDeadline(time.Now().Add(20 * time.Second))
		if b, err := io.ReadAll(tunnel.r); err != nil || len(b) != 0 {
			t.Errorf("the end of the tunnel: %q, %v", b, err)
		}
		tunnel.Close()
		waitFor(t, 20*time.Second, func() string { return "the tunnel's slot to be free" }, func() bool {
			return len(holdIdle(t, e.srv.Addr, "127.0.0.4", 1)) == 1
		})
	})

	t.Run("idle timeout", func(t *testing.T) {
		e := startServer(t, "--idle-timeout", "2s")
		idle := holdIdle(t, e.srv.Addr, "127.0.0.3", 20)
		if len(idle) != 20 {
			t.Fatalf("served on %d connections, want 20", len(idle))
		}
		deadline := time.Now().Add(60 * time.Second)
		for i, c := range idle {
			if !c.closed(time.Until(deadline)) {
				t.Fatalf("idle connection %d still open after 60 s (--idle-timeout 2s)", i)
			}
		}
	})

	t.Run("total", func(t *testing.T) {
		e := startServer(t, "--max-conns-total", "100", "--max-conns-per-client", "1000")
		var all []*heldConn
		for i := 4; i < 9; i++ {
			all = append(all, holdIdle(t, e.srv.Addr, fmt.Sprintf("127.0.0.%d", i), 40)...)
		}
		// Idle connections make room for new ones: every one was served
		// once, and at most 100 are left open.
		if status := get(t, fromAddr("127.0.0.2"), "http://"+e.srv.Addr+"/health"); status != 200 {
			t.Fatalf("/health with the total reached: %d", status)
		}
		open := 0
		for _, c := range all {
			if !c.closed(10 * time.Millisecond) {
				open++
			}
		}
		if len(all) != 200 || open > 100 {
			t.Errorf("%d of 200 connections served, %d still open; want 200 served and at most --max-conns-total 100 open", len(all), open)
		}
	})
}

// heldConn is a client connection kept open by the test.
type heldConn struct {
	net.Conn
	r *bufio.Reader
}

// dialFrom connects to addr from the loopback address src; the connection
// is closed when the test ends.
func dialFrom(t *testing.T, src, addr string) *heldConn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	must(t, err, "dial from "+src)
	t.Cleanup(func() { c.Close() })
	return &heldConn{Conn: c, r: bufio.NewReader(c)}
}

// request sends a raw request and returns the answer's status, 0 when the
// connection ended instead. The body of an answer other than 101 is read.
func (c *heldConn) request(t *testing.T, req string) int {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, req); err != nil {
		return 0
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return 0
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp.StatusCode
}

// closed reports whether the server has closed c, waiting up to wait.
func (c *heldConn) closed(wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.r.Peek(1)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// holdIdle opens n connections from src, sends GET /health on each and
// returns those answered 200 (the others are closed): each is then an idle
// keep-alive connection. Refused ones must be answered 503 or reset.
func holdIdle(t *testing.T, addr, src string, n int) []*heldConn {
	t.Helper()
	var held []*heldConn
	for range n {
		c := dialFrom(t, src, addr)
		switch status := c.request(t, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"); status {
		case 200:
			held = append(held, c)
		case 0, 503:
			c.Close()
		default:
			t.Fatalf("connection from %s answered %d, want 200, 503 or a reset", src, status)
		}
	}
	return held
}

// fromAddr returns an HTTP client whose connections come from the loopback
// address src.
func fromAddr(src string) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// get returns the status of GET url, 0 when it failed.
func get(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Logf("GET %s: %v", url, err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeHeaderBound: a request's line and headers are bounded well
// below Go's 1 MiB default, which let a client hold ~2.5 MB of the
// server's memory per unfinished request, 1.8 GB with a thousand
// connections (review 8); what SDKs send passes.
func TestServeHeaderBound(t *testing.T) {
	e := startServer(t)
	c := dialFrom(t, "127.0.0.5", e.srv.Addr)
	if status := c.request(t, "GET /health?pad="+strings.Repeat("a", 32<<10)+" HTTP/1.1\r\nHost: x\r\n\r\n"); status != http.StatusOK {
		t.Errorf("a request with a 32 KiB query: %d, want 200", status)
	}
	c = dialFrom(t, "127.0.0.5", e.srv.Addr)
	if status := c.request(t, "GET /files?signature=v1_x&path=/"+strings.Repeat("a", 100<<10)+" HTTP/1.1\r\nHost: x\r\n\r\n"); status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a request with a 100 KiB query: %d, want 431", status)
	}
}
