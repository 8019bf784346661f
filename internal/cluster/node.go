// Package cluster makes many `hutch serve` nodes one service on etcd.
//
// Each node keeps running its own sandboxes with its own manager and
// store, which stay the truth for them; etcd holds what the nodes must
// agree on (records.go): which nodes are alive (a key bound to each node's
// lease), which node owns each sandbox (keys bound to the same lease, so a
// dead node's sandboxes vanish from the cluster with it), and the API
// keys. A Node is one node's part:
//
//	leaseLoop  grant a lease, register, reconcile, keep the lease alive,
//	           refresh the node's record; on losing the lease, start over
//	watchLoop  mirror the nodes and sandbox owners into memory (routing
//	           and placement read them there) and import API keys
//	keyLoop    push this node's API keys to the cluster
//
// It is the manager's sandbox.Registry, and tells the server's router
// where a sandbox lives (Owner) and where a new one should go (Place).
// Nodes reach each other on their cluster listeners, with TLS both ways
// (pki.go), through Transport.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// DefaultLeaseTTL is a node's lease when the configuration names none: a
// dead node's sandboxes answer 404 at most this long after it died.
const DefaultLeaseTTL = 10 * time.Second

// DefaultForgetAfter is Config.ForgetAfter's default.
const DefaultForgetAfter = 5 * time.Minute

// opTimeout bounds each etcd call: a node cut off from etcd must notice,
// not hang (a write forwarded to a dead leader waits until its context ends).
const opTimeout = 3 * time.Second

// missRate is how many etcd reads a second Owner makes, at most, for
// sandboxes the mirror does not know.
const missRate = 200

// refreshEvery is how often a node rewrites its record with fresh load.
const refreshEvery = 2 * time.Second

// Config configures a Node.
type Config struct {
	// Name is the node's name, unique in the cluster.
	Name string
	// URL is where other nodes reach this node's cluster listener.
	URL    string
	Labels map[string]string
	// LeaseTTL is the node's lease (0: DefaultLeaseTTL).
	LeaseTTL time.Duration
	// ForgetAfter is how long a node may be without a lease and still
	// record its sandboxes again when it is back (reconcile); past it,
	// the ones the cluster forgot are killed (0: DefaultForgetAfter).
	ForgetAfter time.Duration
	// DataDir is the node's data dir: DataDir/cluster/joined remembers
	// which etcd cluster it belongs to.
	DataDir  string
	Capacity Capacity
	// Transport reaches other nodes' cluster listeners (see TLSFiles).
	Transport http.RoundTripper
	Logger    *slog.Logger
}

