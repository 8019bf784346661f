package sandbox

import (
	"context"
	"fmt"
	goruntime "runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// A warm pool keeps a few sandboxes of one template started ahead of
// demand: their envd runs, but they have no token, environment, record or
// owner yet. Create hands one out (and only then gives it its token and
// environment), so a create costs an /init and a database insert instead of
// a sandbox start. Each sandbox is still used once: the pool never takes a
// sandbox back. Warm sandboxes are not recorded, so after a crash the next
// Recover removes them like any half-made sandbox. There is a pool for
// each template Options.Warm names.
//
// Refills are background work and are kept to a budget: one start at a
// time per pool, at most one per CPU over all pools (refillSlots), none
// while a create starts a sandbox on demand (in a burst the CPU goes to
// the sandboxes asked for, not to the next ones), and none in the
// refillQuiet after a hand-out unless the pool is half empty.
type pool struct {
	template string
	size     int
	ready    chan *started
	wg       sync.WaitGroup
	idle     atomic.Int32 // sandboxes ready to hand out (sent or being sent)
	lastTake atomic.Int64 // when a sandbox was last handed out, Unix ns
}

// refillQuiet is how long a refill waits after a hand-out before it
// starts a sandbox while the pool is at least half full: a start takes all
// of a core for tens of milliseconds, and right after a hand-out that core
// is wanted by the new sandbox's first commands (measured: the first
// command took 38 ms instead of 22 with the refill starting at once).
const refillQuiet = 150 * time.Millisecond

// refillPoll is how often a waiting refill looks again at what it waits
// for (cold creates to end, the quiet period to pass).
const refillPoll = 10 * time.Millisecond

// startPools starts the warm pools Options.Warm names, in name order.
func (m *Manager) startPools() {
	names := make([]string, 0, len(m.warm))
	for name, n := range m.warm {
		if n > 0 {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	slots := make(chan struct{}, max(1, goruntime.NumCPU()))
	pools := map[string]*pool{}
	for _, name := range names {
		n := m.warm[name]
		// The refill holds one ready sandbox in its blocked send, so the
		// channel holds the other n-1.
		p := &pool{template: name, size: n, ready: make(chan *started, n-1)}
		pools[name] = p
		p.wg.Add(1)
		go m.refill(m.ctx, p, slots)
	}
	m.mu.Lock()
	m.pools = pools
	m.mu.Unlock()
}

// refill starts warm sandboxes, one at a time, whenever the pool has room,
// until the manager is closed.
func (m *Manager) refill(ctx context.Context, p *pool, slots chan struct{}) {
	defer p.wg.Done()
	backoff := time.Second
	for ctx.Err() == nil {
		if !m.refillWait(ctx, p) {
			return
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		st, err := m.startWarm(ctx, p.template)
		<-slots
		if err != nil {
			if ctx.Err() == nil {
				m.logger.Warn("warm pool: start a sandbox", "template", p.template, "err", err, "retry in", backoff)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		p.idle.Add(1)
		select {
		case p.ready <- st:
		case <-ctx.Done():
			p.idle.Add(-1)
			st.discard()
		}
	}
}

// refillWait waits until the refill of p may start a sandbox: no create
// is starting one on demand, and the pool is half empty or was last
// handed from refillQuiet ago. It reports false when ctx ended.
func (m *Manager) refillWait(ctx context.Context, p *pool) bool {
	for {
		quiet := time.Until(time.Unix(0, p.lastTake.Load()).Add(refillQuiet))
		low := 2*int(p.idle.Load()) < p.size
		if m.cold.Load() == 0 && (low || quiet <= 0) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(refillPoll):
		}
	}
}

// startWarm starts a sandbox and waits until its envd answers.
func (m *Manager) startWarm(ctx context.Context, name string) (*started, error) {
	tpl, err := m.templates.Get(name)
	if err != nil {
		return nil, err
	}
	st, err := m.start(ctx, tpl, nil)
	if err != nil {
		return nil, err
	}
	// The socket listened before envd ran: this waits for envd to serve.
	if err := envdapi.NewClient(st.route.host).Health(ctx); err != nil {
		st.discard()
		return nil, fmt.Errorf("envd did not start: %w", err)
	}
	return st, nil
}

// takeWarm returns a warm sandbox of the pool named ref (a template
// name as --warm-template gives it) for tpl, the build ref names now, or
// nil when there is none, and the name of the pool it looked in ("" when
// tpl has none). A ref that is a build's id (a snapshot's, as E2B's SDKs
// create from it) takes from the pool of the build's name. A warm sandbox
// of an older build is discarded.
func (m *Manager) takeWarm(ref string, tpl *template.Template) (_ *started, pool string) {
	m.mu.Lock()
	p := m.pools[ref]
	if p == nil && ref == tpl.ID {
		p = m.pools[tpl.Name]
	}
	m.mu.Unlock()
	if p == nil {
		return nil, ""
	}
	select {
	case st := <-p.ready:
		p.idle.Add(-1)
		p.lastTake.Store(time.Now().UnixNano())
		if st.build != tpl.ID {
			go st.discard()
			return nil, p.template
		}
		return st, p.template
	default:
		return nil, p.template
	}
}

// stopPools stops the refills and removes the warm sandboxes.
func (m *Manager) stopPools() {
	m.mu.Lock()
	pools := m.pools
	m.pools = nil
	m.mu.Unlock()
	for _, p := range pools {
		p.wg.Wait()
		for drained := false; !drained; {
			select {
			case st := <-p.ready:
				st.discard()
			default:
				drained = true
			}
		}
	}
}
