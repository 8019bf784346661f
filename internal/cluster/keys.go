package cluster

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// API keys are the cluster's: a key added or made on any node works on
// every node, under one ID (sandboxes are listed by their key's ID). Each
// node pushes the keys it holds (keyLoop, SyncKeys) and imports the
// cluster's (watchLoop); the first node to record a key gives it its ID.

// keyEvery is how often a node pushes keys made or revoked on it.
const keyEvery = 5 * time.Second

func (n *Node) keyLoop() {
	t := time.NewTicker(keyEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			if err := n.SyncKeys(n.ctx); err != nil {
				n.log.Debug("cluster: push API keys", "err", err)
			}
		}
	}
}

// SyncKeys pushes this node's API keys to the cluster and takes the
// cluster's ID for any it recorded first under another. `hutch serve`
// calls it before it serves, so that its first answers already agree with
// the other nodes.
func (n *Node) SyncKeys(ctx context.Context) error {
	local, err := n.store.ExportKeys(ctx)
	if err != nil {
		return err
	}
	for _, k := range local {
		key := keysPrefix + hex.EncodeToString(k.Hash)
		rec := keyRecord{ID: k.ID, Name: k.Name, Prefix: k.Prefix, Hash: k.Hash, Created: k.Created, Revoked: k.Revoked, Role: string(k.Role)}
		octx, cancel := n.op(ctx)
		resp, err := n.cli.Txn(octx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, mustJSON(rec))).
			Else(clientv3.OpGet(key)).
			Commit()
		cancel()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			continue
		}
		var theirs keyRecord
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 0 || json.Unmarshal(kvs[0].Value, &theirs) != nil {
			continue
		}
		if k.Revoked != nil && theirs.Revoked == nil {
			// Revoked here: revoked everywhere.
			theirs.Revoked = k.Revoked
			octx, cancel := n.op(ctx)
			_, err := n.cli.Put(octx, key, mustJSON(theirs))
			cancel()
			if err != nil {
				return err
			}
		}
		if theirs.ID != k.ID || (theirs.Revoked != nil && k.Revoked == nil) {
			n.importKey(ctx, theirs)
		}
	}
	return nil
}

// importKey makes this node hold key r as the cluster does.
func (n *Node) importKey(ctx context.Context, r keyRecord) {
	err := n.store.ImportKey(ctx, store.KeyRecord{Key: store.Key{ID: r.ID, Name: r.Name, Prefix: r.Prefix, Created: r.Created, Revoked: r.Revoked, Role: store.Role(r.Role)}, Hash: r.Hash})
	if err != nil {
		n.log.Warn("cluster: import an API key", "id", r.ID, "err", err)
	}
}