// Node is this node's membership of the cluster. Safe for concurrent use.
type Node struct {
	cfg Config
	cli *clientv3.Client
	log *slog.Logger

	// Set by Start.
	mgr       Sandboxes
	store     *store.Store
	templates *template.Store

	mu        sync.Mutex
	lease     clientv3.LeaseID // 0 while the node holds none
	lastRenew time.Time
	nodes     map[string]NodeRecord
	nodeSeen  map[string]time.Time                             // when each node's record last changed here
	owners    map[string]string                                // sandbox id -> node name
	synced    bool                                             // the maps mirror etcd (watchLoop)
	placed    []placement                                      // creates sent lately, oldest first (Place)
	misses    *ration                                          // etcd reads for ids the mirror lacks (lookup)
	searches  *ration                                          // searches of the other nodes for a signed URL's sandbox (FindSigned)
	seen      map[string]bool                                  // builds the cluster recorded (templates.go)
	vols      map[string]volumeRecord                          // volumes by id (volumes.go)
	holds     map[string]map[string][]string                   // node -> build -> its names (holds/ records)
	held      map[string]string                                // this node's holds/ records as last written
	signer    func(method string, q url.Values) (string, bool) // see SetSigner
	puts      map[string]lastPut                               // last record writes (Put)
	pending   map[string]*sandbox.Sandbox                      // changes Put holds back
	started   time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a node of the cluster cli reaches. It does nothing until
// Start: the manager takes it as its Registry first.
func New(cli *clientv3.Client, cfg Config) *Node {
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.ForgetAfter <= 0 {
		cfg.ForgetAfter = DefaultForgetAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{cfg: cfg, cli: cli, log: cfg.Logger.With("node", cfg.Name), nodes: map[string]NodeRecord{}, nodeSeen: map[string]time.Time{},
		owners: map[string]string{}, vols: map[string]volumeRecord{}, holds: map[string]map[string][]string{}, puts: map[string]lastPut{}, pending: map[string]*sandbox.Sandbox{}, started: time.Now().UTC(), misses: newRation(missRate), searches: newRation(missRate)}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	return n
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Transport reaches other nodes' cluster listeners.
func (n *Node) Transport() http.RoundTripper { return n.cfg.Transport }

// Sandboxes are this node's sandboxes: a *sandbox.Manager.
type Sandboxes interface {
	Load() sandbox.Load
	Local(ctx context.Context) ([]*sandbox.Sandbox, error)
	Evict(ctx context.Context, id string) error
	// TemplateUsers lists the sandboxes running a build.
	TemplateUsers(build string) []string
}

// Start joins the cluster: it starts keeping this node's lease, records
// and mirrors. mgr runs this node's sandboxes; st holds its API keys.
func (n *Node) Start(mgr Sandboxes, st *store.Store, templates *template.Store) {
	n.mgr, n.store, n.templates = mgr, st, templates
	n.wg.Add(4)
	go func() { defer n.wg.Done(); n.templateLoop() }()
	go func() { defer n.wg.Done(); n.watchLoop() }()
	go func() { defer n.wg.Done(); n.leaseLoop() }()
	go func() { defer n.wg.Done(); n.keyLoop() }()
}

// Close leaves the loops. The lease is not revoked: a node stopped to be
// restarted keeps its sandboxes in the cluster if it is back within the
// lease; one that does not come back drops out when it expires.
func (n *Node) Close() {
	n.cancel()
	n.wg.Wait()
}

// op is a context for one etcd call. It requires a leader: a member
// without one (cut off, or a deposed leader still rejoining, measured at
// 13–25 s) fails the call at once rather than holding it, and the client
// tries another member.
func (n *Node) op(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(clientv3.WithRequireLeader(ctx), opTimeout)
}

// Ready is nil while the node holds a lease it renewed within its TTL.
func (n *Node) Ready() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lease == 0 || time.Since(n.lastRenew) > n.cfg.LeaseTTL {
		return sandbox.ErrNoLease
	}
	return nil
}

// inTouch is nil while the node renewed its lease within two thirds of its
// TTL (renewals go every third: two missed in a row is a node cut off,
// which should stop placing creates before etcd drops it) and its mirror
// of the cluster is live.
func (n *Node) inTouch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.lease == 0 || time.Since(n.lastRenew) > 2*n.cfg.LeaseTTL/3 || !n.synced {
		return sandbox.ErrNoLease
	}
	return nil
}

// WaitInTouch waits up to d for the node to be in touch with its cluster
// (an etcd election, 1–2 s, breaks it for a moment), then answers as
// inTouch does.
func (n *Node) WaitInTouch(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := n.inTouch()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WhileInTouch returns a context that ends when parent does or when the
// node falls out of touch with its cluster (a partition): a create sent to
// another node over a link that died would otherwise wait on it for ever.
func (n *Node) WhileInTouch(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := n.inTouch(); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

func (n *Node) currentLease() clientv3.LeaseID {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lease
}

// leaseLoop holds the node's lease: grant, register, reconcile, keep
// alive; when the lease is lost (not renewed within its TTL), again.
func (n *Node) leaseLoop() {
	ttl := int64(max(1, n.cfg.LeaseTTL/time.Second))
	// Short tries, often: after a partition heals, the first grant that
	// can succeed should not wait behind one stuck on the dead link.
	try := max(time.Second, n.cfg.LeaseTTL/3)
	failures := 0
	for n.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(n.ctx), try)
		g, err := n.cli.Grant(ctx, ttl)
		cancel()
		if err != nil {
			if failures++; failures == 1 || failures%30 == 0 {
				n.log.Warn("cluster: cannot get a lease; retrying", "err", err, "tries", failures)
			}
			n.redial()
			sleep(n.ctx, 100*time.Millisecond)
			continue
		}
		failures = 0
		lease := g.ID
		if !n.join(lease, time.Now().Add(n.cfg.LeaseTTL)) {
			continue
		}
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.syncMembers() }()
		n.mu.Lock()
		n.lease, n.lastRenew = lease, time.Now()
		n.mu.Unlock()
		n.markRenewed()
		n.log.Info("cluster: holding a lease", "lease", fmt.Sprintf("%x", int64(lease)), "ttl", n.cfg.LeaseTTL)
		n.keepAlive(lease)
		if n.ctx.Err() != nil {
			n.markRenewed() // closing: the next start counts from here
		}
		n.mu.Lock()
		n.lease = 0
		n.mu.Unlock()
		if n.ctx.Err() == nil {
			n.log.Warn("cluster: lost the lease; new creates are refused until the node gets another")
		}
	}
}

