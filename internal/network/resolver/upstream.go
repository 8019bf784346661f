package resolver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/time/rate"
)

// How the resolver talks to its upstream servers. Every socket it opens
// is a connection tracking (conntrack) entry in the host's table, which
// stays after the socket closes (30 s for UDP, 2 min for TCP), and these
// entries count against no sandbox's cap. A socket per query (what
// dns.Client does) let one sandbox fill the table through the resolver,
// thousands of entries a second. So the queries share a few long-lived
// sockets per upstream server, and the entries they hold are bounded
// whatever the number of queries:
//
//   - udpSockets UDP sockets, each connected from a port the kernel picks
//     at random, used for udpLife and then replaced: at most
//     2 × udpSockets entries (a replaced socket's entry lingers);
//   - tcpConns TCP connections for answers too big for UDP, each carrying
//     many queries (RFC 7766 pipelining) for as long as the server keeps
//     it open, and opened again at most once per tcpDialEvery on average:
//     at most tcpConns open plus those closed in the last 2 minutes,
//     4 + 4 + 120 entries.
//
// The queries in flight on a socket are told apart by their ID, drawn at
// random (crypto/rand) and unique on the socket, and an answer must also
// repeat the question to be taken: an answer with an unknown ID or another
// question is dropped, and the query keeps waiting for the real one. A
// blind spoofer has the same odds as against a socket per query: it must
// hit one of the (port, ID) pairs in flight, as many as the queries in
// flight either way, among some 28000 ports times 65536 IDs. A port is in
// use longer (udpLife rather than one query), and replaced after that.
const (
	udpSockets   = 4
	udpLife      = 5 * time.Minute
	tcpConns     = 4
	tcpDialEvery = time.Second
)

// errConnClosed wraps the error of a TCP connection that ended with
// queries in flight: the server closed it (idle, or its limit of queries
// per connection). Those queries are asked again on another.
var errConnClosed = errors.New("connection closed")

// errRetired is returned for a query on a socket that was replaced just
// before: it is asked on the new one.
var errRetired = errors.New("socket retired")

// An upstream is one upstream server and the sockets Hutch asks it
// through. Safe for concurrent use.
type upstream struct {
	addr   string
	logger *slog.Logger
	life   time.Duration // of a UDP socket: udpLife
	dials  *rate.Limiter // TCP connections opened

	mu     sync.Mutex
	closed bool
	udp    [udpSockets]*mux
	tcp    [tcpConns]tcpSlot
}

// A tcpSlot holds one TCP connection; its mutex is held while it dials.
type tcpSlot struct {
	mu sync.Mutex
	x  *mux
}

func newUpstream(addr string, logger *slog.Logger) *upstream {
	return &upstream{addr: addr, logger: logger, life: udpLife, dials: rate.NewLimiter(rate.Every(tcpDialEvery), tcpConns)}
}

// exchange sends m over network ("udp" or "tcp") and returns the answer
// to it, or an error when ctx ends first or the socket fails. It sets
// m.Id.
func (u *upstream) exchange(ctx context.Context, network string, m *dns.Msg) (*dns.Msg, error) {
	closedOnce := false
	for {
		var x *mux
		var err error
		if network == "tcp" {
			x, err = u.tcpMux(ctx)
		} else {
			x, err = u.udpMux()
		}
		if err != nil {
			return nil, err
		}
		resp, err := x.exchange(ctx, m)
		switch {
		case errors.Is(err, errRetired):
			continue
		case errors.Is(err, errConnClosed) && !closedOnce && ctx.Err() == nil:
			closedOnce = true // once: a server that closes every connection at once is down
			continue
		}
		return resp, err
	}
}

// udpMux returns one of the UDP sockets, picked at random, opening or
// replacing it as needed.
func (u *upstream) udpMux() (*mux, error) {
	i := rand.IntN(udpSockets)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, net.ErrClosed
	}
	x := u.udp[i]
	if x != nil && (x.failed() || time.Since(x.born) > u.life) {
		x.retire()
		x = nil
	}
	if x == nil {
		// Connected: the kernel takes only datagrams from the server's
		// address and port, and picks the local port at random.
		c, err := net.Dial("udp", u.addr)
		if err != nil {
			return nil, err
		}
		x = newMux(c, false, u.logger)
		u.udp[i] = x
	}
	return x, nil
}

// tcpMux returns one of the TCP connections, picked at random, dialling
// it if it is not open (within the rate of dials).
func (u *upstream) tcpMux(ctx context.Context) (*mux, error) {
	s := &u.tcp[rand.IntN(tcpConns)]
	s.mu.Lock()
	defer s.mu.Unlock()
	u.mu.Lock()
	closed := u.closed
	u.mu.Unlock()
	if closed {
		return nil, net.ErrClosed
	}
	if s.x != nil && !s.x.failed() {
		return s.x, nil
	}
	if s.x != nil {
		s.x.retire()
		s.x = nil
	}
	if err := u.dials.Wait(ctx); err != nil {
		return nil, fmt.Errorf("tcp: too many connections opened: %w", err)
	}
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", u.addr)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed { // closed while dialling
		c.Close()
		return nil, net.ErrClosed
	}
	s.x = newMux(c, true, u.logger)
	return s.x, nil
}

// close closes every socket; the queries in flight fail.
func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	udp := u.udp
	u.udp = [udpSockets]*mux{}
	u.mu.Unlock()
	for _, x := range udp {
		if x != nil {
			x.close()
		}
	}
	for i := range u.tcp {
		s := &u.tcp[i]
		s.mu.Lock()
		if s.x != nil {
			s.x.close()
			s.x = nil
		}
		s.mu.Unlock()
	}
}

