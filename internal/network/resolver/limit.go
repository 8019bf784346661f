package resolver

import (
	"net"
	"net/netip"
	"sync"
)

// A limiter bounds work in flight, in all and per client, so that no
// sandbox can take all of the resolver for itself. When full it refuses
// rather than waits: a waiting query would hold a goroutine anyway, and
// the client retries.
type limiter struct {
	max, perClient int

	mu      sync.Mutex
	total   int
	clients map[netip.Addr]int
}

func newLimiter(max, perClient int) *limiter {
	return &limiter{max: max, perClient: perClient, clients: map[netip.Addr]int{}}
}

// acquire takes a slot for client, and reports whether there was one.
func (l *limiter) acquire(client netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max || l.clients[client] >= l.perClient {
		return false
	}
	l.total++
	l.clients[client]++
	return true
}

// release gives back a slot acquire took.
func (l *limiter) release(client netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if n := l.clients[client] - 1; n > 0 {
		l.clients[client] = n
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
