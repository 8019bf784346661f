package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Operation keys, in the table's order.
const (
	opGrant    = "grant"
	opRegister = "register"
	opRenew    = "renew"
	opLoad     = "load"
	opRange    = "range"
	opCreate   = "create"
	opRejoin   = "rejoin"
	opWatch    = "watch"
)

var opOrder = []string{opGrant, opRegister, opRenew, opLoad, opRange, opCreate, opWatch, opRejoin}

// opNames are the table's first column.
var opNames = map[string]string{
	opGrant:    "lease grant (registration, before the window)",
	opRegister: "put nodes/<name> with its lease (registration)",
	opRenew:    "lease renewal: LeaseKeepAlive round trip",
	opLoad:     "put nodes/<name>, fresh load, with its lease",
	opRange:    "range of nodes/ (a cold placement's read)",
	opCreate:   "txn: sandboxes/<id> if absent, put with lease",
	opWatch:    "watch of nodes/: an update's delivery lag",
	opRejoin:   "grant + put after a lost lease",
}

// registerTries is how many times a node tries to register before the
// window before it is left out.
const registerTries = 3

// maxInflight bounds the paced operations (ranges, creates) waiting for
// an answer, per operation; one more is counted as an error.
const maxInflight = 256

// errTooMany is a paced operation not sent because maxInflight of its kind
// were waiting.
var errTooMany = fmt.Errorf("not sent: %d of this kind already waiting", maxInflight)

// stat holds one operation's latencies and errors.
type stat struct {
	mu       sync.Mutex
	times    []time.Duration // sorted by result()
	errs     int
	errKinds map[string]int // at most 5 kinds; the rest as "other"
}

func (s *stat) add(d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.times = append(s.times, d)
		return
	}
	s.errs++
	if s.errKinds == nil {
		s.errKinds = map[string]int{}
	}
	msg := err.Error()
	if _, ok := s.errKinds[msg]; !ok && len(s.errKinds) >= 5 {
		msg = "other"
	}
	s.errKinds[msg]++
}

func (s *stat) count() int { return len(s.times) + s.errs }

// errSummary is the kinds of errors with their counts, most frequent
// first.
func (s *stat) errSummary() string {
	var kinds []string
	for k := range s.errKinds {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return s.errKinds[kinds[i]] > s.errKinds[kinds[j]] })
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d× %s", s.errKinds[k], k))
	}
	return strings.Join(parts, "; ")
}

// target is the etcd a run talks to.
type target struct {
	endpoints []string
	tls       *clientTLS // nil: plain http
	members   []*member  // nil for an external etcd
	prefix    string     // /hutch/v1/ or a prefix of the run's own
	cleanup   bool       // revoke the leases and delete prefix afterwards
}

// result is what one run of N nodes measured.
type result struct {
	nodes      int
	window     time.Duration
	registered time.Duration // registering every node, before the window
	// unregistered nodes failed registerTries times, or had not had
	// their turn within cfg.registerWithin, and were left out.
	unregistered int
	stats        map[string]*stat
	target       map[string]float64 // ops/s the simulation asks for
	lost         int64              // leases found expired by a renewal
	rangeKeys    int                // in the last range of nodes/
	rangeBytes   int                // keys and values in it
	nodeKeys     int64              // nodes/ and sandboxes/ at the end
	sboxKeys     int64
	members      []memberStatus
	simCPU       time.Duration
	busyCPUs     float64 // the whole machine's, over the window
	recordSize   int     // one node record, one sandbox record
	sboxSize     int
}

// memberStatus is one member's state at the end of the window.
type memberStatus struct {
	name, endpoint  string
	leader          bool
	dbSize, dbInUse int64
	revision        int64
	raftIndex       uint64
	cpu             time.Duration // over the window; -1: unknown
	rssKiB          int64         // at the end; -1: unknown
	statusErr       error
	version         string // etcd's
}

// sim is one run: N simulated nodes sharing cfg.clients etcd clients.
type sim struct {
	cfg       config
	t         target
	clients   []*clientv3.Client
	nodes     []*node
	live      []*node // the registered ones, set before the window
	stats     map[string]*stat
	measuring atomic.Bool
	lost      atomic.Int64
	inflight  map[string]*atomic.Int64
	rangeKeys atomic.Int64
	rangeSize atomic.Int64
}