// A mux is one socket to an upstream server, shared by the queries in
// flight on it. A goroutine reads it until it fails or is closed, and
// hands each answer to the query it answers.
type mux struct {
	conn   net.Conn
	tcp    bool
	born   time.Time
	logger *slog.Logger

	wmu sync.Mutex // one message written at a time (TCP)

	mu      sync.Mutex
	calls   map[uint16]*call // by ID
	err     error            // why reading stopped; nil while it reads
	retired bool             // replaced: closes once its queries are done
}

// A call is one query in flight.
type call struct {
	q    dns.Question
	done chan result // gets one result
}

type result struct {
	msg *dns.Msg
	err error
}

func newMux(c net.Conn, tcp bool, logger *slog.Logger) *mux {
	x := &mux{conn: c, tcp: tcp, born: time.Now(), logger: logger, calls: map[uint16]*call{}}
	go x.read()
	return x
}

// exchange sends m, with an ID of its own on x, and waits for its answer.
func (x *mux) exchange(ctx context.Context, m *dns.Msg) (*dns.Msg, error) {
	c := &call{q: m.Question[0], done: make(chan result, 1)}
	id, err := x.register(c)
	if err != nil {
		return nil, err
	}
	defer x.unregister(id, c)
	m.Id = id
	p, err := m.Pack()
	if err != nil {
		return nil, err
	}
	if err := x.write(ctx, p); err != nil {
		return nil, err
	}
	select {
	case r := <-c.done:
		return r.msg, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// register gives c an ID no other query in flight on x has.
func (x *mux) register(c *call) (uint16, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.retired { // before err: a retired socket may be closed already
		return 0, errRetired
	}
	if x.err != nil {
		return 0, x.err
	}
	for {
		// At most maxForwards (8192) queries are in flight, over all
		// the sockets, of 65536 IDs each: a free one comes after a draw
		// or two.
		id := dns.Id()
		if _, taken := x.calls[id]; !taken {
			x.calls[id] = c
			return id, nil
		}
	}
}

// unregister forgets the query with id (if still c's); a retired socket
// closes with its last query.
func (x *mux) unregister(id uint16, c *call) {
	x.mu.Lock()
	if x.calls[id] == c {
		delete(x.calls, id)
	}
	last := x.retired && len(x.calls) == 0
	x.mu.Unlock()
	if last {
		x.conn.Close()
	}
}

// write sends one message: a datagram, or over TCP its length and the
// message in one write, within ctx's deadline.
func (x *mux) write(ctx context.Context, p []byte) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	d, _ := ctx.Deadline() // none: the zero time
	x.conn.SetWriteDeadline(d)
	if x.tcp {
		if len(p) > dns.MaxMsgSize {
			return errors.New("message too long for TCP")
		}
		p = append(binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(p)), uint16(len(p))), p...)
	}
	_, err := x.conn.Write(p)
	if err != nil && x.tcp {
		// The stream is out of step if the write was partial: no query
		// may use it again.
		x.conn.Close()
		return fmt.Errorf("%w: %v", errConnClosed, err)
	}
	return err
}

// read reads answers until the socket fails or is closed.
func (x *mux) read() {
	buf := make([]byte, dns.MaxMsgSize)
	for {
		p, err := x.next(buf)
		if err != nil {
			if !x.tcp && errors.Is(err, syscall.ECONNREFUSED) {
				// An ICMP port unreachable: nothing listens at the
				// server's port, and the queries in flight will get no
				// answer. The socket itself is fine.
				x.fail(err, false)
				continue
			}
			if x.tcp {
				err = fmt.Errorf("%w: %v", errConnClosed, err)
			}
			x.fail(err, true)
			x.conn.Close()
			return
		}
		m := new(dns.Msg)
		if err := m.Unpack(p); err != nil {
			x.logger.Debug("dns: unreadable message from an upstream", "server", x.conn.RemoteAddr().String(), "err", err)
			continue
		}
		x.deliver(m)
	}
}

// next reads one message into buf: a datagram, or over TCP its length
// and the message.
func (x *mux) next(buf []byte) ([]byte, error) {
	if !x.tcp {
		n, err := x.conn.Read(buf)
		return buf[:n], err
	}
	if _, err := io.ReadFull(x.conn, buf[:2]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(buf[:2]))
	if _, err := io.ReadFull(x.conn, buf[:n]); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// deliver hands m to the query it answers: the one in flight with its ID,
// if m repeats that query's question. Anything else is late or spoofed,
// and dropped; the query goes on waiting.
func (x *mux) deliver(m *dns.Msg) {
	x.mu.Lock()
	defer x.mu.Unlock()
	c, ok := x.calls[m.Id]
	if !ok || !m.Response || len(m.Question) != 1 || !sameQuestion(m.Question[0], c.q) {
		x.logger.Debug("dns: upstream answer to no query in flight dropped", "server", x.conn.RemoteAddr().String(), "id", m.Id)
		return
	}
	delete(x.calls, m.Id)
	c.done <- result{msg: m}
}

// fail ends every query in flight with err; with stop, x takes no more.
func (x *mux) fail(err error, stop bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if stop {
		x.err = err
	}
	for id, c := range x.calls {
		delete(x.calls, id)
		c.done <- result{err: err}
	}
}

// failed reports whether x stopped reading.
func (x *mux) failed() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err != nil
}

// retire takes x out of use: it closes once its queries in flight are
// done (at once if there are none).
func (x *mux) retire() {
	x.mu.Lock()
	x.retired = true
	idle := len(x.calls) == 0
	x.mu.Unlock()
	if idle {
		x.conn.Close()
	}
}

// close closes x; its queries in flight fail.
func (x *mux) close() { x.conn.Close() }
