package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// createBody is every create's request: E2B's POST /sandboxes of the
// base template, with a timeout long enough that no sandbox ends before
// the harness deletes it.
var createBody = []byte(`{"templateID":"base","timeout":600}`)

// call is one timed request of a phase.
type call struct {
	node int // index of the node it was sent to
	id   string
	d    time.Duration
	err  error
}

// phase is what one phase (the creates, or the deletes) measured: its
// calls, its wall time and the CPU used while it ran.
type phase struct {
	calls []call
	wall  time.Duration
	cpu   cpuUse
}

// ok are the times of the calls that succeeded, sorted.
func (p *phase) ok() []time.Duration {
	var t []time.Duration
	for _, c := range p.calls {
		if c.err == nil {
			t = append(t, c.d)
		}
	}
	slices.Sort(t)
	return t
}

// failed counts the calls that failed, and names the first failure.
func (p *phase) failed() (int, string) {
	n, first := 0, ""
	for _, c := range p.calls {
		if c.err != nil && !errors.Is(c.err, errSkipped) {
			if n == 0 {
				first = c.err.Error()
			}
			n++
		}
	}
	return n, first
}

// perSecond is the phase's successful calls per second of wall time.
func (p *phase) perSecond() float64 {
	if p.wall <= 0 {
		return 0
	}
	return float64(len(p.ok())) / p.wall.Seconds()
}

// runCalls runs n calls, conc at once, call i sent to node i%len(nodes)
// by do, and measures the phase's wall time and CPU.
func (b *bench) runCalls(ctx context.Context, c *cluster, n, conc int, do func(ctx context.Context, i int, nd *node) call) *phase {
	p := &phase{calls: make([]call, n)}
	var next atomic.Int64
	var wg sync.WaitGroup
	m0 := markCPU(c.pids())
	t0 := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				k := i % len(c.nodes)
				cl := do(ctx, i, c.nodes[k])
				cl.node = k
				p.calls[i] = cl
			}
		}()
	}
	wg.Wait()
	p.wall = time.Since(t0)
	p.cpu = markCPU(c.pids()).since(m0)
	return p
}

// create is one POST /sandboxes to nd, timed to the end of its answer.
func (b *bench) create(ctx context.Context, nd *node) call {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, nd.url()+"/sandboxes", bytes.NewReader(createBody))
	if err != nil {
		return call{err: err}
	}
	req.Header.Set("X-API-Key", b.key)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := nd.api.Do(req)
	if err != nil {
		return call{err: err}
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return call{err: err}
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return call{err: fmt.Errorf("POST /sandboxes via %s: %s: %.200s", nd.name, resp.Status, bytes.TrimSpace(body))}
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	if err := json.Unmarshal(body, &sb); err != nil || sb.SandboxID == "" {
		return call{err: fmt.Errorf("POST /sandboxes via %s: no sandboxID in %.200s", nd.name, body)}
	}
	return call{id: sb.SandboxID, d: d}
}

// kill is one DELETE /sandboxes/{id} to nd, timed to its answer.
func (b *bench) kill(ctx context.Context, nd *node, id string) call {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, nd.url()+"/sandboxes/"+id, nil)
	if err != nil {
		return call{id: id, err: err}
	}
	req.Header.Set("X-API-Key", b.key)
	t0 := time.Now()
	resp, err := nd.api.Do(req)
	if err != nil {
		return call{id: id, err: err}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return call{id: id, err: fmt.Errorf("DELETE /sandboxes/%s via %s: %s: %.200s", id, nd.name, resp.Status, bytes.TrimSpace(body))}
	}
	return call{id: id, d: d}
}

