package cluster

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Peer is a node a request can be sent to.
type Peer struct {
	Name string
	// URL is the node's cluster listener; "" when the node is gone (its
	// record expired) while its sandboxes' records have not yet.
	URL string
	// Self is this node.
	Self bool
}

// Owner finds the node that runs sandbox id. found is false when the
// cluster records no such sandbox. The mirror answers first; a sandbox it
// does not know yet (made through another node a moment ago) is read from
// etcd.
func (n *Node) Owner(ctx context.Context, id string) (p Peer, found bool, err error) {
	return n.lookup(ctx, sandboxesPrefix+id, func() (string, bool) {
		node, ok := n.owners[id]
		return node, ok
	}, func(b []byte) (string, error) {
		var r sandboxRecord
		err := json.Unmarshal(b, &r)
		return r.Node, err
	})
}

// lookup finds the node a record names: in the mirror (mirrored, called
// with the node's lock held), else at key in etcd (decoded by nodeOf).
// Anyone can name any id, before any key is checked: reads for ids the
// mirror lacks are rationed, so that a flood of made-up ids cannot flood
// etcd. Past the ration the answer is ErrBusy, never "not found": a
// sandbox made a moment ago may not be in the mirror yet.
func (n *Node) lookup(ctx context.Context, key string, mirrored func() (string, bool), nodeOf func([]byte) (string, error)) (Peer, bool, error) {
	n.mu.Lock()
	node, ok := mirrored()
	n.mu.Unlock()
	if !ok {
		if !n.misses.allow(ctx) {
			return Peer{}, false, ErrBusy
		}
		ctx, cancel := n.op(ctx)
		defer cancel()
		resp, err := n.cli.Get(ctx, key)
		if err != nil {
			return Peer{}, false, err
		}
		if len(resp.Kvs) == 0 {
			return Peer{}, false, nil
		}
		if node, err = nodeOf(resp.Kvs[0].Value); err != nil {
			return Peer{}, false, err
		}
	}
	return n.peer(node), true, nil
}

// peer is node name as a Peer.
func (n *Node) peer(name string) Peer {
	if name == n.cfg.Name {
		return Peer{Name: name, URL: n.cfg.URL, Self: true}
	}
	n.mu.Lock()
	rec, ok := n.nodes[name]
	n.mu.Unlock()
	if !ok {
		return Peer{Name: name}
	}
	return Peer{Name: name, URL: rec.URL}
}

// placeK is how many nodes a placement compares: E2B's best-of-K.
const placeK = 3

// Place orders the nodes a new sandbox of template ref should be tried on,
// best first: the least loaded of placeK nodes picked at random among
// those holding the template (every node, when none does), then the rest,
// least loaded first, for the retries. Sampling, rather than sorting all,
// keeps nodes reading slightly stale loads from all picking the same node.
// This node leads when it is not in the mirror yet, and when it is within
// keepLocal of the best.
func (n *Node) Place(ref string) []Peer {
	nodes := n.copyNodes()
	n.mu.Lock()
	seen := maps.Clone(n.nodeSeen)
	n.mu.Unlock()
	var all []NodeRecord
	for _, r := range nodes {
		// A record not refreshed for three rounds (by this node's clock)
		// is of a node that stopped, whose lease has not run out yet:
		// not worth a try.
		if r.Name != n.cfg.Name && time.Since(seen[r.Name]) > 3*refreshEvery+time.Second {
			continue
		}
		all = append(all, r)
	}
	if _, ok := nodes[n.cfg.Name]; !ok && n.Ready() == nil {
		all = append(all, NodeRecord{Name: n.cfg.Name, URL: n.cfg.URL, Templates: []string{ref}})
	}
	var eligible []NodeRecord
	for _, r := range all {
		if n.holding(r, ref) {
			eligible = append(eligible, r)
		}
	}
	if len(eligible) == 0 {
		eligible = all
	}
	recent := n.recentPlacements()
	scores := map[string]float64{}
	for _, r := range eligible {
		if r.Name == n.cfg.Name && n.mgr != nil {
			// This node's own load as of now, not as of its last record
			// (up to refreshEvery old) plus what it placed since: the two
			// overlap, and counted it busier than it was.
			l := n.mgr.Load()
			r.Load.Running, r.Load.Creating, r.Load.WarmBy = l.Running, l.Creating, l.WarmByTemplate
			scores[r.Name] = score(r, ref, 0)
			continue
		}
		scores[r.Name] = score(r, ref, recent[r.Name])
	}
	byScore := func(a, b NodeRecord) int {
		switch sa, sb := scores[a.Name], scores[b.Name]; {
		case sa < sb:
			return -1
		case sa > sb:
			return 1
		}
		return 0
	}
	rand.Shuffle(len(eligible), func(i, j int) { eligible[i], eligible[j] = eligible[j], eligible[i] })
	k := min(placeK, len(eligible))
	slices.SortStableFunc(eligible[:k], byScore)
	if len(eligible) > 1 {
		slices.SortStableFunc(eligible[1:], byScore)
	}
	// This node goes first when it is within keepLocal of the best: a
	// create kept here saves the hop to another node (measured with three
	// nodes: two creates in three hopped, 8 ms more at p50). The margin
	// allows for the others' loads, read from records up to refreshEvery
	// old, lagging this node's own.
	if i := slices.IndexFunc(eligible, func(r NodeRecord) bool { return r.Name == n.cfg.Name }); i > 0 &&
		scores[n.cfg.Name] <= scores[eligible[0].Name]+keepLocal(slotsOf(eligible[i])) {
		self := eligible[i]
		copy(eligible[1:i+1], eligible[:i])
		eligible[0] = self
	}
	out := make([]Peer, 0, len(eligible))
	for _, r := range eligible {
		out = append(out, Peer{Name: r.Name, URL: r.URL, Self: r.Name == n.cfg.Name})
	}
	if len(out) > 0 {
		n.placedOn(out[0].Name)
	}
	return out
}

