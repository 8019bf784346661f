package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Reads for ids the mirror lacks, and searches of the other nodes for a
// signed URL's sandbox, are what anyone can ask of a node before any key
// is checked. They are rationed twice: per client address (so that one
// client cannot spend everyone's share: review 26 made every cross-node
// signed URL fail with a flood of bogus ones from one address) and per
// node (so that many addresses together cannot flood etcd or the other
// nodes). Owner lookups and signed-URL searches have rations of their own.

// ErrBusy is what a lookup past its ration gets: the client should try
// again in a second. It matches errdefs.ErrResourceExhausted.
var ErrBusy = fmt.Errorf("this node is looking up too much for this client or for all at once; retry in a second: %w", errdefs.ErrResourceExhausted)

// WithClient is ctx with the client a request came from (an address, or
// an IPv6 /64: connlimit.Client), by which its lookups are rationed; a
// ctx without one shares a ration with every other such ctx.
func WithClient(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, clientKey{}, addr)
}

type clientKey struct{}

const (
	// perClientRate is each client address's share, a second, of each
	// ration; a client behind a reverse proxy shares its proxy's.
	perClientRate = 50
	// clientsKept is how many client addresses a ration remembers before
	// it forgets the ones idle for a minute.
	clientsKept = 4096
)

// ration is a rate limit per client address under one for all of them.
// Hand-written: golang.org/x/time/rate limits one stream, and a map of
// them with a bound is all that is added here.
type ration struct {
	all *rate.Limiter

	mu       sync.Mutex
	clients  map[string]*clientShare
	overflow *clientShare // the clients past clientsKept
	pruned   time.Time
}

type clientShare struct {
	lim  *rate.Limiter
	seen time.Time
}

func newRation(perSecond int) *ration {
	return &ration{all: rate.NewLimiter(rate.Limit(perSecond), perSecond), clients: map[string]*clientShare{},
		overflow: &clientShare{lim: rate.NewLimiter(perClientRate, perClientRate)}}
}

// allow reports whether the client ctx names (WithClient) may make one
// more lookup now; it spends from the client's share and the node's.
func (r *ration) allow(ctx context.Context) bool {
	addr, _ := ctx.Value(clientKey{}).(string)
	now := time.Now()
	r.mu.Lock()
	c := r.clients[addr]
	if c == nil {
		if len(r.clients) >= clientsKept && now.Sub(r.pruned) > time.Second {
			r.pruned = now
			for a, c := range r.clients {
				if now.Sub(c.seen) > time.Minute {
					delete(r.clients, a)
				}
			}
		}
		if len(r.clients) < clientsKept {
			c = &clientShare{lim: rate.NewLimiter(perClientRate, perClientRate)}
			r.clients[addr] = c
		} else {
			// Too many clients at once to tell apart: the newest share
			// one share.
			c = r.overflow
		}
	}
	c.seen = now
	ok := c.lim.AllowN(now, 1)
	r.mu.Unlock()
	return ok && r.all.AllowN(now, 1)
}