// node is one simulated Hutch node.
type node struct {
	name, key string
	cli       *clientv3.Client
	rec       nodeRecord
	lease     atomic.Int64
	// lastPut is when the latest load update began (UnixNano), for the
	// watchers' lag.
	lastPut atomic.Int64
}

// runOnce simulates n nodes against t for cfg.duration (after registering
// them all) and returns what it measured. The window ends early when ctx
// does.
func runOnce(ctx context.Context, cfg config, n int, t target) (*result, error) {
	s := &sim{cfg: cfg, t: t, stats: map[string]*stat{}, inflight: map[string]*atomic.Int64{}}
	for _, k := range opOrder {
		s.stats[k] = &stat{}
		s.inflight[k] = &atomic.Int64{}
	}
	for range cfg.clients {
		cli, err := newClient(t)
		if err != nil {
			s.closeClients()
			return nil, err
		}
		s.clients = append(s.clients, cli)
	}
	defer s.closeClients()

	started := time.Now()
	for i := range n {
		name := fmt.Sprintf("node-%05d", i)
		s.nodes = append(s.nodes, &node{
			name: name, key: t.prefix + "nodes/" + name,
			cli: s.clients[i%len(s.clients)],
			rec: newNodeRecord(i, name, started),
		})
	}
	res := &result{
		nodes: n, stats: s.stats,
		recordSize: len(s.nodes[0].rec.withLoad()),
		sboxSize:   len(sandboxJSON(sandboxID(), s.nodes[0].name, started)),
		target: map[string]float64{
			opRenew:  float64(n) / (cfg.lease / 3).Seconds(),
			opLoad:   float64(n) / cfg.loadEvery.Seconds(),
			opRange:  cfg.rangesPerS,
			opCreate: cfg.createsPerS,
			opWatch:  float64(cfg.watchers*n) / cfg.loadEvery.Seconds(),
		},
	}

	// Registration: each node grants its lease and puts its record, then
	// starts renewing and reporting load at once (its lease runs from the
	// grant); the window opens when every node is registered.
	loopCtx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	defer func() {
		stopLoops()
		loops.Wait()
	}()
	// A node that fails to register tries again (registerTries in all, a
	// second apart), as a starting node would; one that never manages, or
	// whose turn comes after cfg.registerWithin, is left out and counted.
	work := make(chan *node)
	var unregistered atomic.Int64
	var workers sync.WaitGroup
	for range cfg.registerConc {
		workers.Go(func() {
			for nd := range work {
				err := s.register(loopCtx, nd, true)
				for try := 1; err != nil && try < registerTries && sleepUntil(loopCtx, time.Now().Add(time.Second)); try++ {
					err = s.register(loopCtx, nd, true)
				}
				if err != nil {
					unregistered.Add(1)
					continue
				}
				loops.Go(func() { s.renewLoop(loopCtx, nd) })
				loops.Go(func() { s.loadLoop(loopCtx, nd) })
			}
		})
	}
	regDeadline := started.Add(cfg.registerWithin)
	for i, nd := range s.nodes {
		if ctx.Err() != nil {
			break
		}
		if time.Now().After(regDeadline) {
			unregistered.Add(int64(len(s.nodes) - i))
			break
		}
		work <- nd
	}
	close(work)
	workers.Wait()
	res.registered = time.Since(started)
	res.unregistered = int(unregistered.Load())
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for _, nd := range s.nodes {
		if nd.lease.Load() != 0 {
			s.live = append(s.live, nd)
		}
	}

	// Watchers start before the window, from the current revision.
	var watchers sync.WaitGroup
	watchStats := make([]*stat, cfg.watchers)
	if cfg.watchers > 0 {
		byKey := map[string]*node{}
		for _, nd := range s.nodes {
			byKey[nd.key] = nd
		}
		for i := range watchStats {
			watchStats[i] = &stat{}
			watchers.Go(func() { s.watchLoop(loopCtx, s.clients[i%len(s.clients)], byKey, watchStats[i]) })
		}
	}

	// The window.
	cpu0 := s.memberCPU()
	self0 := harness.SelfCPU()
	idle0, total0, _ := harness.CPUSample()
	t0 := time.Now()
	s.measuring.Store(true)
	loops.Go(func() { s.paced(loopCtx, opRange, cfg.rangesPerS, s.rangeOnce) })
	loops.Go(func() { s.paced(loopCtx, opCreate, cfg.createsPerS, s.createOnce) })
	select {
	case <-ctx.Done():
	case <-time.After(cfg.duration):
	}
	s.measuring.Store(false)
	res.window = time.Since(t0)
	cpu1 := s.memberCPU()
	res.simCPU = harness.SelfCPU() - self0
	if idle1, total1, err := harness.CPUSample(); err == nil && total1 > total0 {
		res.busyCPUs = (1 - float64(idle1-idle0)/float64(total1-total0)) * float64(runtime.NumCPU())
	}
	stopLoops()
	loops.Wait()
	watchers.Wait()

	for _, ws := range watchStats {
		w := s.stats[opWatch]
		w.times = append(w.times, ws.times...)
		w.errs += ws.errs
		for k, v := range ws.errKinds {
			if w.errKinds == nil {
				w.errKinds = map[string]int{}
			}
			w.errKinds[k] += v
		}
	}
	for _, st := range s.stats {
		slices.Sort(st.times)
	}
	res.lost = s.lost.Load()
	res.rangeKeys, res.rangeBytes = int(s.rangeKeys.Load()), int(s.rangeSize.Load())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	res.members = s.status(sctx, cpu0, cpu1)
	cli := s.clients[0]
	if r, err := cli.Get(sctx, t.prefix+"nodes/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		res.nodeKeys = r.Count
	}
	if r, err := cli.Get(sctx, t.prefix+"sandboxes/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
		res.sboxKeys = r.Count
	}
	if t.cleanup {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := s.removeAll(cctx); err != nil {
			return res, fmt.Errorf("cleaning up %s: %w", t.prefix, err)
		}
	}
	return res, nil
}

