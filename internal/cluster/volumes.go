package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Volumes live on the node that made them: their files are on its disk.
// The cluster records where each is (volumes/<id>, bound to the node's
// lease, as its sandboxes are), so that any node routes a volume's calls
// to its node, lists every node's volumes, and places a sandbox that
// mounts volumes on the node that holds them.

const volumesPrefix = Prefix + "volumes/"

// volNamesPrefix holds volnames/<key>/<name> → volume id: a name is a
// key's once in the cluster, taken in the same transaction that records
// the volume (review 26: two creates of one name through two nodes at
// once both succeeded, and a mount by that name picked either).
const volNamesPrefix = Prefix + "volnames/"

// volNameKey is the etcd key that holds key's volume name.
func volNameKey(key, name string) string {
	return volNamesPrefix + url.PathEscape(key) + "/" + url.PathEscape(name)
}

// volumeRecord is a volume in etcd.
type volumeRecord struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Key  string `json:"key"`
	Node string `json:"node"`
	// NameTaken: another volume of the key holds Name (taken while this
	// one's node was away); a mount by the name is never this one.
	NameTaken bool `json:"name_taken,omitempty"`
}

// takeVolumeName binds rec's name to rec's volume under lease if the name
// is free or already the volume's; it reports whether it is the volume's.
func (n *Node) takeVolumeName(ctx context.Context, lease clientv3.LeaseID, rec volumeRecord) (bool, error) {
	key := volNameKey(rec.Key, rec.Name)
	tctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, rec.ID, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil || resp.Succeeded {
		return err == nil, err
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || string(kvs[0].Value) != rec.ID {
		return false, nil
	}
	// Ours, under an older lease: bound to this one, unless it changed.
	_, err = n.cli.Txn(tctx).If(clientv3.Compare(clientv3.Value(key), "=", rec.ID)).
		Then(clientv3.OpPut(key, rec.ID, clientv3.WithLease(lease))).Commit()
	return err == nil, err
}

// VolumeInfo is a volume of the cluster: its id, name and node.
type VolumeInfo struct {
	ID, Name, Node string
}

// PutVolume records volume id (named name, of key) as this node's.
func (n *Node) PutVolume(ctx context.Context, id, name, key string) error {
	lease := n.currentLease()
	if lease == 0 {
		return fmt.Errorf("cluster: record volume %s: %w", id, errdefs.ErrUnavailable)
	}
	rec := volumeRecord{ID: id, Name: name, Key: key, Node: n.cfg.Name}
	nameKey := volNameKey(key, name)
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(nameKey), "=", 0)).
		Then(clientv3.OpPut(nameKey, id, clientv3.WithLease(lease)), clientv3.OpPut(volumesPrefix+id, mustJSON(rec), clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		return fmt.Errorf("cluster: record volume %s: %v: %w", id, err, errdefs.ErrUnavailable)
	}
	if !resp.Succeeded {
		return fmt.Errorf("volume %q exists already: %w", name, errdefs.ErrAlreadyExists)
	}
	n.mu.Lock()
	n.vols[id] = rec
	n.mu.Unlock()
	return nil
}

// DeleteVolume forgets volume id, and gives its name back.
func (n *Node) DeleteVolume(ctx context.Context, id string) error {
	n.mu.Lock()
	rec, ok := n.vols[id]
	delete(n.vols, id)
	n.mu.Unlock()
	ctx, cancel := n.op(ctx)
	defer cancel()
	if !ok {
		resp, err := n.cli.Get(ctx, volumesPrefix+id)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 || json.Unmarshal(resp.Kvs[0].Value, &rec) != nil {
			return nil
		}
	}
	nameKey := volNameKey(rec.Key, rec.Name)
	_, err := n.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(nameKey), "=", id)).
		Then(clientv3.OpDelete(volumesPrefix+id), clientv3.OpDelete(nameKey)).
		Else(clientv3.OpDelete(volumesPrefix + id)).Commit()
	return err
}

// VolumeOwner finds the node that holds volume id; found is false when the
// cluster records none.
func (n *Node) VolumeOwner(ctx context.Context, id string) (p Peer, found bool, err error) {
	return n.lookup(ctx, volumesPrefix+id, func() (string, bool) {
		r, ok := n.vols[id]
		return r.Node, ok
	}, func(b []byte) (string, error) {
		var r volumeRecord
		err := json.Unmarshal(b, &r)
		return r.Node, err
	})
}

// VolumesNode finds the node that holds every volume of key named in
// names. found is false when the cluster does not know them all, or they
// are on different nodes (no node can mount them all).
func (n *Node) VolumesNode(key string, names []string) (p Peer, found bool) {
	n.mu.Lock()
	node := ""
	for _, name := range names {
		at := ""
		for _, r := range n.vols {
			if r.Key == key && r.Name == name && !r.NameTaken {
				at = r.Node
				break
			}
		}
		if at == "" || (node != "" && at != node) {
			n.mu.Unlock()
			return Peer{}, false
		}
		node = at
	}
	n.mu.Unlock()
	if node == "" {
		return Peer{}, false
	}
	return n.peer(node), true
}

// ListVolumes is every volume of key in the cluster, by name, read from
// etcd at once.
func (n *Node) ListVolumes(ctx context.Context, key string) ([]VolumeInfo, error) {
	ctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(ctx, volumesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: list volumes: %v: %w", err, errdefs.ErrUnavailable)
	}
	var out []VolumeInfo
	for _, kv := range resp.Kvs {
		var r volumeRecord
		if json.Unmarshal(kv.Value, &r) == nil && r.Key == key {
			out = append(out, VolumeInfo{ID: r.ID, Name: r.Name, Node: r.Node})
		}
	}
	slices.SortFunc(out, func(a, b VolumeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// reconcileVolumes records this node's volumes under lease, and deletes
// records of volumes it no longer has.
func (n *Node) reconcileVolumes(ctx context.Context, lease clientv3.LeaseID) error {
	local, err := n.store.ListVolumes(ctx, "")
	if err != nil {
		return err
	}
	gctx, cancel := n.op(ctx)
	resp, err := n.cli.Get(gctx, volumesPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, kv := range resp.Kvs {
		var r volumeRecord
		if json.Unmarshal(kv.Value, &r) == nil && r.Node == n.cfg.Name {
			mine[r.ID] = true
		}
	}
	puts := map[string]string{}
	for _, v := range local {
		delete(mine, v.ID)
		rec := volumeRecord{ID: v.ID, Name: v.Name, Key: v.KeyID, Node: n.cfg.Name}
		// The name is this volume's again only if no other volume took it
		// while this node was away (its name's record went with its
		// lease). One that lost its name is listed, and reached by id,
		// but never mounted by the name (review 26: two volumes of one
		// name, and mounts by it landed on either).
		ok, err := n.takeVolumeName(ctx, lease, rec)
		if err != nil {
			return err
		}
		if !ok {
			rec.NameTaken = true
			n.log.Warn("cluster: another volume took this volume's name while the node was away; it is mounted by that name no more", "id", v.ID, "name", v.Name)
		}
		puts[volumesPrefix+v.ID] = mustJSON(rec)
	}
	var deletes []string
	for id := range mine {
		// Its name's record, if another volume does not hold it by now,
		// goes with the lease it was written under.
		deletes = append(deletes, volumesPrefix+id)
	}
	return n.rewrite(ctx, lease, puts, deletes)
}
