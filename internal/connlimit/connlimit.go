// Package connlimit caps the connections a listener hands out at once: in
// all, and per client address. A connection over a cap is accepted and
// closed at once (after one non-blocking write of a refusal, when one is
// set), so the accept loop never waits and one client cannot hold every
// slot. When the total is reached and an HTTP server has reported some
// connections idle, the one idle longest is closed to make room instead.
//
// It is written here rather than taken from a library because none that is
// kept up does both caps without blocking: golang.org/x/net/netutil's
// LimitListener caps only the total, and does it by not accepting, so one
// client holding every slot leaves everyone else's connections waiting in
// the kernel's backlog.
package connlimit

import (
	"container/list"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Options configure a Listener. The zero value caps nothing.
type Options struct {
	// PerClient is the number of connections one client may hold at once;
	// 0: no cap. A client is an IPv4 address, or an IPv6 /64 (one host
	// may have a whole /64 to itself).
	PerClient int
	// Total is the number of connections all clients together may hold at
	// once; 0: no cap.
	Total int
	// OverClient and OverTotal, when set, are written to a connection
	// refused because of PerClient or Total, in one non-blocking write
	// (what does not fit in the socket's buffer is dropped), before it is
	// closed. A client that sent its request already may see a reset
	// instead.
	OverClient, OverTotal []byte
	// Logger, when set, is told of refusals: the first one, then at most
	// one line a minute with the count since.
	Logger *slog.Logger
}

// Listener is a net.Listener whose Accept returns only connections within
// its caps. A connection counts from Accept until its first Close, also
// while hijacked from an HTTP server (whoever holds it closes it then).
// Safe for concurrent use.
type Listener struct {
	net.Listener
	opts Options

	mu       sync.Mutex
	open     int
	byClient map[netip.Addr]int
	idle     list.List // of *conn, the one idle longest first
	refused  int64     // refusals not logged yet
	evicted  int64     // idle connections closed to make room, not logged yet
	logged   time.Time // when refusals were last logged
}

// New returns l capped as opts says.
func New(l net.Listener, opts Options) *Listener {
	return &Listener{Listener: l, opts: opts, byClient: make(map[netip.Addr]int)}
}

// Accept returns the next connection within the caps; connections over a
// cap are closed on the way, without waiting for anything.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientOf(c.RemoteAddr())
		ok, over := l.admit(client)
		if ok {
			return &conn{Conn: c, l: l, client: client}, nil
		}
		if len(over) > 0 {
			writeNow(c, over)
		}
		c.Close()
	}
}

// ConnState is an http.Server's ConnState hook that tells the listener
// which of its connections wait for a request (new or idle, and so may be
// closed to make room under the total cap, as an HTTP server may close an
// idle connection at any time) and which are serving one. Connections of
// a server without it are never closed to make room.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	if tc, ok := nc.(*tls.Conn); ok {
		// Served over TLS: the listener's connection is beneath.
		nc = tc.NetConn()
	}
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
	if (state == http.StateNew || state == http.StateIdle) && !c.closed {
		c.idle = l.idle.PushBack(c)
	}
}

// Open returns the number of connections open now (accepted, not closed).
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// admit counts a new connection of client and returns true or, when a cap
// is reached and no idle connection can make room, counts nothing and
// returns the refusal to write.
func (l *Listener) admit(client netip.Addr) (ok bool, over []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.opts.PerClient > 0 && l.byClient[client] >= l.opts.PerClient:
		over = l.opts.OverClient
	case l.opts.Total > 0 && l.open >= l.opts.Total && l.idle.Len() == 0:
		over = l.opts.OverTotal
	default:
		if l.opts.Total > 0 && l.open >= l.opts.Total {
			// The connection idle longest goes; its server sees a read
			// error and ends it, as at its idle timeout.
			old := l.idle.Front().Value.(*conn)
			old.Conn.Close()
			l.releaseLocked(old)
			l.evicted++
			l.logLocked(client)
		}
		l.open++
		l.byClient[client]++
		return true, nil
	}
	l.refused++
	l.logLocked(client)
	return false, over
}

// logLocked tells the logger of refusals and evictions, at most once a
// minute.
func (l *Listener) logLocked(client netip.Addr) {
	if l.opts.Logger == nil || time.Since(l.logged) < time.Minute {
		return
	}
	l.opts.Logger.Warn("client connections over the cap", "refused", l.refused, "idle closed to make room", l.evicted,
		"last client", client, "open", l.open, "client's", l.byClient[client], "per client cap", l.opts.PerClient, "total cap", l.opts.Total)
	l.refused, l.evicted = 0, 0
	l.logged = time.Now()
}

// releaseLocked uncounts c, once.
func (l *Listener) releaseLocked(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	if c.idle != nil {
		l.idle.Remove(c.idle)
		c.idle = nil
	}
	l.open--
	if n := l.byClient[c.client] - 1; n > 0 {
		l.byClient[c.client] = n
	} else {
		delete(l.byClient, c.client)
	}
}

// clientOf returns the key a remote address is counted under: its IPv4
// address, or its IPv6 /64. Addresses that are not IP (a unix socket's)
// all count as one client.
func clientOf(a net.Addr) netip.Addr { return clientOfAddr(a.String()) }

// Client is the client a remote address (host:port, as
// http.Request.RemoteAddr) is counted as, written out: its IPv4 address,
// or its IPv6 /64; "" for one that is not IP.
func Client(remoteAddr string) string {
	if a := clientOfAddr(remoteAddr); a.IsValid() {
		return a.String()
	}
	return ""
}

// clientOfAddr is clientOf for an address written host:port.
func clientOfAddr(a string) netip.Addr {
	ap, err := netip.ParseAddrPort(a)
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// writeNow writes b to c if the socket takes it at once; it never waits.
func writeNow(c net.Conn, b []byte) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	rc.Write(func(fd uintptr) bool {
		syscall.Write(int(fd), b)
		return true // done, whatever happened: never wait for the socket
	})
}

// conn is a counted connection: its first Close releases its slot.
type conn struct {
	net.Conn
	l      *Listener
	client netip.Addr
	// Guarded by l.mu.
	closed bool
	idle   *list.Element // in l.idle while waiting for a request
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.l.mu.Lock()
	c.l.releaseLocked(c)
	c.l.mu.Unlock()
	return err
}

// CloseWrite half-closes the connection (net/http and httputil's
// ReverseProxy pass an end of stream on with it, e.g. through a WebSocket
// tunnel).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// ReadFrom lets net/http use the socket's own ReadFrom (sendfile, splice).
func (c *conn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
