package sandbox

import (
	"context"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// Template labels of sandboxes whose template name is not one to put in
// a metric's label (see templateLabel). Neither is a valid template name,
// so neither can be mistaken for one.
const (
	// LabelSnapshot stands for the name of a user's snapshot.
	LabelSnapshot = "(snapshot)"
	// LabelRemoved stands for a template that no longer exists.
	LabelRemoved = "(removed)"
)

// Census is what the manager holds now, for the metrics read at each
// scrape (metrics.NewCensusCollector): its sandboxes by state and
// template as the API reports them (its store: in a cluster, this node's
// own), its warm pools, and the CPUs and memory its sandboxes' limits
// promise. Safe for concurrent use.
func (m *Manager) Census(ctx context.Context) (metrics.Census, error) {
	counts, err := m.store.CountSandboxes(ctx)
	if err != nil {
		return metrics.Census{}, err
	}
	c := metrics.Census{MaxSandboxes: m.maxTotal}
	labels := map[string]string{}
	for _, n := range counts {
		label, ok := labels[n.TemplateID]
		if !ok {
			label = m.templateLabel(n.TemplateID)
			labels[n.TemplateID] = label
		}
		c.Sandboxes = append(c.Sandboxes, metrics.SandboxCount{State: n.State, Template: label, Count: n.Count})
	}

	var running, frozen, warm int
	m.mu.Lock()
	for _, l := range m.live {
		// Builds' sandboxes (internal) run too: they count here, not in
		// the sandboxes above, which are the API's.
		if l.paused {
			frozen++
		} else {
			running++
		}
	}
	for _, p := range m.pools {
		ready := int(p.idle.Load())
		warm += ready
		c.Pools = append(c.Pools, metrics.PoolCount{Template: p.template, Ready: ready, Size: p.size})
	}
	m.mu.Unlock()
	slices.SortFunc(c.Pools, func(a, b metrics.PoolCount) int { return strings.Compare(a.Template, b.Template) })
	// The limits every sandbox gets (Limits in Create): at least one CPU;
	// no memory limit promises none.
	cpus := max(m.resources.CPUs, 1)
	c.CPUsCommitted = float64(running+warm) * cpus
	// One paused with its memory still holds it.
	c.MemoryCommittedBytes = uint64(running+warm+frozen) * uint64(max(m.resources.MemoryBytes, 0))
	return c, nil
}

// templateLabel is the template label of sandboxes of template name: the
// name, for a template that exists and is no user's snapshot. A snapshot's
// name is its taker's to choose, one per snapshot, so its sandboxes share
// LabelSnapshot (a metric keeps a series per label value, and those must
// stay few); those of a template removed since share LabelRemoved.
func (m *Manager) templateLabel(name string) string {
	t, err := m.templates.Get(name)
	switch {
	case err != nil:
		// Gone (or unreadable now: not worth failing a scrape for, nor
		// worth a series of its own).
		return LabelRemoved
	case t.Snapshot != nil && t.Snapshot.Kind == template.SnapshotUser:
		return LabelSnapshot
	}
	return name
}