func newClient(t target) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   t.endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
	if t.tls != nil {
		tc, err := t.tls.config()
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
}

func (s *sim) closeClients() {
	for _, c := range s.clients {
		c.Close()
	}
}

// record adds one operation's outcome when it started inside the window
// (in), or always for registration (grant, register).
func (s *sim) record(op string, in bool, d time.Duration, err error) {
	if in {
		s.stats[op].add(d, err)
	}
}

// register grants nd a lease and puts its record bound to it. first: the
// registration before the window (timed as grant and register), else a
// node that lost its lease joining again (timed as rejoin, when in the
// window).
func (s *sim) register(ctx context.Context, nd *node, first bool) error {
	in := first || s.measuring.Load()
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	g, err := nd.cli.Grant(cctx, int64(s.cfg.lease.Seconds()))
	if first {
		s.record(opGrant, in, time.Since(t0), err)
	}
	if err != nil {
		if !first {
			s.record(opRejoin, in, time.Since(t0), err)
		}
		return err
	}
	nd.lease.Store(int64(g.ID))
	t1 := time.Now()
	val := string(nd.rec.withLoad())
	_, err = nd.cli.Put(cctx, nd.key, val, clientv3.WithLease(g.ID))
	if first {
		s.record(opRegister, in, time.Since(t1), err)
	} else {
		s.record(opRejoin, in, time.Since(t0), err)
	}
	return err
}

