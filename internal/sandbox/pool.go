package sandbox

import (
	"context"
	"fmt"
	goruntime "runtime"
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
// Recover removes them like any half-made sandbox.
type pool struct {
	template string
	ready    chan *started
	wg       sync.WaitGroup
	idle     atomic.Int32 // sandboxes ready to hand out (sent or being sent)
	lastTake atomic.Int64 // when a sandbox was last handed out, Unix ns
}

// refillQuiet is how long the refill waits after a hand-out before it
// starts a sandbox: a start takes all of a core for tens of milliseconds,
// and right after a hand-out that core is wanted by the new sandbox's
// first commands (measured: the first command took 38 ms instead of 22
// with the refill starting at once).
const refillQuiet = 150 * time.Millisecond

// startPool starts keeping n sandboxes of tpl warm.
func (m *Manager) startPool(tpl string, n int) {
	if n <= 0 {
		return
	}
	// Refill with as many starts at once as there are cores (a start is
	// mostly CPU), at most n. Each refill holds one ready sandbox in its
	// blocked send, so the channel holds the other n-workers.
	workers := min(n, goruntime.NumCPU())
	p := &pool{template: tpl, ready: make(chan *started, n-workers)}
	m.mu.Lock()
	m.pool = p
	m.mu.Unlock()
	for range workers {
		p.wg.Add(1)
		go m.refill(m.ctx, p)
	}
}

// refill starts warm sandboxes, one at a time, whenever the pool has room,
// until the manager is closed. Several run at once.
func (m *Manager) refill(ctx context.Context, p *pool) {
	defer p.wg.Done()
	backoff := time.Second
	for ctx.Err() == nil {
		// Unless the pool is empty (a burst: the next create is cold anyway).
		for p.idle.Load() > 0 {
			wait := time.Until(time.Unix(0, p.lastTake.Load()).Add(refillQuiet))
			if wait <= 0 {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		st, err := m.startWarm(ctx, p.template)
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

// startWarm starts a sandbox and waits until its envd answers.
func (m *Manager) startWarm(ctx context.Context, name string) (*started, error) {
	tpl, err := m.templates.Get(name)
	if err != nil {
		return nil, err
	}
	st, err := m.start(ctx, tpl)
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

// takeWarm returns a warm sandbox of tpl, or nil when there is none. A warm
// sandbox of an older build of the template is discarded.
func (m *Manager) takeWarm(tpl *template.Template) *started {
	m.mu.Lock()
	p := m.pool
	m.mu.Unlock()
	if p == nil || p.template != tpl.Name {
		return nil
	}
	select {
	case st := <-p.ready:
		p.idle.Add(-1)
		p.lastTake.Store(time.Now().UnixNano())
		if !st.built.Equal(tpl.Built) {
			go st.discard()
			return nil
		}
		return st
	default:
		return nil
	}
}

// stopPool stops the refill and removes the warm sandboxes.
func (m *Manager) stopPool() {
	m.mu.Lock()
	p := m.pool
	m.pool = nil
	m.mu.Unlock()
	if p == nil {
		return
	}
	p.wg.Wait()
	for {
		select {
		case st := <-p.ready:
			st.discard()
		default:
			return
		}
	}
}
