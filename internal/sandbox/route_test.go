package sandbox

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// closedPortsEnvd serves a control socket that answers every CONNECT as
// envd does for a port nobody listens on (502); it returns the socket.
func closedPortsEnvd(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "port is not open", http.StatusBadGateway)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// liveHeap returns the bytes of live heap after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestPortTransportsBounded: a route's memory does not grow with the
// number of distinct ports asked for (review R9: one transport for every
// port kept about 0.55 KB per closed port, 11 MB after 20 000).
func TestPortTransportsBounded(t *testing.T) {
	sock := closedPortsEnvd(t)
	r := newRoute(sock, sock)
	defer r.close()
	ask := func(from, to int) {
		for port := from; port <= to; port++ {
			req, _ := http.NewRequest(http.MethodGet, "http://whatever/", nil)
			resp, err := r.transport(port).RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("port %d answered %s; want the tunnel refused", port, resp.Status)
			}
		}
	}
	ask(1, 1000) // warm up: the transports' own first allocations
	before := liveHeap()
	ask(1001, 41000)
	after := liveHeap()
	if n := r.ports.Len(); n > maxPortTransports || len(r.byPort) != n {
		t.Errorf("the route keeps %d port transports (%d in its index), want at most %d", n, len(r.byPort), maxPortTransports)
	}
	grew := int64(after) - int64(before)
	t.Logf("live heap %d KB before 40 000 closed ports, %d KB after", before>>10, after>>10)
	if grew > 8<<20 {
		t.Errorf("live heap grew by %d KB for 40 000 closed ports; want it bounded (under 8 MB)", grew>>10)
	}
}

// portTransports returns the number of port transports the route of a
// running sandbox keeps.
func portTransports(m *Manager, id string) int {
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	l.route.mu.Lock()
	defer l.route.mu.Unlock()
	return l.route.ports.Len()
}

// TestPortTransportReuse: the ports used most recently keep their
// transports; the one used longest ago is dropped first.
func TestPortTransportReuse(t *testing.T) {
	sock := closedPortsEnvd(t)
	r := newRoute(sock, sock)
	defer r.close()
	of := func(port int) *http.Transport { return r.transport(port).(portTransport).Transport }
	first := make(map[int]*http.Transport)
	for port := 1; port <= maxPortTransports; port++ {
		first[port] = of(port)
	}
	of(1)                     // used again: now the most recent
	of(maxPortTransports + 1) // one too many: port 2, used longest ago, goes
	if of(1) != first[1] {
		t.Error("port 1, used recently, lost its transport")
	}
	if of(2) == first[2] {
		t.Error("port 2, used longest ago, kept its transport past the cap")
	}
	if n := r.ports.Len(); n != maxPortTransports {
		t.Errorf("%d port transports, want %d", n, maxPortTransports)
	}
}

// TestDialTunnelDistrustsEnvd: envd answers the host's CONNECT from inside
// the sandbox, where a root may have replaced it. An endless answer or
// none at all ends the dial within its bounds — without the request's
// context, which net/http does not pass to a dial it may reuse — and holds
// no memory or descriptor past them.
func TestDialTunnelDistrustsEnvd(t *testing.T) {
	tests := []struct {
		name   string
		answer func(c net.Conn)
	}{
		{"endless header", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX-A: ")
			chunk := bytes.Repeat([]byte("a"), 64<<10)
			for {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}},
		{"endless error body", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 403 Forbidden\r\n\r\n")
			chunk := bytes.Repeat([]byte("a"), 64<<10)
			for {
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		}},
		{"no answer", func(c net.Conn) { io.Copy(io.Discard, c) }},
		{"half an answer", func(c net.Conn) { io.WriteString(c, "HTTP/1.1 200"); io.Copy(io.Discard, c) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "control.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { defer c.Close(); tt.answer(c) }()
				}
			}()
			start := time.Now()
			conn, err := dialTunnel(context.Background(), sock, "token", 8000)
			if err == nil {
				conn.Close()
				t.Fatal("a tunnel was opened on a hostile answer")
			}
			if d := time.Since(start); d > tunnelHandshakeTimeout+5*time.Second {
				t.Errorf("the dial took %v, past its %v bound", d, tunnelHandshakeTimeout)
			}
			t.Logf("%v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
}
