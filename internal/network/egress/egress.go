// Package egress is the transparent proxy that holds a sandbox's HTTP and
// HTTPS connections to its domain rules. The host's firewall redirects a
// sandbox's outgoing TCP connections to ports 80 and 443 to the proxy's
// listener; for each one the proxy learns where it was going
// (SO_ORIGINAL_DST) and which name the client asks for (the TLS
// ClientHello's SNI, or the HTTP/1 Host header), without terminating TLS,
// and judges the pair with the sandbox's policy.Egress. An allowed
// connection is dialled to its original destination and spliced; a denied
// one is answered with a TLS alert or an HTTP 403 and closed.
//
// A connection that names no server (no SNI, no Host, neither TLS nor
// HTTP) is judged by its address, as the firewall would. One that speaks
// TLS or HTTP but whose name cannot be read (malformed, oversized, too
// slow, ambiguous) could be for any name, and is allowed only where every
// name would be.
//
// Plain HTTP is read request by request (relay.go): every request on a
// kept-alive connection must name the server its first did. Of everything
// else only the first bytes are read; what follows is not seen: the Host
// inside TLS (the server's certificate binds it to the SNI), the inner
// ClientHello of Encrypted Client Hello, HTTP/2 frames.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/network/policy"
	"github.com/hutch-sandbox/hutch/internal/splice"
)

// Defaults of the Options left zero.
const (
	// DefaultPeekTimeout is ample for a ClientHello or request headers,
	// which clients send at once, and short for a client that stalls.
	DefaultPeekTimeout = 10 * time.Second
	// DefaultDialTimeout bounds every dial of an original destination.
	DefaultDialTimeout = 10 * time.Second
	// DefaultMaxConnsPerClient matches the firewall's default cap on a
	// sandbox's connections.
	DefaultMaxConnsPerClient = 1024
	// DefaultMaxConns keeps two descriptors per connection well within a
	// raised open-files limit.
	DefaultMaxConns = 16384
)

// lingerTimeout bounds how long a refused HTTP client is read from after
// its 403, so that closing with unread data (a request body) does not
// reset the connection before the client reads the answer.
const lingerTimeout = time.Second

// Options configure a Proxy.
type Options struct {
	// Policy returns the egress policy of the sandbox at a source address;
	// ok false: not a sandbox, close. Nil: no client is a sandbox.
	Policy func(client netip.Addr) (p *policy.Egress, ok bool)
	// Resolved reports whether dst was an answer to an allowed DNS lookup
	// of that client (see policy.Egress.AllowsConn's resolvedAllowed).
	// Nil: never.
	Resolved func(client, dst netip.Addr) bool
	// OriginalDst returns where the client meant to connect; nil uses
	// SO_ORIGINAL_DST (IPv4, getsockopt SOL_IP/SO_ORIGINAL_DST on the
	// accepted TCP conn). Tests override it.
	OriginalDst func(c net.Conn) (netip.AddrPort, error)
	// Dial connects to the original destination; nil uses a net.Dialer
	// and refuses connections to this host itself (see dialOut). Either
	// way a dial is given DefaultDialTimeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// PeekTimeout bounds how long a client may take to send its
	// ClientHello or request headers; zero means DefaultPeekTimeout.
	PeekTimeout time.Duration
	// MaxConnsPerClient and MaxConns bound the connections open at once
	// per sandbox and in all; connections beyond them are closed at once.
	// Zero means DefaultMaxConnsPerClient and DefaultMaxConns.
	MaxConnsPerClient int
	MaxConns          int
	// Logger gets a Debug line for every connection allowed, refused or
	// failed, and a Warn for Accept errors; nil discards them.
	Logger *slog.Logger
}

// Proxy is the egress proxy of the sandboxes of one host. It is safe for
// concurrent use; one Proxy may Serve several listeners.
type Proxy struct {
	opts   Options
	logger *slog.Logger

	mu    sync.Mutex
	conns map[netip.Addr]map[*conn]struct{} // the open connections, by client
	total int                               // of all clients
}

// conn is one client connection, from accept to close.
type conn struct {
	c      net.Conn
	client netip.Addr
	srv    *server // the Serve call that accepted it

	// Guarded by Proxy.mu.
	judged bool           // dst and hello are set, and c is not refused
	dst    netip.AddrPort // the original destination
	hello  hello          // what the client asked for (data not kept)
	up     net.Conn       // the server side, once dialled
	closed bool
}

// server is one Serve call.
type server struct {
	wg sync.WaitGroup // its connection handlers
}