// sleepUntil waits until t or ctx ends; false when ctx ended.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// renewLoop keeps nd's lease alive as clientv3's KeepAlive does: one
// LeaseKeepAlive stream (on the shared client's connection), a request
// every TTL/3 after the previous one was sent, each round trip timed. A
// renewal answered with TTL <= 0 (the lease expired) counts as an error
// and a lost lease, and the node joins again with a new lease. The first
// renewal comes at a random point of the first TTL/3, so that the nodes'
// renewals spread.
func (s *sim) renewLoop(ctx context.Context, nd *node) {
	interval := s.cfg.lease / 3
	next := time.Now().Add(rand.N(interval))
	var stream pb.Lease_LeaseKeepAliveClient
	closeStream := func() {}
	defer func() { closeStream() }()
	for sleepUntil(ctx, next) {
		t0 := time.Now()
		next = t0.Add(interval)
		in := s.measuring.Load()
		if stream == nil {
			sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			st, err := pb.NewLeaseClient(nd.cli.ActiveConnection()).LeaseKeepAlive(sctx)
			if err != nil {
				cancel()
				if ctx.Err() == nil {
					s.record(opRenew, in, time.Since(t0), err)
				}
				continue
			}
			stream, closeStream = st, cancel
		}
		timer := time.AfterFunc(s.cfg.timeout, closeStream)
		err := stream.Send(&pb.LeaseKeepAliveRequest{ID: nd.lease.Load()})
		var resp *pb.LeaseKeepAliveResponse
		if err == nil {
			resp, err = stream.Recv()
		}
		timedOut := !timer.Stop()
		d := time.Since(t0)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil:
			if timedOut {
				err = fmt.Errorf("no answer within %s", s.cfg.timeout)
			}
			closeStream()
			stream, closeStream = nil, func() {}
			s.record(opRenew, in, d, err)
		case resp.TTL <= 0:
			s.record(opRenew, in, d, errors.New("lease expired"))
			if in {
				s.lost.Add(1)
			}
			s.register(ctx, nd, false)
		default:
			s.record(opRenew, in, d, nil)
		}
	}
}

// loadLoop rewrites nd's record with fresh load every cfg.loadEvery,
// bound to its current lease, starting at a random point of the first
// interval.
func (s *sim) loadLoop(ctx context.Context, nd *node) {
	interval := s.cfg.loadEvery
	next := time.Now().Add(rand.N(interval))
	for sleepUntil(ctx, next) {
		val := string(nd.rec.withLoad())
		t0 := time.Now()
		next = t0.Add(interval)
		in := s.measuring.Load()
		nd.lastPut.Store(t0.UnixNano())
		cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
		_, err := nd.cli.Put(cctx, nd.key, val, clientv3.WithLease(clientv3.LeaseID(nd.lease.Load())))
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.record(opLoad, in, time.Since(t0), err)
	}
}

// watchLoop watches nodes/ as a node keeping its placement view from a
// watch (rather than ranges) would, and records into st, for each PUT
// event inside the window, the time since the node's latest load update
// began (which understates a lag longer than -load-interval: a newer
// update has begun by then). A watch that ends with an error (compacted,
// canceled) counts one and starts again from the next revision.
func (s *sim) watchLoop(ctx context.Context, cli *clientv3.Client, byKey map[string]*node, st *stat) {
	var rev int64
	for ctx.Err() == nil {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev+1))
		}
		for resp := range cli.Watch(clientv3.WithRequireLeader(ctx), s.t.prefix+"nodes/", opts...) {
			if err := resp.Err(); err != nil {
				if ctx.Err() == nil && s.measuring.Load() {
					st.add(0, err)
				}
				break
			}
			now := time.Now()
			rev = resp.Header.Revision
			if !s.measuring.Load() {
				continue
			}
			for _, ev := range resp.Events {
				nd := byKey[string(ev.Kv.Key)]
				if ev.Type != clientv3.EventTypePut || nd == nil {
					continue
				}
				st.times = append(st.times, max(0, now.Sub(time.Unix(0, nd.lastPut.Load()))))
			}
		}
	}
}