// stepResult is what one step (1, 2, 3 nodes, or the plain server)
// measured.
type stepResult struct {
	spec    clusterSpec
	creates *phase
	deletes *phase
	// owner is, for each created sandbox, the index of the node that
	// runs it (hutch ps of each node's data dir); -1 when none listed it.
	owner map[string]int
	// running is each node's count of sandboxes after the creates.
	running []int
	// startup is how long the nodes took to start and list each other.
	startup time.Duration
	// busyBefore is how busy the machine was just before the creates.
	busyBefore float64
	// idle is the nodes' CPU with no call in flight, over a few seconds
	// before the creates: what the cluster costs by itself (leases,
	// record refreshes, watches, key and template syncs).
	idle *phase
	// revCreates and revDeletes are how many revisions etcd gained (its
	// writes) over the creates and over the deletes; -1 when unknown.
	revCreates, revDeletes int64
	// idleRevPerSec is etcd's writes per second with no call in flight
	// (the nodes' record refreshes, every 2 s each), before the creates.
	idleRevPerSec float64
	err           error
}

// runStep starts the step's nodes on the LAN's hosts, warms them up,
// runs the creates and then the deletes, reads who owns what in between,
// and stops the nodes; with hop set it measures the routing hop (on the
// running cluster) before it stops them.
func (b *bench) runStep(ctx context.Context, spec clusterSpec, hosts []*host, hop bool) (*stepResult, *hopResult) {
	r := &stepResult{spec: spec}
	b.logf("== %s: etcd %s", spec.label(), spec.etcdDesc())
	t0 := time.Now()
	c, err := b.startCluster(ctx, spec, hosts)
	if err != nil {
		r.err = err
		return r, nil
	}
	defer func() {
		b.logf("stopping the nodes, removing what is left of them")
		if err := c.stop(b.cfg.hutch); err != nil {
			b.logf("clean-up of %s: %v", spec.label(), err)
		}
	}()
	r.startup = time.Since(t0)
	b.logf("up in %.1f s; warm-up: %d creates and deletes", r.startup.Seconds(), b.cfg.warmup)
	if b.cfg.warmup > 0 {
		w := b.runCalls(ctx, c, b.cfg.warmup, b.cfg.conc, func(ctx context.Context, _ int, nd *node) call { return b.create(ctx, nd) })
		b.runCalls(ctx, c, b.cfg.warmup, b.cfg.conc, func(ctx context.Context, i int, nd *node) call {
			if w.calls[i].err != nil {
				return call{}
			}
			return b.kill(ctx, nd, w.calls[i].id)
		})
		if n, first := w.failed(); n > 0 {
			b.logf("warm-up: %d of %d creates failed, the first: %s", n, b.cfg.warmup, first)
		}
	}
	// Let the nodes' records show the warm-up's sandboxes gone (they
	// refresh every 2 s), so that placement starts from empty nodes, and
	// the kernel finish tearing them down.
	revIdle, tIdle, idle0 := c.revision(ctx), time.Now(), markCPU(c.pids())
	sleepCtx(ctx, 2*time.Second)
	r.busyBefore = settle(ctx, 0.1, 10*time.Second)
	r.idle = &phase{wall: time.Since(tIdle), cpu: markCPU(c.pids()).since(idle0)}
	b.logf("%d creates, %d at once (machine %.0f%% busy just before)", b.cfg.creates, b.cfg.conc, 100*r.busyBefore)
	rev0 := c.revision(ctx)
	if d := revDelta(revIdle, rev0); d >= 0 {
		r.idleRevPerSec = float64(d) / time.Since(tIdle).Seconds()
	}
	r.creates = b.runCalls(ctx, c, b.cfg.creates, b.cfg.conc, func(ctx context.Context, _ int, nd *node) call { return b.create(ctx, nd) })
	rev1 := c.revision(ctx)
	r.owner = map[string]int{}
	for _, cl := range r.creates.calls {
		if cl.err == nil {
			r.owner[cl.id] = -1
		}
	}
	for k, nd := range c.nodes {
		ids, err := sandboxesOf(b.cfg.hutch, nd.data)
		if err != nil {
			b.logf("hutch ps of %s: %v", nd.name, err)
		}
		r.running = append(r.running, len(ids))
		for _, id := range ids {
			if _, ok := r.owner[id]; ok {
				r.owner[id] = k
			}
		}
	}
	b.logf("%d deletes, %d at once", len(r.owner), b.cfg.conc)
	r.deletes = b.runCalls(ctx, c, len(r.creates.calls), b.cfg.conc, func(ctx context.Context, i int, nd *node) call {
		cl := r.creates.calls[i]
		if cl.err != nil {
			return call{err: errSkipped}
		}
		return b.kill(ctx, nd, cl.id)
	})
	rev2 := c.revision(ctx)
	r.revCreates, r.revDeletes = revDelta(rev0, rev1), revDelta(rev1, rev2)
	var h *hopResult
	if hop && ctx.Err() == nil {
		h = b.measureHop(ctx, c)
	}
	return r, h
}

