package connlimit

import (
	"net/http"
	"net/netip"
	"sync"
)

// Requests caps the HTTP requests in flight, per client (counted as
// connections are: an IPv4 address or an IPv6 /64) and in all. The
// connection caps bound HTTP/1's requests, one at a time on each
// connection, but not HTTP/2's: a connection carries many at once, and
// each request routed to a sandbox holds a descriptor of its own, so
// without this a client well within the connection caps held all of the
// server's descriptors (review 23). With the same numbers as the
// connection caps, it never refuses an HTTP/1 request the connection caps
// admitted. Safe for concurrent use.
type Requests struct {
	perClient, total int
	mu               sync.Mutex
	n                int
	byClient         map[netip.Addr]int
}

// NewRequests caps requests at perClient per client and total in all
// (0: no cap).
func NewRequests(perClient, total int) *Requests {
	return &Requests{perClient: perClient, total: total, byClient: make(map[netip.Addr]int)}
}

// Wrap serves requests within the caps with h, and those over them with
// over.
func (l *Requests) Wrap(h, over http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := clientOfAddr(r.RemoteAddr)
		if !l.acquire(client) {
			over.ServeHTTP(w, r)
			return
		}
		defer l.release(client)
		h.ServeHTTP(w, r)
	})
}

// InFlight is the number of requests being served.
func (l *Requests) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *Requests) acquire(client netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total > 0 && l.n >= l.total || l.perClient > 0 && l.byClient[client] >= l.perClient {
		return false
	}
	l.n++
	l.byClient[client]++
	return true
}

func (l *Requests) release(client netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.byClient[client]--; l.byClient[client] == 0 {
		delete(l.byClient, client)
	}
}