// placedOn counts a create this node sent to node name: until that node's
// record shows it (it refreshes every refreshEvery), placement adds it to
// the node's load, or a burst of creates would all go to the node that
// looked idlest.
func (n *Node) placedOn(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.placed = append(n.placed, placement{name, time.Now()})
}

// recentPlacements counts, by node, the creates sent there lately.
func (n *Node) recentPlacements() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	cut := time.Now().Add(-2 * refreshEvery)
	i := 0
	for i < len(n.placed) && n.placed[i].at.Before(cut) {
		i++
	}
	n.placed = n.placed[i:]
	out := map[string]int{}
	for _, p := range n.placed {
		out[p.node]++
	}
	return out
}

type placement struct {
	node string
	at   time.Time
}

// holds reports whether node r holds template ref (a name, name:tag or
// build id).
func holds(r NodeRecord, ref string) bool {
	name, _, _ := strings.Cut(ref, ":")
	return slices.Contains(r.Templates, name) || slices.Contains(r.Templates, ref)
}

// score is how loaded node r is for a new sandbox of template ref, lower
// is better: the share of its sandbox slots in use (running, being
// created, and recent placements not yet in its record), plus what its CPU
// and memory are used past 80%, in coarse steps: a host busy with other
// work takes fewer sandboxes. A warm sandbox of the template counts half a slot off, since
// handing it out costs the node next to nothing.
func score(r NodeRecord, ref string, recent int) float64 {
	slots := slotsOf(r)
	used := float64(r.Load.Running + r.Load.Creating + recent)
	name, _, _ := strings.Cut(ref, ":")
	if r.Load.WarmBy[name] > 0 {
		used -= 0.5
	}
	s := used / float64(slots)
	// In coarse steps: a load average moves by itself from one sample to
	// the next, and fine differences in it would outweigh the slots.
	s += math.Floor(2*max(0, r.Load.CPU-0.8)) / 2
	if r.Capacity.MemoryMB > 0 {
		s += math.Floor(4*max(0, float64(r.Load.MemoryUsedMB)/float64(r.Capacity.MemoryMB)-0.8)) / 4
	}
	return s
}

// slotsOf is how many sandboxes node r takes: its cap, or its memory over
// a sandbox's; at least 1.
func slotsOf(r NodeRecord) int {
	slots := r.Capacity.Sandboxes
	if slots <= 0 && r.Capacity.SandboxMemoryMB > 0 {
		slots = r.Capacity.MemoryMB / r.Capacity.SandboxMemoryMB
	}
	return max(slots, 1)
}

// keepLocal is how much busier than the best node (in score: a share of
// its slots) the node that took a create may be and keep it: an eighth of
// its slots, one slot at least.
func keepLocal(slots int) float64 {
	return float64(max(1, slots/8)) / float64(slots)
}
