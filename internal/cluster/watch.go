package cluster

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchLoop mirrors the cluster's nodes and sandbox owners into memory and
// imports its API keys: a full read, then a watch from the revision after
// it. A watch that ends (a compaction, a member without a leader, a lost
// connection) starts over with a full read, so that nothing missed while
// it was cut off stays in the mirror.
func (n *Node) watchLoop() {
	for n.ctx.Err() == nil {
		rev, err := n.resync()
		if err != nil {
			n.log.Debug("cluster: read the cluster", "err", err)
			sleep(n.ctx, 500*time.Millisecond)
			continue
		}
		// WithRequireLeader ends the watch when this node's member loses
		// its leader (a partition): a mirror that may be stale is read
		// again.
		ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(n.ctx))
		for wresp := range n.cli.Watch(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wresp.Err() != nil {
				n.log.Debug("cluster: watch ended", "err", wresp.Err())
				break
			}
			for _, ev := range wresp.Events {
				n.apply(ev)
			}
		}
		cancel()
		n.mu.Lock()
		n.synced = false
		n.mu.Unlock()
	}
}

// resync reads every record into the mirror; it returns the revision read.
func (n *Node) resync() (int64, error) {
	ctx, cancel := n.op(n.ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	nodes := map[string]NodeRecord{}
	owners := map[string]string{}
	vols := map[string]volumeRecord{}
	held := map[string]map[string][]string{}
	var keys []keyRecord
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, nodesPrefix):
			var r NodeRecord
			if json.Unmarshal(kv.Value, &r) == nil {
				nodes[r.Name] = r
			}
		case strings.HasPrefix(k, sandboxesPrefix):
			var r sandboxRecord
			if json.Unmarshal(kv.Value, &r) == nil {
				owners[r.ID] = r.Node
			}
		case strings.HasPrefix(k, keysPrefix):
			var r keyRecord
			if json.Unmarshal(kv.Value, &r) == nil {
				keys = append(keys, r)
			}
		case strings.HasPrefix(k, volumesPrefix):
			var r volumeRecord
			if json.Unmarshal(kv.Value, &r) == nil {
				vols[r.ID] = r
			}
		case strings.HasPrefix(k, holdsPrefix):
			holding(held, k, kv.Value)
		}
	}
	n.mu.Lock()
	n.nodes, n.owners, n.vols, n.holds, n.synced = nodes, owners, vols, held, true
	for name := range nodes {
		n.nodeSeen[name] = time.Now()
	}
	n.mu.Unlock()
	for _, r := range keys {
		n.importKey(ctx, r)
	}
	return resp.Header.Revision, nil
}

// apply puts one change into the mirror.
func (n *Node) apply(ev *clientv3.Event) {
	k := string(ev.Kv.Key)
	put := ev.Type == mvccpb.PUT
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case strings.HasPrefix(k, nodesPrefix):
		name := strings.TrimPrefix(k, nodesPrefix)
		var r NodeRecord
		if put && json.Unmarshal(ev.Kv.Value, &r) == nil {
			n.nodes[name] = r
			n.nodeSeen[name] = time.Now()
		} else if !put {
			delete(n.nodes, name)
		}
	case strings.HasPrefix(k, sandboxesPrefix):
		id := strings.TrimPrefix(k, sandboxesPrefix)
		var r sandboxRecord
		if put && json.Unmarshal(ev.Kv.Value, &r) == nil {
			n.owners[id] = r.Node
		} else if !put {
			delete(n.owners, id)
		}
	case strings.HasPrefix(k, volumesPrefix):
		id := strings.TrimPrefix(k, volumesPrefix)
		var r volumeRecord
		if put && json.Unmarshal(ev.Kv.Value, &r) == nil {
			n.vols[id] = r
		} else if !put {
			delete(n.vols, id)
		}
	case strings.HasPrefix(k, holdsPrefix):
		if put {
			holding(n.holds, k, ev.Kv.Value)
		} else if node, build, ok := strings.Cut(strings.TrimPrefix(k, holdsPrefix), "/"); ok {
			delete(n.holds[node], build)
		}
	case strings.HasPrefix(k, keysPrefix) && put:
		var r keyRecord
		if json.Unmarshal(ev.Kv.Value, &r) == nil {
			go n.importKey(n.ctx, r)
		}
	}
}

func (n *Node) setOwner(id, node string) {
	n.mu.Lock()
	n.owners[id] = node
	n.mu.Unlock()
}

// holding adds holds/ record key (value: the build's names) to holds,
// by node and build.
func holding(holds map[string]map[string][]string, key string, value []byte) {
	node, build, ok := strings.Cut(strings.TrimPrefix(key, holdsPrefix), "/")
	var names []string
	if !ok || json.Unmarshal(value, &names) != nil {
		return
	}
	if holds[node] == nil {
		holds[node] = map[string][]string{}
	}
	holds[node][build] = names
}