// errSkipped marks a delete not tried: its create had failed.
var errSkipped = errors.New("create failed")

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// settle waits until the machine is less than quiet busy over half a
// second (all CPUs), or for at most d, and returns the last sample.
func settle(ctx context.Context, quiet float64, d time.Duration) float64 {
	deadline := time.Now().Add(d)
	for {
		busy, err := harness.CPUBusy(500 * time.Millisecond)
		if err != nil || busy < quiet || time.Now().After(deadline) || ctx.Err() != nil {
			return busy
		}
	}
}

// revDelta is b − a, or -1 when either is unknown.
func revDelta(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

// add is r added to s (s nil: r), for a step's rounds: the calls of each
// phase one after the other, their wall and CPU times summed, the
// first error kept.
func (s *stepResult) add(r *stepResult) *stepResult {
	if s == nil {
		return r
	}
	if s.err == nil {
		s.err = r.err
	}
	if r.creates == nil {
		return s
	}
	if s.creates == nil {
		s.creates, s.deletes, s.owner, s.running, s.idle = r.creates, r.deletes, r.owner, r.running, r.idle
		s.revCreates, s.revDeletes, s.idleRevPerSec = r.revCreates, r.revDeletes, r.idleRevPerSec
		s.startup, s.busyBefore = r.startup, r.busyBefore
		return s
	}
	// Idle writes are subtracted at one rate from all the phases' wall
	// time: the rounds' average, weighted by that time.
	if ws, wr := s.creates.wall, r.creates.wall; ws+wr > 0 {
		s.idleRevPerSec = (s.idleRevPerSec*ws.Seconds() + r.idleRevPerSec*wr.Seconds()) / (ws + wr).Seconds()
	}
	s.creates = s.creates.add(r.creates)
	s.deletes = s.deletes.add(r.deletes)
	if s.idle != nil && r.idle != nil {
		s.idle = s.idle.add(r.idle)
	}
	for id, o := range r.owner {
		s.owner[id] = o
	}
	for k := range min(len(s.running), len(r.running)) {
		s.running[k] += r.running[k]
	}
	s.revCreates = addRev(s.revCreates, r.revCreates)
	s.revDeletes = addRev(s.revDeletes, r.revDeletes)
	s.startup = max(s.startup, r.startup)
	s.busyBefore = max(s.busyBefore, r.busyBefore)
	return s
}

// add is the phases p and q as one: their calls, wall times and CPU.
func (p *phase) add(q *phase) *phase {
	out := &phase{calls: append(slices.Clone(p.calls), q.calls...), wall: p.wall + q.wall, cpu: p.cpu}
	out.cpu.nodes = slices.Clone(p.cpu.nodes)
	for k := range min(len(out.cpu.nodes), len(q.cpu.nodes)) {
		out.cpu.nodes[k] += q.cpu.nodes[k]
	}
	out.cpu.client += q.cpu.client
	out.cpu.kernel += q.cpu.kernel
	out.cpu.other += q.cpu.other
	out.cpu.irq += q.cpu.irq
	out.cpu.machine += q.cpu.machine
	return out
}

// addRev adds two revision counts, -1 when either is unknown.
func addRev(a, b int64) int64 {
	if a < 0 || b < 0 {
		return -1
	}
	return a + b
}
