package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
)

// This file is the Node as the manager's sandbox.Registry.

// Claim records new sandbox sb as this node's, under the node's lease,
// unless its id is recorded already.
func (n *Node) Claim(ctx context.Context, sb *sandbox.Sandbox) error {
	lease := n.currentLease()
	if lease == 0 {
		return sandbox.ErrNoLease
	}
	key := sandboxesPrefix + sb.ID
	rec, err := encodeRecord(n.cfg.Name, sb)
	if err != nil {
		return err
	}
	// Not cut short by the client: a write cancelled after etcd took it
	// would leave a record of a sandbox the manager then drops.
	ctx, cancel := n.op(context.WithoutCancel(ctx))
	defer cancel()
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, rec, clientv3.WithLease(lease))).
		Commit()
	if err != nil {
		// The write may have been applied all the same (a timeout):
		// take back what is exactly this claim, never another's record.
		dctx, dcancel := n.op(context.WithoutCancel(ctx))
		_, derr := n.cli.Txn(dctx).If(clientv3.Compare(clientv3.Value(key), "=", rec)).Then(clientv3.OpDelete(key)).Commit()
		dcancel()
		if derr != nil {
			n.log.Warn("cluster: a failed claim may have left a record until the node's lease ends", "id", sb.ID, "err", derr)
		}
		return fmt.Errorf("cluster: record sandbox %s: %v: %w", sb.ID, err, errdefs.ErrUnavailable)
	}
	if !resp.Succeeded {
		return fmt.Errorf("cluster: sandbox %s is recorded already: %w", sb.ID, errdefs.ErrAlreadyExists)
	}
	n.mu.Lock()
	n.owners[sb.ID] = n.cfg.Name
	n.puts[sb.ID] = lastPut{time.Now(), sb.State}
	n.mu.Unlock()
	return nil
}

// MaxRecord is the most a sandbox's record in etcd may take, encoded:
// every record is read by every list, and etcd holds them all in one
// file, which a tenant must not be able to fill.
const MaxRecord = 8 << 10

// encodeRecord is sb's record as this node's, or an error matching
// errdefs.ErrInvalidArgument when it is too large.
func encodeRecord(node string, sb *sandbox.Sandbox) (string, error) {
	rec := mustJSON(recordOf(node, sb))
	if len(rec) > MaxRecord {
		return "", fmt.Errorf("the sandbox's metadata is too large for the cluster's registry: its record takes %d bytes, at most %d: %w", len(rec), MaxRecord, errdefs.ErrInvalidArgument)
	}
	return rec, nil
}

// CheckMetadata refuses, before a create starts anything, metadata whose
// record could not fit MaxRecord (an error matching
// errdefs.ErrInvalidArgument).
func CheckMetadata(meta map[string]string) error {
	if n := len(mustJSON(meta)); n > MaxRecord-1024 {
		return fmt.Errorf("metadata takes %d bytes encoded; a cluster's sandboxes may have at most %d: %w", n, MaxRecord-1024, errdefs.ErrInvalidArgument)
	}
	return nil
}

// putEvery is how often one sandbox's record is rewritten at most while
// its state stays the same: a client that refreshes a timeout in a loop
// must not turn each call into a write every member keeps until the next
// compaction.
const putEvery = time.Second

// lastPut is when a sandbox's record was last written, and its state.
type lastPut struct {
	at    time.Time
	state sandbox.State
}

// Put records a change to sandbox sb of this node: at once when its state
// changed, else at most once a putEvery, the last change winning.
func (n *Node) Put(ctx context.Context, sb *sandbox.Sandbox) error {
	if n.currentLease() == 0 {
		return sandbox.ErrNoLease // reconcile records it under the next lease
	}
	n.mu.Lock()
	last, seen := n.puts[sb.ID]
	if wait := putEvery - time.Since(last.at); seen && last.state == sb.State && wait > 0 {
		_, queued := n.pending[sb.ID]
		n.pending[sb.ID] = sb
		n.mu.Unlock()
		if !queued {
			time.AfterFunc(wait, func() { n.flushPut(sb.ID) })
		}
		return nil
	}
	n.puts[sb.ID] = lastPut{time.Now(), sb.State}
	delete(n.pending, sb.ID)
	n.mu.Unlock()
	return n.update(ctx, sb)
}

// flushPut writes the change to sandbox id that Put held back.
func (n *Node) flushPut(id string) {
	n.mu.Lock()
	sb, ok := n.pending[id]
	delete(n.pending, id)
	if ok {
		n.puts[id] = lastPut{time.Now(), sb.State}
	}
	n.mu.Unlock()
	if ok && n.ctx.Err() == nil {
		if err := n.update(n.ctx, sb); err != nil {
			n.log.Warn("cluster: record a change", "id", id, "err", err)
		}
	}
}

// update rewrites the record of sandbox sb, if it has one: a change that
// comes after the sandbox was removed never records it again.
func (n *Node) update(ctx context.Context, sb *sandbox.Sandbox) error {
	lease := n.currentLease()
	if lease == 0 {
		return sandbox.ErrNoLease
	}
	rec, err := encodeRecord(n.cfg.Name, sb)
	if err != nil {
		return err
	}
	key := sandboxesPrefix + sb.ID
	ctx, cancel := n.op(ctx)
	defer cancel()
	_, err = n.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpPut(key, rec, clientv3.WithLease(lease))).Commit()
	return err
}

