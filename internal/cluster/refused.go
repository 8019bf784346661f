package cluster

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Refused tells the node that node name's cluster listener refused a
// connection: its host answers and nothing listens, so the process is
// gone (a partition times out instead). When its record has not changed
// for a whole lease either, its lease is revoked now rather than left to
// run out: when the dead node led etcd, the election that follows renews
// every lease in full, and its sandboxes answered 502 for up to 6.5 s of
// a 3 s lease before their 404. A node that was only restarting takes a
// new lease and records its sandboxes again, as after any lost lease.
func (n *Node) Refused(name string) {
	n.mu.Lock()
	rec, ok := n.nodes[name]
	stale := time.Since(n.nodeSeen[name]) > n.cfg.LeaseTTL
	if !ok || rec.Lease == 0 || !stale || name == n.cfg.Name || n.revoked[rec.Lease] {
		n.mu.Unlock()
		return
	}
	n.revoked[rec.Lease] = true
	n.mu.Unlock()
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		ctx, cancel := n.op(n.ctx)
		defer cancel()
		if _, err := n.cli.Revoke(ctx, clientv3.LeaseID(rec.Lease)); err != nil {
			n.mu.Lock()
			delete(n.revoked, rec.Lease) // the next refusal tries again
			n.mu.Unlock()
			n.log.Info("cluster: revoke a dead node's lease", "dead", name, "err", err)
			return
		}
		n.log.Warn("cluster: a node's listener refuses connections and its record is a lease old: its lease is revoked", "dead", name)
	}()
}