// New returns a proxy.
func New(opts Options) *Proxy {
	if opts.Policy == nil {
		opts.Policy = func(netip.Addr) (*policy.Egress, bool) { return nil, false }
	}
	if opts.OriginalDst == nil {
		opts.OriginalDst = originalDst
	}
	if opts.Dial == nil {
		opts.Dial = dialOut
	}
	if opts.PeekTimeout <= 0 {
		opts.PeekTimeout = DefaultPeekTimeout
	}
	if opts.MaxConnsPerClient <= 0 {
		opts.MaxConnsPerClient = DefaultMaxConnsPerClient
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Proxy{opts: opts, logger: logger, conns: map[netip.Addr]map[*conn]struct{}{}}
}

// Serve accepts on ln until ctx ends or ln is closed; it closes every
// proxied connection when it returns. When ctx ends it closes ln and
// returns nil; otherwise it returns the error that stopped Accept
// (net.ErrClosed when ln was closed).
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	s := &server{}
	defer func() {
		cancel() // abandons the dials under way
		p.closeAll(s)
		s.wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !retryAccept(err) {
				return err
			}
			// Out of descriptors or memory: wait for connections to
			// close rather than spin, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.logger.Warn("egress proxy: accept", "err", err, "retry", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = 0
		c := &conn{c: nc, client: clientAddr(nc), srv: s}
		if !p.admit(c) {
			p.logger.Debug("egress proxy: too many connections", "client", c.client)
			nc.Close()
			continue
		}
		s.wg.Go(func() { p.handle(ctx, c) })
	}
}

// retryAccept reports whether an Accept error passes once connections
// close or memory frees.
func retryAccept(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// clientAddr returns the source address of an accepted connection,
// unmapped so that a dual-stack listener keys clients as IPv4.
func clientAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap.Addr().Unmap()
}

// admit counts c as open unless its client or the proxy has no room.
func (p *Proxy) admit(c *conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	set := p.conns[c.client]
	if p.total >= p.opts.MaxConns || len(set) >= p.opts.MaxConnsPerClient {
		return false
	}
	if set == nil {
		set = map[*conn]struct{}{}
		p.conns[c.client] = set
	}
	set[c] = struct{}{}
	p.total++
	return true
}

// close closes both sides of c and stops counting it; it reports whether
// c was still open.
func (p *Proxy) close(c *conn) bool {
	p.mu.Lock()
	if c.closed {
		p.mu.Unlock()
		return false
	}
	c.closed = true
	if set := p.conns[c.client]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(p.conns, c.client)
		}
		p.total--
	}
	up := c.up
	p.mu.Unlock()
	c.c.Close()
	if up != nil {
		up.Close()
	}
	return true
}