// Delete forgets sandbox id of this node.
func (n *Node) Delete(ctx context.Context, id string) error {
	n.mu.Lock()
	delete(n.owners, id)
	delete(n.puts, id)
	delete(n.pending, id)
	n.mu.Unlock()
	ctx, cancel := n.op(ctx)
	defer cancel()
	_, err := n.cli.Delete(ctx, sandboxesPrefix+id)
	return err
}

// List is a page of the cluster's sandboxes f selects, read from etcd at
// once (a list right after a create through any node shows it). Pages are
// in start order (newest first unless f.Ascending), ties by id; a page's
// token names the last sandbox it showed, so sandboxes made or removed
// meanwhile do not shift the pages after it.
func (n *Node) List(ctx context.Context, f sandbox.ListFilter) ([]*sandbox.Sandbox, string, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 100)
	var after *cursor
	if f.NextToken != "" {
		c, err := decodeCursor(f.NextToken)
		if err != nil {
			return nil, "", err
		}
		after = &c
	}
	gctx, cancel := n.op(ctx)
	resp, err := n.cli.Get(gctx, sandboxesPrefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return nil, "", fmt.Errorf("cluster: list sandboxes: %v: %w", err, errdefs.ErrUnavailable)
	}
	var all []*sandbox.Sandbox
	for _, kv := range resp.Kvs {
		var r sandboxRecord
		if json.Unmarshal(kv.Value, &r) != nil {
			continue
		}
		if sb := r.sandbox(); selects(f, sb) {
			all = append(all, sb)
		}
	}
	less := func(a, b *sandbox.Sandbox) int {
		if c := a.StartedAt.Compare(b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	}
	if f.Ascending {
		slices.SortFunc(all, less)
	} else {
		slices.SortFunc(all, func(a, b *sandbox.Sandbox) int { return less(b, a) })
	}
	start := 0
	if after != nil {
		start = len(all)
		for i, sb := range all {
			c := cursor{sb.StartedAt.UnixNano(), sb.ID}
			if (f.Ascending && c.after(*after)) || (!f.Ascending && after.after(c)) {
				start = i
				break
			}
		}
	}
	page := all[start:]
	next := ""
	if len(page) > limit {
		page = page[:limit]
		last := page[len(page)-1]
		next = cursor{last.StartedAt.UnixNano(), last.ID}.encode()
	}
	return page, next, nil
}

// selects reports whether f keeps sb.
func selects(f sandbox.ListFilter, sb *sandbox.Sandbox) bool {
	if f.KeyID != "" && sb.KeyID != f.KeyID {
		return false
	}
	if len(f.States) > 0 && !slices.Contains(f.States, sb.State) {
		return false
	}
	if !f.StartedAfter.IsZero() && sb.StartedAt.Before(f.StartedAfter) {
		return false
	}
	if f.Template != "" && sb.TemplateID != f.Template && sb.Alias != f.Template {
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// cursor is a position in a list: a sandbox's start and id.
type cursor struct {
	nanos int64
	id    string
}

// after reports whether c comes after d in ascending order.
func (c cursor) after(d cursor) bool {
	return c.nanos > d.nanos || c.nanos == d.nanos && c.id > d.id
}

func (c cursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.nanos, 10) + "." + c.id))
}

func decodeCursor(tok string) (cursor, error) {
	bad := fmt.Errorf("invalid next token %q: %w", tok, errdefs.ErrInvalidArgument)
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return cursor{}, bad
	}
	ns, id, ok := strings.Cut(string(b), ".")
	nanos, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return cursor{}, bad
	}
	return cursor{nanos, id}, nil
}

// NodeStatus is a node as `hutch cluster status` shows it.
type NodeStatus struct {
	NodeRecord
	// Self marks the node that answered.
	Self bool
	// LeaseLeft is how long the node's lease has left; negative when it
	// could not be read.
	LeaseLeft time.Duration
}

// Nodes is every node of the cluster, by name, read from etcd at once.
func (n *Node) Nodes(ctx context.Context) ([]NodeStatus, error) {
	gctx, cancel := n.op(ctx)
	defer cancel()
	resp, err := n.cli.Get(gctx, nodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("cluster: list nodes: %v: %w", err, errdefs.ErrUnavailable)
	}
	var out []NodeStatus
	for _, kv := range resp.Kvs {
		var r NodeRecord
		if json.Unmarshal(kv.Value, &r) != nil {
			continue
		}
		n.mu.Lock()
		for _, names := range n.holds[r.Name] { // from the mirror: not in the record
			r.Templates = append(r.Templates, names...)
		}
		n.mu.Unlock()
		st := NodeStatus{NodeRecord: r, Self: r.Name == n.cfg.Name, LeaseLeft: -1}
		if ttl, err := n.cli.TimeToLive(gctx, clientv3.LeaseID(r.Lease)); err == nil && ttl.TTL >= 0 {
			st.LeaseLeft = time.Duration(ttl.TTL) * time.Second
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b NodeStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

var _ sandbox.Registry = (*Node)(nil)

// copyNodes is a snapshot of the nodes the watch mirrors.
func (n *Node) copyNodes() map[string]NodeRecord {
	n.mu.Lock()
	defer n.mu.Unlock()
	return maps.Clone(n.nodes)
}

// holding reports whether node r holds template ref (a name, name:tag or
// build id): by its holds/ records in the mirror, or by r.Templates.
func (n *Node) holding(r NodeRecord, ref string) bool {
	if holds(r, ref) {
		return true
	}
	name, _, _ := strings.Cut(ref, ":")
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.holds[r.Name][ref]; ok { // a build id
		return true
	}
	for _, names := range n.holds[r.Name] {
		if slices.Contains(names, name) || slices.Contains(names, ref) {
			return true
		}
	}
	return false
}