// paced runs op rate times a second on a fixed schedule (open loop: a
// slow answer does not delay the next one), each in its own goroutine,
// until ctx ends; at most maxInflight wait at once.
func (s *sim) paced(ctx context.Context, key string, rate float64, op func(ctx context.Context)) {
	if rate <= 0 {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	interval := time.Duration(float64(time.Second) / rate)
	next := time.Now()
	inflight := s.inflight[key]
	for {
		next = next.Add(interval)
		if !sleepUntil(ctx, next) {
			return
		}
		if inflight.Load() >= maxInflight {
			s.record(key, s.measuring.Load(), 0, errTooMany)
			continue
		}
		inflight.Add(1)
		wg.Go(func() {
			defer inflight.Add(-1)
			op(ctx)
		})
	}
}

// rangeOnce reads every node record, as a placement without a cache
// would, through one of the shared clients.
func (s *sim) rangeOnce(ctx context.Context) {
	cli := s.clients[rand.IntN(len(s.clients))]
	in := s.measuring.Load()
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	resp, err := cli.Get(cctx, s.t.prefix+"nodes/", clientv3.WithPrefix())
	if ctx.Err() != nil {
		return
	}
	s.record(opRange, in, time.Since(t0), err)
	if err == nil {
		size := 0
		for _, kv := range resp.Kvs {
			size += len(kv.Key) + len(kv.Value)
		}
		s.rangeKeys.Store(int64(len(resp.Kvs)))
		s.rangeSize.Store(int64(size))
	}
}

// createOnce creates one sandbox record on a random registered node,
// bound to its lease, only if the id is new (issue 21's txn:
// CreateRevision == 0).
func (s *sim) createOnce(ctx context.Context) {
	if len(s.live) == 0 {
		return
	}
	nd := s.live[rand.IntN(len(s.live))]
	id := sandboxID()
	key := s.t.prefix + "sandboxes/" + id
	val := string(sandboxJSON(id, nd.name, time.Now()))
	in := s.measuring.Load()
	t0 := time.Now()
	cctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	resp, err := nd.cli.Txn(cctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val, clientv3.WithLease(clientv3.LeaseID(nd.lease.Load())))).
		Commit()
	if ctx.Err() != nil {
		return
	}
	if err == nil && !resp.Succeeded {
		err = errors.New("sandbox id already taken")
	}
	s.record(opCreate, in, time.Since(t0), err)
}

// memberCPU is each member process's CPU time so far (-1: unknown, or an
// external etcd: nil).
func (s *sim) memberCPU() []time.Duration {
	var out []time.Duration
	for _, m := range s.t.members {
		d, ok := harness.ProcCPU(m.pid())
		if !ok {
			d = -1
		}
		out = append(out, d)
	}
	return out
}

// status asks every endpoint for its Status: db size, revision, leader.
func (s *sim) status(ctx context.Context, cpu0, cpu1 []time.Duration) []memberStatus {
	var out []memberStatus
	for i, ep := range s.t.endpoints {
		ms := memberStatus{name: ep, endpoint: ep, cpu: -1, rssKiB: -1}
		if i < len(s.t.members) {
			m := s.t.members[i]
			ms.name = m.name
			if cpu0[i] >= 0 && cpu1[i] >= 0 {
				ms.cpu = cpu1[i] - cpu0[i]
			}
			if r, err := harness.ReadRollup(m.pid()); err == nil {
				ms.rssKiB = r.Rss
			}
		}
		st, err := s.clients[0].Status(ctx, ep)
		if err != nil {
			ms.statusErr = err
		} else {
			ms.leader = st.Leader == st.Header.MemberId
			ms.dbSize, ms.dbInUse = st.DbSize, st.DbSizeInUse
			ms.revision, ms.raftIndex = st.Header.Revision, st.RaftIndex
			ms.version = st.Version
		}
		out = append(out, ms)
	}
	return out
}

// removeAll revokes every node's lease (their records and sandboxes go
// with them) and deletes what is left under the run's prefix: an
// external etcd is left as it was found.
func (s *sim) removeAll(ctx context.Context) error {
	work := make(chan *node)
	var wg sync.WaitGroup
	for range s.cfg.registerConc {
		wg.Go(func() {
			for nd := range work {
				if id := nd.lease.Load(); id != 0 {
					s.clients[0].Revoke(ctx, clientv3.LeaseID(id))
				}
			}
		})
	}
	for _, nd := range s.nodes {
		work <- nd
	}
	close(work)
	wg.Wait()
	_, err := s.clients[0].Delete(ctx, s.t.prefix, clientv3.WithPrefix())
	return err
}
