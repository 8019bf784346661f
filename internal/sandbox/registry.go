package sandbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Registry is where a cluster of Hutch nodes records every node's
// sandboxes (internal/cluster keeps it in etcd). A single node has none:
// its store is the whole truth. With one, the manager still keeps its own
// records (the node's runtime is the truth for its sandboxes) and tells
// the registry of each change, and List reads the registry, so that any
// node lists the sandboxes of all.
type Registry interface {
	// Ready is nil while this node may take new sandboxes (it holds its
	// lease); otherwise an error matching errdefs.ErrUnavailable.
	Ready() error
	// Claim records a new sandbox of this node; it fails, matching
	// errdefs.ErrAlreadyExists, when the id is recorded already.
	Claim(ctx context.Context, sb *Sandbox) error
	// Put records a change to a sandbox of this node.
	Put(ctx context.Context, sb *Sandbox) error
	// Delete forgets a sandbox of this node.
	Delete(ctx context.Context, id string) error
	// List is Manager.List across the cluster.
	List(ctx context.Context, f ListFilter) ([]*Sandbox, string, error)
}

// ErrNoLease is Create's error on a node of a cluster that holds no lease:
// the cluster could not reach the sandbox through it, nor see it die.
var ErrNoLease = fmt.Errorf("this node is not in touch with its cluster and takes no new sandboxes; retry through another node: %w", errdefs.ErrUnavailable)

// republish tells the registry, if any, of a change to sandbox id's
// record. A failure is logged, not returned: the record here is the truth,
// and the registry catches up when the cluster reconciles.
func (m *Manager) republish(ctx context.Context, id string) {
	if m.reg == nil {
		return
	}
	rec, err := m.store.GetSandbox(ctx, "", id)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			m.logger.Warn("registry: read a record to publish", "id", id, "err", err)
		}
		return
	}
	if err := m.reg.Put(ctx, fromRecord(&rec)); err != nil {
		m.logger.Warn("registry: publish a change", "id", id, "err", err)
	}
}

// Local is every sandbox this node records, running and paused, of every
// key: what a cluster publishes for this node when it reconciles.
func (m *Manager) Local(ctx context.Context) ([]*Sandbox, error) {
	recs, err := m.store.AllSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Sandbox, len(recs))
	for i := range recs {
		out[i] = fromRecord(&recs[i])
	}
	return out, nil
}

// Evict kills a sandbox of this node the cluster has forgotten (its
// record went with a lease this node lost), whoever's it is.
func (m *Manager) Evict(ctx context.Context, id string) error {
	m.logger.Info("evict a sandbox its cluster forgot", "id", id)
	return m.remove(ctx, id)
}

// Load is how busy this node is, for a cluster's placement.
type Load struct {
	// Running counts the sandboxes holding a slot (running or paused with
	// their memory); Creating, the creates starting one on demand; Warm,
	// the sandboxes waiting in the warm pools.
	Running, Creating, Warm int
	// WarmByTemplate is Warm by template.
	WarmByTemplate map[string]int
}

// Load says how busy this node is.
func (m *Manager) Load() Load {
	l := Load{Creating: int(m.cold.Load()), WarmByTemplate: map[string]int{}}
	m.mu.Lock()
	l.Running = m.run.all
	for name, p := range m.pools {
		n := int(p.idle.Load())
		l.Warm += n
		l.WarmByTemplate[name] = n
	}
	m.mu.Unlock()
	return l
}

// Ready is nil while this node may take new sandboxes: always on a single
// node; in a cluster, while the node holds its lease (Registry.Ready).
func (m *Manager) Ready() error {
	if m.reg == nil {
		return nil
	}
	return m.reg.Ready()
}