// closeAll closes the connections s accepted.
func (p *Proxy) closeAll(s *server) {
	var mine []*conn
	p.mu.Lock()
	for _, set := range p.conns {
		for c := range set {
			if c.srv == s {
				mine = append(mine, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range mine {
		p.close(c)
	}
}

// Recheck judges the open connections of one client again under its
// current policy (after a policy update) and cuts those no longer allowed.
// Returns how many it cut. Connections not judged yet need no recheck:
// they read the policy after Recheck began, so they see the update.
//
// A client with no policy at all is a sandbox that is gone: all its
// connections are cut, judged or not, and reset rather than closed, since
// nothing will ever acknowledge a FIN (the socket would wait in FIN_WAIT1
// for minutes).
func (p *Proxy) Recheck(client netip.Addr) int {
	client = client.Unmap()
	pol, ok := p.opts.Policy(client)
	var judged []*conn
	p.mu.Lock()
	for c := range p.conns[client] {
		if c.judged || !ok {
			judged = append(judged, c)
		}
	}
	p.mu.Unlock()
	if len(judged) == 0 {
		return 0
	}
	if ok {
		// Read again: the list above may hold connections judged under a
		// policy older than the one read first.
		pol, ok = p.opts.Policy(client)
	}
	cut := 0
	for _, c := range judged {
		if ok && p.allows(pol, client, c.dst.Addr(), c.hello) {
			continue
		}
		if !ok {
			if l, canLinger := c.c.(interface{ SetLinger(int) error }); canLinger {
				l.SetLinger(0)
			}
		}
		if p.close(c) {
			cut++
			p.logger.Debug("egress proxy: cut after policy update", "client", client, "dst", c.dst, "name", c.hello.name)
		}
	}
	return cut
}

// Conns returns how many connections of a client are open (for tests and
// metrics).
func (p *Proxy) Conns(client netip.Addr) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns[client.Unmap()])
}

// allows judges a connection of client to dst for what its first bytes
// said.
func (p *Proxy) allows(pol *policy.Egress, client, dst netip.Addr, h hello) bool {
	if pol == nil {
		return false
	}
	if h.unreadable {
		return allowsAnyName(pol, dst)
	}
	resolved := p.opts.Resolved != nil && p.opts.Resolved(client, dst)
	return pol.AllowsConn(dst, h.name, resolved)
}

// allowsAnyName reports whether pol allows a connection to dst whatever
// name it is for: the verdict for a client that names its server in a way
// the proxy could not read (malformed, oversized, too slow, ambiguous).
// Judging it as the worst name it could carry keeps a deny rule for a
// domain, or an allow list, from being passed by hiding the name. The
// address must be allowed on its own (DNS answers vouch for names, not for
// this one), and no domain may be denied.
func allowsAnyName(pol *policy.Egress, dst netip.Addr) bool {
	if !pol.AllowsConn(dst, "", false) {
		return false
	}
	for _, r := range pol.Deny {
		if r.IsDomain() {
			return false
		}
	}
	return true
}

// handle proxies one accepted connection and closes it.
func (p *Proxy) handle(ctx context.Context, c *conn) {
	defer p.close(c)
	log := p.logger.With("client", c.client)
	if _, ok := p.opts.Policy(c.client); !ok {
		log.Debug("egress proxy: not a sandbox")
		return
	}
	dst, err := p.opts.OriginalDst(c.c)
	if err != nil {
		log.Debug("egress proxy: no original destination", "err", err)
		return
	}
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	log = log.With("dst", dst)
	if local, ok := c.c.LocalAddr().(*net.TCPAddr); ok &&
		netip.AddrPortFrom(local.AddrPort().Addr().Unmap(), local.AddrPort().Port()) == dst {
		// Connected to the proxy itself, not redirected to it: dialling
		// the destination would loop.
		log.Debug("egress proxy: connection to the proxy itself")
		return
	}

	c.c.SetReadDeadline(time.Now().Add(p.opts.PeekTimeout))
	h := sniff(c.c, maxPeek)
	if len(h.data) == 0 {
		log.Debug("egress proxy: closed before sending", "err", h.err)
		return
	}
	c.c.SetReadDeadline(time.Time{})
	log = log.With("proto", h.proto, "name", h.name)
	if h.unreadable {
		log = log.With("unreadable", h.err)
	}

	// Mark c judged before reading the policy, so that a Recheck racing
	// with a policy update either sees c or finishes before we read.
	data := h.data
	h.data = nil
	p.mu.Lock()
	c.judged, c.dst, c.hello = true, dst, h
	p.mu.Unlock()
	pol, ok := p.opts.Policy(c.client)
	if !ok || !p.allows(pol, c.client, dst.Addr(), h) {
		log.Debug("egress proxy: denied")
		p.mu.Lock()
		c.judged = false // closing anyway: nothing for Recheck to cut
		p.mu.Unlock()
		refuse(c.c, h, dst)
		return
	}

	dctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	up, err := p.opts.Dial(dctx, "tcp", dst.String())
	cancel()
	if err != nil {
		log.Debug("egress proxy: dial", "err", err)
		return
	}
	p.mu.Lock()
	closed := c.closed
	if !closed {
		c.up = up
	}
	p.mu.Unlock()
	if closed { // cut by Recheck or Serve while dialling
		up.Close()
		return
	}
	log.Debug("egress proxy: allowed")
	if h.proto == protoHTTP && !h.unreadable && !allowsAnyName(pol, dst.Addr()) {
		relayHTTP(c.c, up, data, h, dst)
		return
	}
	if _, err := up.Write(data); err != nil {
		log.Debug("egress proxy: write", "err", err)
		return
	}
	splice.Join(c.c, nil, up, nil, 0)
}

// errSelf reports a destination that is this host.
var errSelf = errors.New("destination is this host")

// dialOut is the default Dial. The proxy dials from the host, not from the
// sandbox, so the firewall that keeps sandboxes off the host does not see
// these connections, and the policy cannot know the host's public
// addresses. Linux sends a connection to one of its own addresses from
// that same address: such a connection is closed before anything is sent.
func dialOut(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: DefaultDialTimeout}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if lok && rok && local.AddrPort().Addr().Unmap() == remote.AddrPort().Addr().Unmap() {
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, errSelf)
	}
	return c, nil
}

// refuse answers a denied client in its own protocol, so that it reports
// a policy refusal rather than a network fault, and closes for writing.
func refuse(c net.Conn, h hello, dst netip.AddrPort) {
	c.SetWriteDeadline(time.Now().Add(lingerTimeout))
	switch h.proto {
	case protoTLS:
		// A fatal access_denied alert in a TLS 1.2 record: before the
		// version is negotiated any 3.x record version is accepted.
		c.Write([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 2, 49})
	case protoHTTP:
		target := h.name
		if target == "" {
			target = dst.Addr().String()
		}
		body := fmt.Sprintf("hutch: connection to %s blocked by the sandbox's network policy\n", target)
		fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		splice.CloseWrite(c)
		c.SetReadDeadline(time.Now().Add(lingerTimeout))
		io.Copy(io.Discard, io.LimitReader(c, maxPeek))
	}
}