// join registers the node and reconciles under a lease just granted,
// retrying until deadline (when the lease runs out unrenewed); it reports
// whether it did.
func (n *Node) join(lease clientv3.LeaseID, deadline time.Time) bool {
	for n.ctx.Err() == nil && time.Now().Before(deadline) {
		err := n.register(n.ctx, lease)
		if err == nil {
			err = n.reconcile(n.ctx, lease)
		}
		if err == nil {
			err = n.reconcileVolumes(n.ctx, lease)
		}
		if err == nil {
			return true
		}
		n.log.Warn("cluster: join under a new lease; retrying", "err", err)
		kctx, cancel := context.WithTimeout(n.ctx, time.Second)
		if _, err := n.cli.KeepAliveOnce(kctx, lease); err == nil { // while it retries
			deadline = time.Now().Add(n.cfg.LeaseTTL)
		}
		cancel()
		n.redial()
		sleep(n.ctx, 100*time.Millisecond)
	}
	return false
}

// syncMembers points the etcd client at every member's client URL now,
// rather than at the client's first AutoSyncInterval: a node given only
// its own member's URL (--etcd-embed) and cut off before that first sync
// knew no other member after the partition healed, and waited on its own
// until that member caught up (measured: 12.7 s after the heal). The list
// is the answering member's own (serializable): it needs no leader, and
// it runs beside the lease's renewals, never before them.
func (n *Node) syncMembers() {
	ctx, cancel := context.WithTimeout(n.ctx, opTimeout)
	defer cancel()
	resp, err := n.cli.MemberList(ctx, clientv3.WithSerializable())
	if err != nil {
		if n.ctx.Err() == nil {
			n.log.Warn("cluster: list etcd's members", "err", err)
		}
		return
	}
	var urls []string
	for _, m := range resp.Members {
		if m.Name != "" && !m.IsLearner { // as the client's own Sync does
			urls = append(urls, m.ClientURLs...)
		}
	}
	if len(urls) > 0 {
		n.cli.SetEndpoints(urls...)
	}
}

// redial has the etcd client try every member it lost at once, rather
// than after gRPC's reconnect backoff: a node out of touch calls it after
// each failed try, so that it reaches the other members as soon as a
// partition heals rather than wait on its own member's rejoining.
func (n *Node) redial() {
	if cc := n.cli.ActiveConnection(); cc != nil {
		cc.ResetConnectBackoff()
	}
}

// keepAlive renews lease and refreshes the node's record until the lease
// is lost or the node closes.
func (n *Node) keepAlive(lease clientv3.LeaseID) {
	ctx, cancel := context.WithCancel(n.ctx)
	defer cancel()
	ka, err := n.cli.KeepAlive(ctx, lease)
	if err != nil {
		return
	}
	tick := time.NewTicker(refreshEvery)
	defer tick.Stop()
	// What the node holds is written beside the renewals, never before
	// them: a node holding thousands of builds takes a while.
	fresh := true
	publish := func() {
		if err := n.publishHolds(ctx, lease, fresh); err != nil {
			if ctx.Err() == nil {
				n.log.Warn("cluster: record the templates held here", "err", err)
			}
			return
		}
		fresh = false
	}
	pubDone := make(chan struct{})
	go func() { defer close(pubDone); publish() }()
	defer func() { cancel(); <-pubDone }()
	for {
		select {
		case resp, ok := <-ka:
			if !ok || resp == nil {
				return // expired by the client's count, or closed
			}
			n.mu.Lock()
			n.lastRenew = time.Now()
			n.mu.Unlock()
		case <-tick.C:
			n.markRenewed()
			select {
			case <-pubDone:
				pubDone = make(chan struct{})
				go func() { defer close(pubDone); publish() }()
			default: // the last one is still at it
			}
			if err := n.register(ctx, lease); err != nil {
				if errors.Is(err, context.Canceled) {
					return
				}
				if strings.Contains(err.Error(), "requested lease not found") {
					return
				}
				n.log.Warn("cluster: refresh the node's record", "err", err)
			}
		}
	}
}

