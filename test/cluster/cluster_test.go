package cluster_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestEmbeddedEtcd: three nodes, each with a member of an embedded etcd
// (three voters), act as one Hutch to the official JS SDK
// (acrossNodes), and `hutch cluster status` shows them.
func TestEmbeddedEtcd(t *testing.T) {
	w := newWorld(t, false)
	t.Run("SDK across nodes", w.acrossNodes)
	t.Run("hutch cluster status", w.clusterStatus)
}

// TestExternalEtcd: the same with the nodes on an external etcd (Debian's
// etcd-server on a host of its own).
func TestExternalEtcd(t *testing.T) {
	w := newWorld(t, true)
	t.Run("SDK across nodes", w.acrossNodes)
	t.Run("hutch cluster status", w.clusterStatus)
}

// acrossNodes: the official JS SDK creates a sandbox through every node;
// every node's list shows all three; and through one node's address the
// SDK runs a command in, and reaches a port (python3 -m http.server) of,
// each sandbox, those other nodes run among them.
func (w *world) acrossNodes(t *testing.T) {
	tag := fmt.Sprintf("across-%d", time.Now().UnixNano())
	var ids []string
	for _, n := range w.Nodes {
		out := w.sdkScript(t, n, `
import { Sandbox } from 'e2b'
const sbx = await Sandbox.create({ metadata: { suite: process.argv[1] }, timeoutMs: 600_000 })
console.log(sbx.sandboxId)
process.exit(0)
`, tag)
		ids = append(ids, out)
	}
	slices.Sort(ids)
	own := w.owners(t, ids...)
	for _, id := range ids {
		t.Logf("sandbox %s runs on %s", id, own[id].Name)
	}

	for _, n := range w.Nodes {
		out := w.sdkScript(t, n, `
import { Sandbox } from 'e2b'
const ids = []
const p = Sandbox.list({ query: { metadata: { suite: process.argv[1] } } })
while (p.hasNext) for (const sbx of await p.nextItems()) ids.push(sbx.sandboxId)
console.log(JSON.stringify(ids.sort()))
process.exit(0)
`, tag)
		var got []string
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %q", err, out)
		}
		if !slices.Equal(got, ids) {
			t.Errorf("Sandbox.list through %s: %v, want all three: %v", n.Name, got, ids)
		}
	}

	// Through a node that does not run them all: at least one sandbox is
	// another node's.
	via := w.Nodes[0]
	for _, n := range w.Nodes {
		if slices.ContainsFunc(ids, func(id string) bool { return own[id] != n }) {
			via = n
			break
		}
	}
	arg, _ := json.Marshal(ids)
	out := w.sdkScript(t, via, commandAndPort, string(arg))
	var got map[string]struct{ Stdout, Port string }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	for _, id := range ids {
		if g := got[id]; g.Stdout != "42\n" || g.Port != id {
			t.Errorf("sandbox %s (on %s) through %s: command printed %q (want \"42\\n\"), port 8000 answered %q (want %q)",
				id, own[id].Name, via.Name, g.Stdout, g.Port, id)
		}
	}
}

// clusterStatus: `hutch cluster status`, pointed at one node as at any
// Hutch (HUTCH_API_URL, HUTCH_API_KEY), shows the three nodes.
func (w *world) clusterStatus(t *testing.T) {
	for _, n := range []*hutchtest.ClusterNode{w.Nodes[0], w.Nodes[2]} {
		cmd := w.user.Command(n.Bin, "cluster", "status")
		cmd.Env = hutchtest.CleanEnv("HUTCH_API_URL="+n.URL(), "HUTCH_API_KEY="+hutchtest.TestKey)
		r := hutchtest.Run(t, cmd)
		if r.Code != 0 {
			t.Errorf("hutch cluster status through %s: %s", n.Name, r)
			continue
		}
		t.Logf("hutch cluster status through %s:\n%s", n.Name, r.Stdout)
		for _, name := range w.Names() {
			if !strings.Contains(r.Stdout, name) {
				t.Errorf("hutch cluster status through %s does not show %s:\n%s", n.Name, name, r.Stdout)
			}
		}
	}
}

