package resolver

import (
	"net"
	"net/netip"
	"sync"
)

// A limiter bounds work in flight, in all and per client, so that no
// sandbox can take all of the resolver for itself, nor a few sandboxes
// all of it from the others. Each client may hold reserved slots whatever
// the others hold; past those, clients share shared slots, each up to
// perClient; never more than max in all. So a client that holds fewer
// than reserved always gets one, unless (max - shared) / reserved clients
// hold their reserved slots all at once. When full it refuses rather than
// waits: a waiting query would hold a goroutine anyway, and the client
// retries.
type limiter struct {
	max, shared, perClient, reserved int

	mu         sync.Mutex
	total      int // slots held
	sharedUsed int // slots held past clients' reserved ones
	clients    map[netip.Addr]int
}

// newLimiter returns a limiter of max slots, perClient at most per client,
// none reserved.
func newLimiter(max, perClient int) *limiter {
	return newReservingLimiter(max, max, perClient, 0)
}

// newReservingLimiter returns a limiter of max slots: reserved for each
// client, shared past those, perClient at most per client.
func newReservingLimiter(max, shared, perClient, reserved int) *limiter {
	return &limiter{max: max, shared: shared, perClient: perClient, reserved: reserved, clients: map[netip.Addr]int{}}
}

// acquire takes a slot for client, and reports whether there was one.
func (l *limiter) acquire(client netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.clients[client]
	switch {
	case l.total >= l.max || n >= l.perClient:
		return false
	case n >= l.reserved:
		if l.sharedUsed >= l.shared {
			return false
		}
		l.sharedUsed++
	}
	l.total++
	l.clients[client] = n + 1
	return true
}

// release gives back a slot acquire took.
func (l *limiter) release(client netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.clients[client]
	if n > l.reserved {
		l.sharedUsed--
	}
	l.total--
	if n > 1 {
		l.clients[client] = n - 1
	} else {
		delete(l.clients, client)
	}
}

// A limitListener closes the connections over its limiter's bounds as soon
// as they are accepted. Unlike blocking Accept (netutil.LimitListener), this
// keeps a sandbox that holds its share of connections open from locking the
// others out.
type limitListener struct {
	net.Listener
	limit *limiter
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := addrOf(c.RemoteAddr())
		if l.limit.acquire(client) {
			return &limitConn{Conn: c, release: sync.OnceFunc(func() { l.limit.release(client) })}, nil
		}
		c.Close()
	}
}

// A limitConn gives its slot back when closed, once however often it is
// closed.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
