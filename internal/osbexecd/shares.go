package osbexecd

import (
	"context"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// shares is a bound every request of the server shares (the host memory
// of replacements, of listings), fair between tenants: one tenant holds at
// most a quarter of it, so that tenants holding their shares for long (a
// sandbox whose envd they stopped, a client that reads slowly) leave the
// rest to everyone else unless four of them act together (review 30: with
// halves, two keys were enough). A request waits for its share at most
// shareWait, then is answered 429.
type shares struct {
	sem       *semaphore.Weighted
	perTenant int64

	mu   sync.Mutex
	held map[string]int64
}

func newShares(total int64) *shares {
	return &shares{sem: semaphore.NewWeighted(total), perTenant: max(total/4, 1), held: map[string]int64{}}
}

// listingDeadline bounds one envd listing.
const listingDeadline = time.Minute

// errBusy is acquire's error when the share did not come in time.
var errBusy = &apiError{http.StatusTooManyRequests, codeTooMany, "the server is busy with this kind of request, or this key has its share of it in flight; try again shortly"}

// acquire takes n for tenant, n at most perTenant (a request asks for no
// more than that).
func (s *shares) acquire(ctx context.Context, tenant string, n int64) error {
	n = min(n, s.perTenant)
	s.mu.Lock()
	if s.held[tenant]+n > s.perTenant {
		s.mu.Unlock()
		return errBusy
	}
	s.held[tenant] += n
	s.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, shareWait)
	defer cancel()
	if err := s.sem.Acquire(wctx, n); err != nil {
		s.drop(tenant, n)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errBusy
	}
	return nil
}

// release gives back what acquire took for tenant.
func (s *shares) release(tenant string, n int64) {
	n = min(n, s.perTenant)
	s.sem.Release(n)
	s.drop(tenant, n)
}

func (s *shares) drop(tenant string, n int64) {
	s.mu.Lock()
	if s.held[tenant] -= n; s.held[tenant] <= 0 {
		delete(s.held, tenant)
	}
	s.mu.Unlock()
}