// TestNodeKilled: a node killed with SIGKILL. Through the others its
// sandboxes answer E2B's edge 502 at once and are gone from the API (404)
// within the lease plus 3 s; creates through the others succeed all along;
// the others' sandboxes run on, untouched. Twice: the node killed is the
// one whose embedded etcd member leads (the others elect another), then
// one whose member follows.
func TestNodeKilled(t *testing.T) {
	t.Run("etcd leader", func(t *testing.T) { nodeKilled(t, true) })
	t.Run("etcd follower", func(t *testing.T) { nodeKilled(t, false) })
}

func nodeKilled(t *testing.T, leader bool) {
	w := newWorld(t, false)
	lead := w.etcdLeader(t)
	victim := w.Nodes[2]
	for _, n := range w.Nodes {
		if (n.Name == lead) == leader && lead != "" {
			victim = n
		}
	}
	// Sandboxes through every node, until the victim and another node
	// both run some (placement picks the node).
	var ids []string
	var own map[string]*hutchtest.ClusterNode
	spread := func() bool {
		return slices.ContainsFunc(ids, func(id string) bool { return own[id] == victim }) &&
			slices.ContainsFunc(ids, func(id string) bool { return own[id] != victim })
	}
	for i := 0; i < 9 && (i < 3 || !spread()); i++ {
		ids = append(ids, create(t, w.client, w.Nodes[i%3]))
		own = w.owners(t, ids...)
	}
	if !spread() {
		t.Fatalf("after %d creates, %s runs none or all of them", len(ids), victim.Name)
	}
	var gone, kept []string
	for _, id := range ids {
		if own[id] == victim {
			gone = append(gone, id)
		} else {
			kept = append(kept, id)
		}
	}
	var survivors []*hutchtest.ClusterNode
	for _, n := range w.Nodes {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	via := survivors[0]
	t.Logf("etcd's leader: %q; killing %s, which runs %v; %v run elsewhere", lead, victim.Name, gone, kept)
	if status, body, err := envdHealth(w.client, via, gone[0]); err != nil || status/100 != 2 {
		t.Fatalf("before the kill, envd of %s through %s: %d %s %v", gone[0], via.Name, status, body, err)
	}

	killed := time.Now()
	victim.Kill()
	deadline := killed.Add(w.Lease + 3*time.Second)

	// Creates through the survivors, in turn, every half second from the
	// kill to past the deadline: every one succeeds.
	var (
		mu      sync.Mutex
		created []string
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for i := 0; time.Now().Before(deadline.Add(time.Second)); i++ {
			if i > 0 {
				time.Sleep(500 * time.Millisecond)
			}
			n := survivors[i%len(survivors)]
			status, body, err := apiCall(w.client, n, "POST", "/sandboxes", createBody(t))
			if err != nil || status != http.StatusCreated {
				t.Errorf("create through %s %v after %s's kill: %d %s %v", n.Name, time.Since(killed).Round(time.Millisecond), victim.Name, status, body, err)
				continue
			}
			var sb struct{ SandboxID string }
			json.Unmarshal(body, &sb)
			mu.Lock()
			created = append(created, sb.SandboxID)
			mu.Unlock()
		}
	})

	// Its sandboxes' traffic answers E2B's 502 right away.
	for _, id := range gone {
		status, body, err := envdHealth(w.client, via, id)
		if err != nil || !edge502(status, body, id) {
			t.Errorf("envd of %s (on killed %s) through %s right after the kill: %d %s %v; want E2B's edge 502", id, victim.Name, via.Name, status, body, err)
		}
	}
	// The API: 502 until the lease ends, then 404, by the deadline.
	for _, id := range gone {
		var seen []string
		var last int
		found404 := pollUntil(deadline, func() bool {
			status, body, err := apiCall(w.client, via, "GET", "/sandboxes/"+id, "")
			if err != nil {
				seen = append(seen, err.Error())
				return false
			}
			if status != last {
				seen = append(seen, fmt.Sprintf("%v: %d %.200s", time.Since(killed).Round(time.Millisecond), status, body))
				last = status
			}
			if status != http.StatusNotFound && status != http.StatusBadGateway {
				t.Errorf("GET /sandboxes/%s through %s %v after the kill: %d %s; want 502 (its node is gone) or 404", id, via.Name, time.Since(killed).Round(time.Millisecond), status, body)
			}
			return status == http.StatusNotFound
		})
		t.Logf("GET /sandboxes/%s through %s after the kill: %v", id, via.Name, seen)
		if !found404 {
			t.Errorf("GET /sandboxes/%s (on killed %s) not 404 within lease (%v) + 3 s of the kill: %v", id, victim.Name, w.Lease, seen)
		}
		if status, body, err := envdHealth(w.client, via, id); err != nil || !edge502(status, body, id) {
			t.Errorf("envd of %s once its record is gone: %d %s %v; want E2B's edge 502", id, status, body, err)
		}
	}
	wg.Wait()
	for _, n := range survivors {
		got, err := listed(w.client, n)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range gone {
			if slices.Contains(got, id) {
				t.Errorf("%s still lists %s, of killed %s", n.Name, id, victim.Name)
			}
		}
		for _, id := range append(append([]string{}, kept...), created...) {
			if !slices.Contains(got, id) {
				t.Errorf("%s does not list %s", n.Name, id)
			}
		}
	}
	// The others' sandboxes, old and new, run commands through every
	// survivor.
	t.Logf("%d creates through %v while and after %s died", len(created), []string{survivors[0].Name, survivors[1].Name}, victim.Name)
	for _, n := range survivors {
		w.checkCommands(t, n, append(append([]string{}, kept...), created...)...)
	}
}