// register writes the node's record under lease.
func (n *Node) register(ctx context.Context, lease clientv3.LeaseID) error {
	rec := n.record(lease)
	ctx, cancel := n.op(ctx)
	defer cancel()
	_, err := n.cli.Put(ctx, nodesPrefix+n.cfg.Name, mustJSON(rec), clientv3.WithLease(lease))
	return err
}

// record is the node's record as of now.
func (n *Node) record(lease clientv3.LeaseID) NodeRecord {
	rec := NodeRecord{Name: n.cfg.Name, URL: n.cfg.URL, Labels: n.cfg.Labels, Capacity: n.cfg.Capacity,
		Started: n.started, Updated: time.Now().UTC(), Lease: int64(lease)}
	l := n.mgr.Load()
	rec.Load = NodeLoad{CPU: loadAverage() / float64(max(1, n.cfg.Capacity.CPUs)), MemoryUsedMB: memoryUsedMB(),
		Running: l.Running, Creating: l.Creating, Warm: l.Warm, WarmBy: l.WarmByTemplate}
	return rec
}

// heldNow is what this node's holds/ records should be: key to value, one
// per template build others may place sandboxes of here.
func (n *Node) heldNow() (map[string]string, error) {
	ts, err := n.templates.List()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, t := range ts {
		if !shared(t) && !template.Builtin(t.Name) {
			continue // a paused sandbox's files, a fork's
		}
		var names []string
		for _, name := range []string{t.Name, t.Ref(), t.ID} {
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
		out[holdsPrefix+n.cfg.Name+"/"+t.ID] = mustJSON(names)
	}
	return out, nil
}

// publishHolds brings this node's holds/ records to what it holds now,
// under lease, writing only what changed since the last call (all of it
// when fresh: a new lease).
func (n *Node) publishHolds(ctx context.Context, lease clientv3.LeaseID, fresh bool) error {
	now, err := n.heldNow()
	if err != nil {
		return err
	}
	n.mu.Lock()
	prev := n.held
	n.mu.Unlock()
	if fresh {
		prev = nil
	}
	puts := map[string]string{}
	for k, v := range now {
		if prev[k] != v {
			puts[k] = v
		}
	}
	var deletes []string
	for k := range prev {
		if _, ok := now[k]; !ok {
			deletes = append(deletes, k)
		}
	}
	if fresh {
		// What a lease before this one left: it expires with that lease,
		// but need not wait for it.
		gctx, cancel := n.op(ctx)
		resp, err := n.cli.Get(gctx, holdsPrefix+n.cfg.Name+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if _, ok := now[string(kv.Key)]; !ok {
				deletes = append(deletes, string(kv.Key))
			}
		}
	}
	if err := n.rewrite(ctx, lease, puts, deletes); err != nil {
		return err
	}
	n.mu.Lock()
	n.held = now
	n.mu.Unlock()
	return nil
}

// reconcile makes the cluster's records of this node's sandboxes what the
// node runs, under lease. The node's runtime is the truth: a sandbox that
// runs here is recorded again (its old record, if its lease expired, went
// with it), and a record of this node with no sandbox here is deleted.
// But a node away longer than ForgetAfter (dead, cut off, or its etcd
// refusing it) comes back to a cluster that forgot its sandboxes for good:
// clients were told they are gone, so they are killed. What was recorded
// as another node's is killed here whatever the time.
func (n *Node) reconcile(ctx context.Context, lease clientv3.LeaseID) error {
	local, err := n.mgr.Local(ctx)
	if err != nil {
		return err
	}
	gctx, cancel := n.op(ctx)
	resp, err := n.cli.Get(gctx, sandboxesPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
	}
	first := !n.joined(resp.Header.ClusterId)
	away := n.away()
	recorded := map[string]sandboxRecord{}
	for _, kv := range resp.Kvs {
		var r sandboxRecord
		if json.Unmarshal(kv.Value, &r) == nil {
			recorded[r.ID] = r
		}
	}
	var evict []string
	puts := map[string]string{}
	for _, sb := range local {
		r, ok := recorded[sb.ID]
		delete(recorded, sb.ID)
		switch {
		case ok && r.Node != n.cfg.Name:
			n.log.Warn("cluster: a sandbox here is recorded as another node's; killing it here", "id", sb.ID, "owner", r.Node)
			evict = append(evict, sb.ID)
		case ok || first || away < n.cfg.ForgetAfter:
			rec, err := encodeRecord(n.cfg.Name, sb)
			if err != nil {
				// Made before the cap, or by hand: listed nowhere, routed
				// to by this node only.
				n.log.Warn("cluster: a sandbox's record is too large to publish", "id", sb.ID, "err", err)
				continue
			}
			puts[sandboxesPrefix+sb.ID] = rec
		default:
			evict = append(evict, sb.ID)
		}
	}
	var deletes []string
	for id, r := range recorded {
		if r.Node == n.cfg.Name {
			deletes = append(deletes, sandboxesPrefix+id)
		}
	}
	if err := n.rewrite(ctx, lease, puts, deletes); err != nil {
		return err
	}
	if len(evict) > 0 {
		n.log.Warn("cluster: killing sandboxes the cluster forgot while this node was away", "count", len(evict), "away", away.Round(time.Second), "forget after", n.cfg.ForgetAfter)
		for _, id := range evict {
			if err := n.mgr.Evict(ctx, id); err != nil && !errdefs.IsNotFound(err) {
				n.log.Warn("cluster: evict", "id", id, "err", err)
			}
		}
	}
	n.markJoined(resp.Header.ClusterId)
	return nil
}

// rewrite puts each of puts (key → record), bound to lease, and deletes
// each of deletes: reconciling's writes, in transactions of up to
// txnOps operations (one call per record made a node holding thousands of
// snapshots outlive its lease while it joined: review 26).
func (n *Node) rewrite(ctx context.Context, lease clientv3.LeaseID, puts map[string]string, deletes []string) error {
	ops := make([]clientv3.Op, 0, len(puts)+len(deletes))
	for key, rec := range puts {
		ops = append(ops, clientv3.OpPut(key, rec, clientv3.WithLease(lease)))
	}
	for _, key := range deletes {
		ops = append(ops, clientv3.OpDelete(key))
	}
	for len(ops) > 0 {
		batch := ops[:min(len(ops), txnOps)]
		ops = ops[len(batch):]
		tctx, cancel := n.op(ctx)
		_, err := n.cli.Txn(tctx).Then(batch...).Commit()
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// txnOps is the most operations rewrite puts in one transaction: etcd's
// default --max-txn-ops.
const txnOps = 128

// away is how long the node has held no lease: since its last renewal, in
// this process or (after a restart) as DataDir/cluster/renewed says; 0
// when it never held one.
func (n *Node) away() time.Duration {
	n.mu.Lock()
	last := n.lastRenew
	n.mu.Unlock()
	if last.IsZero() {
		b, err := os.ReadFile(n.renewedPath())
		if err != nil {
			return 0
		}
		if err := last.UnmarshalText([]byte(strings.TrimSpace(string(b)))); err != nil {
			return 0
		}
	}
	return time.Since(last)
}

func (n *Node) renewedPath() string { return filepath.Join(n.cfg.DataDir, "cluster", "renewed") }

// markRenewed records when the lease was last renewed, for away after a
// restart.
func (n *Node) markRenewed() {
	n.mu.Lock()
	last := n.lastRenew
	n.mu.Unlock()
	b, _ := last.UTC().MarshalText()
	os.MkdirAll(filepath.Dir(n.renewedPath()), 0o700)
	if err := os.WriteFile(n.renewedPath(), append(b, '\n'), 0o600); err != nil {
		n.log.Debug("cluster: remember the renewal", "err", err)
	}
}

// joined reports whether this node has joined etcd cluster id before.
func (n *Node) joined(id uint64) bool {
	b, err := os.ReadFile(filepath.Join(n.cfg.DataDir, "cluster", "joined"))
	return err == nil && strings.TrimSpace(string(b)) == strconv.FormatUint(id, 16)
}

func (n *Node) markJoined(id uint64) {
	dir := filepath.Join(n.cfg.DataDir, "cluster")
	os.MkdirAll(dir, 0o700)
	if err := os.WriteFile(filepath.Join(dir, "joined"), []byte(strconv.FormatUint(id, 16)+"\n"), 0o600); err != nil {
		n.log.Warn("cluster: remember the join", "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// loadAverage is the host's 1-minute load average.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// memoryUsedMB is the host's memory in use (total less available).
func memoryUsedMB() int {
	total, avail := meminfo("MemTotal:"), meminfo("MemAvailable:")
	return int((total - avail) >> 10)
}

// MemoryTotalMB is the host's memory.
func MemoryTotalMB() int { return int(meminfo("MemTotal:") >> 10) }

// meminfo reads a /proc/meminfo field, in KiB.
func meminfo(field string) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}