// TestPartition: a node cut off the LAN (its link down) answers creates
// with 503, while the majority goes on creating and running sandboxes;
// healed, within 5 s it accepts creates again and GET /cluster/nodes shows
// it, and what the cluster lists of its sandboxes is what it runs. Twice:
// the node cut is the one whose embedded etcd member leads (the majority
// elects another), then one whose member follows.
func TestPartition(t *testing.T) {
	t.Run("etcd leader", func(t *testing.T) { partition(t, true) })
	t.Run("etcd follower", func(t *testing.T) { partition(t, false) })
}

func partition(t *testing.T, leader bool) {
	w := newWorld(t, false)
	var ids []string
	for _, n := range w.Nodes {
		ids = append(ids, create(t, w.client, n))
	}
	own := w.owners(t, ids...)
	lead := w.etcdLeader(t)
	cut := w.Nodes[2]
	for _, n := range w.Nodes {
		if (n.Name == lead) == leader && lead != "" {
			cut = n
		}
	}
	var majority []*hutchtest.ClusterNode
	for _, n := range w.Nodes {
		if n != cut {
			majority = append(majority, n)
		}
	}
	var cutIDs, keptIDs []string
	for _, id := range ids {
		if own[id] == cut {
			cutIDs = append(cutIDs, id)
		} else {
			keptIDs = append(keptIDs, id)
		}
	}
	t.Logf("etcd's leader: %q; cutting %s, which runs %v; the majority runs %v", lead, cut.Name, cutIDs, keptIDs)
	// The cut node is reached from its own host: the only one that still
	// reaches it. A request waits as long as the JS SDK's does by
	// default (30 s).
	own3 := cut.Host.Client()
	own3.Timeout = 30 * time.Second

	partitioned := time.Now()
	if err := cut.Host.Partition(); err != nil {
		t.Fatal(err)
	}
	// A create through it answers 503 (the first and the next).
	for i := range 2 {
		sent := time.Now()
		status, body, err := apiCall(own3, cut, "POST", "/sandboxes", createBody(t))
		t.Logf("create %d through partitioned %s, sent %v after the partition, answered in %v: %d %s %v", i+1, cut.Name,
			sent.Sub(partitioned).Round(time.Millisecond), time.Since(sent).Round(time.Millisecond), status, body, err)
		if status != http.StatusServiceUnavailable {
			t.Errorf("create %d through partitioned %s: %d %s %v; want 503", i+1, cut.Name, status, body, err)
		}
	}

	// The majority: creates succeed, every sandbox it ran runs commands,
	// and it sees the cut node go.
	for _, n := range majority {
		keptIDs = append(keptIDs, create(t, w.client, n))
	}
	w.checkCommands(t, majority[0], keptIDs...)
	majority[0].WaitNodes(time.Minute, majority[0].Name, majority[1].Name)

	healed := time.Now()
	if err := cut.Host.Heal(); err != nil {
		t.Fatal(err)
	}
	deadline := healed.Add(5 * time.Second)
	// Each check polls to its deadline, 5 s from the heal; one that fails
	// goes on polling for a minute, to say when it would have passed.
	within := func(what string, f func() bool) bool {
		t.Helper()
		if pollUntil(deadline, f) {
			t.Logf("%s %v after the heal", what, time.Since(healed).Round(time.Millisecond))
			return true
		}
		late := pollUntil(time.Now().Add(time.Minute), f)
		t.Errorf("not within 5 s of the heal: %s (late: %v at %v after the heal)", what, late, time.Since(healed).Round(time.Millisecond))
		return false
	}
	var last string
	within(cut.Name+" accepts a create", func() bool {
		status, body, err := apiCall(w.client, cut, "POST", "/sandboxes", createBody(t))
		if a := fmt.Sprintf("%d %.200s %v", status, body, err); a != last {
			t.Logf("create through %s %v after the heal: %s", cut.Name, time.Since(healed).Round(time.Millisecond), a)
			last = a
		}
		if status == http.StatusCreated {
			keptIDs = append(keptIDs, sandboxID(t, body))
		}
		return status == http.StatusCreated
	})
	within("GET /cluster/nodes through "+majority[0].Name+" shows "+cut.Name, func() bool {
		list, err := majority[0].ClusterNodes(w.client)
		return err == nil && slices.Contains(hutchtest.NodeNames(list), cut.Name)
	})
	// The cut node's sandboxes from before: whether the cluster keeps
	// them is the node's choice, but what it lists is what the node runs.
	var list, running []string
	within(majority[0].Name+" lists what "+cut.Name+" runs", func() bool {
		list, _ = listed(w.client, majority[0])
		running = running[:0]
		for _, st := range hutchtest.RuntimeSandboxes(t, cut.Bin, cut.Env) {
			running = append(running, st.ID)
		}
		return !slices.ContainsFunc(cutIDs, func(id string) bool { return slices.Contains(list, id) != slices.Contains(running, id) })
	})
	var back []string
	for _, id := range cutIDs {
		if slices.Contains(list, id) {
			back = append(back, id)
		}
	}
	t.Logf("%s's sandboxes from before the partition listed again: %v of %v", cut.Name, back, cutIDs)
	w.checkCommands(t, majority[0], append(keptIDs, back...)...)
}

// TestRestart: the whole cluster stopped (SIGTERM: every node and its
// embedded etcd member) and started again: every sandbox made before is
// still listed through every node and still runs commands.
func TestRestart(t *testing.T) {
	w := newWorld(t, false)
	var ids []string
	for _, n := range w.Nodes {
		ids = append(ids, create(t, w.client, n))
	}
	slices.Sort(ids)
	w.owners(t, ids...)
	w.Stop(syscall.SIGTERM)
	w.Start()
	for _, n := range w.Nodes {
		var got []string
		var err error
		if !pollUntil(time.Now().Add(time.Minute), func() bool {
			got, err = listed(w.client, n)
			return err == nil && !slices.ContainsFunc(ids, func(id string) bool { return !slices.Contains(got, id) })
		}) {
			t.Errorf("after the restart %s lists %v (%v), want %v among them", n.Name, got, err, ids)
		}
	}
	w.checkCommands(t, w.Nodes[1], ids...)
}

// TestE2BJSSuite runs test/e2bjs's suite (the official E2B JS SDK's
// tests, every file, as TestE2BJSSDKThroughServe runs them against one
// server) against the cluster through one node's address.
func TestE2BJSSuite(t *testing.T) {
	w := newWorld(t, false)
	if err := hutchtest.NodeTests(t, w.js, w.user.Wrap(), 10*time.Minute, w.Nodes[0].SDKEnv()); err != nil {
		t.Errorf("node --test through %s failed: %v", w.Nodes[0].Name, err)
	}
}
