package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// The harness's pieces that need no hutch: who runs an etcd member and
// with which flags, and the arithmetic of the tables. No timing is
// checked.
func TestServeArgs(t *testing.T) {
	for _, c := range []struct {
		n         int
		rule      string
		wantVoter int
	}{{1, "odd", 1}, {2, "odd", 1}, {2, "all", 2}, {3, "odd", 3}, {4, "odd", 3}, {5, "odd", 5}, {3, "1", 1}, {2, "3", 2}, {3, "x", 0}, {3, "0", 0}} {
		if got := votersFor(c.n, c.rule); got != c.wantVoter {
			t.Errorf("votersFor(%d, %q) = %d, want %d", c.n, c.rule, got, c.wantVoter)
		}
	}
	hosts := []*host{{idx: 1, ip: lanPrefix + "1"}, {idx: 2, ip: lanPrefix + "2"}, {idx: 3, ip: lanPrefix + "3"}}

	two := clusterSpec{n: 2, voters: 1}
	a1, a2 := strings.Join(serveArgs(two, hosts, 1), " "), strings.Join(serveArgs(two, hosts, 2), " ")
	for _, want := range []string{"--cluster --node-name n1", "--etcd-embed", "--etcd-initial-cluster n1=https://10.98.0.1:2380", "--advertise-url https://10.98.0.1:7443"} {
		if !strings.Contains(a1, want) {
			t.Errorf("2 nodes, n1: %q lacks %q", a1, want)
		}
	}
	if strings.Contains(a2, "--etcd-embed") || !strings.Contains(a2, "--etcd-endpoints https://10.98.0.1:2379") {
		t.Errorf("2 nodes, n2 should be an etcd client of n1: %q", a2)
	}

	three := strings.Join(serveArgs(clusterSpec{n: 3, voters: 3}, hosts, 3), " ")
	if !strings.Contains(three, "--etcd-initial-cluster n1=https://10.98.0.1:2380,n2=https://10.98.0.2:2380,n3=https://10.98.0.3:2380") {
		t.Errorf("3 nodes, n3: %q", three)
	}
	if serveArgs(clusterSpec{plain: true}, hosts, 1) != nil {
		t.Error("the plain server has cluster flags")
	}
	for _, s := range []clusterSpec{{plain: true}, {n: 1, voters: 1}, {n: 2, voters: 1}, {n: 2, voters: 2}, {n: 3, voters: 3}} {
		if s.label() == "" || s.etcdDesc() == "" {
			t.Errorf("%+v: no label or etcd description", s)
		}
	}
}

// phaseOf is a phase of n successful calls in wall, costing the machine
// work (nodes' trees: nodes) and the client client.
func phaseOf(n int, wall, work, nodes, client time.Duration) *phase {
	p := &phase{wall: wall, calls: make([]call, n)}
	for i := range p.calls {
		p.calls[i] = call{id: "s", d: time.Millisecond}
	}
	p.cpu = cpuUse{nodes: []time.Duration{nodes}, client: client, machine: work + client}
	return p
}

func TestScaling(t *testing.T) {
	// One node: 100 creates in 2 s for 4 s of CPU (40 ms each).
	one := phaseOf(100, 2*time.Second, 4*time.Second, 2*time.Second, time.Second)
	// Three nodes on the same CPUs: as many creates/s, 10% more CPU
	// each.
	three := phaseOf(100, 2*time.Second, 4400*time.Millisecond, 2200*time.Millisecond, time.Second)
	raw, cal, byNodes := scaling(one, three, 3)
	near := func(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }
	if !near(raw, 1.0/3) || !near(cal, 4.0/4.4) || !near(byNodes, 2.0/2.2) {
		t.Errorf("scaling = %v, %v, %v; want 1/3, 1/1.1, 1/1.1", raw, cal, byNodes)
	}
	if r, c, bn := scaling(one, &phase{}, 2); r != 0 || c != 0 || bn != 0 {
		t.Errorf("scaling of an empty phase = %v, %v, %v; want zeros", r, c, bn)
	}
	// A failed call counts as neither a create nor its CPU's divisor.
	one.calls[0].err = errors.New("boom")
	if got, want := cpuPerCreate(one), 4*time.Second/99; got != want {
		t.Errorf("cpuPerCreate = %v, want %v", got, want)
	}
	// Rounds add up: calls, wall and CPU.
	sum := one.add(three)
	if len(sum.calls) != 200 || sum.wall != 4*time.Second || sum.cpu.machine != 10400*time.Millisecond || sum.cpu.nodes[0] != 4200*time.Millisecond {
		t.Errorf("phase.add: %d calls, wall %v, machine %v, nodes %v", len(sum.calls), sum.wall, sum.cpu.machine, sum.cpu.nodes)
	}
	s1 := &stepResult{creates: one, deletes: one, owner: map[string]int{"a": 0}, running: []int{1}, revCreates: 10, revDeletes: 5}
	s2 := &stepResult{creates: three, deletes: three, owner: map[string]int{"b": 0}, running: []int{2}, revCreates: 20, revDeletes: -1}
	if got := (*stepResult)(nil).add(s1).add(s2); len(got.owner) != 2 || got.running[0] != 3 || got.revCreates != 30 || got.revDeletes != -1 {
		t.Errorf("stepResult.add: owners %v, running %v, revisions %d/%d", got.owner, got.running, got.revCreates, got.revDeletes)
	}
	u := cpuUse{nodes: []time.Duration{time.Second, time.Second}, client: time.Second, kernel: time.Second, other: time.Second, machine: 4 * time.Second}
	if u.unattributed() != 0 || u.work() != 2*time.Second {
		t.Errorf("unattributed %v (want 0), work %v (want 2s)", u.unattributed(), u.work())
	}
}

// The CPU counters read this process as the harness's and, through
// /proc, see every process.
func TestCPUMark(t *testing.T) {
	m0 := markCPU(nil)
	for t0 := time.Now(); time.Since(t0) < 50*time.Millisecond; {
	}
	u := markCPU(nil).since(m0)
	if len(m0.procs) < 2 || u.client <= 0 && u.machine <= 0 {
		t.Errorf("%d processes read; client %v, machine %v", len(m0.procs), u.client, u.machine)
	}
}

// A process that ends between two marks counts, through its parent,
// only what it used between them; a sandbox's cgroup counts for its node.
func TestCPUSince(t *testing.T) {
	s := time.Second
	m0 := cpuMark{groups: 1, busy: 100, procs: map[int]procCPU{
		10: {cpu: 5 * s, group: groupOther}, 11: {cpu: 3 * s, group: groupOther},
		20: {cpu: 2 * s, group: 0}, 21: {cpu: 1 * s, group: groupCgroup, node: 0},
	}, cgroups: map[string]procCPU{"a": {cpu: 1 * s, node: 0}}}
	m := cpuMark{groups: 1, busy: 400, procs: map[int]procCPU{
		// 10 reaped 11 (3.5 s in all); 20 reaped 21 (1.5 s in all), and
		// a new sandbox's cgroup b came with its processes.
		10: {cpu: 9 * s, group: groupOther}, 20: {cpu: 4 * s, group: 0}, 22: {cpu: 7 * s, group: groupCgroup, node: 0},
	}, cgroups: map[string]procCPU{"b": {cpu: 500 * time.Millisecond, node: 0}}}
	u := m.since(m0)
	if u.other != 1*s || u.nodes[0] != 1500*time.Millisecond || u.machine != 3*s {
		t.Errorf("since: other %v (want 1s), node %v (want 1.5s), machine %v (want 3s)", u.other, u.nodes[0], u.machine)
	}
}

// A LAN of two hosts, its switch in a namespace of the test's own: a
// host reaches the other, and the bridge's address, across it. Needs
// root; it makes network namespaces only.
func TestLAN(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	sw, err := newNetNS()
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	l, err := newLAN(sw, "tbr0", 2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.close(); err != nil {
			t.Error(err)
		}
	}()
	if len(l.hosts) != 2 || l.hosts[1].ip != lanPrefix+"2" {
		t.Fatalf("hosts: %+v", l.hosts)
	}
	// A listener on host 1 and one on the switch.
	var lns []net.Listener
	for _, ns := range []netns.NsHandle{l.hosts[0].ns, sw} {
		var ln net.Listener
		if err := doInNetNS(ns, func() (err error) { ln, err = net.Listen("tcp", ":0"); return err }); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, "hello")
				c.Close()
			}
		}()
		lns = append(lns, ln)
	}
	for i, target := range []string{l.hosts[0].ip, switchIP} {
		_, port, _ := net.SplitHostPort(lns[i].Addr().String())
		var got []byte
		err := doInNetNS(l.hosts[1].ns, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(target, port))
			if err != nil {
				return err
			}
			defer c.Close()
			got, err = io.ReadAll(c)
			return err
		})
		if err != nil || string(got) != "hello" {
			t.Errorf("host 2 → %s: %q, %v", target, got, err)
		}
	}
	// The ports are the bridge's.
	if names := l.portNames(); !slices.Equal(names, []string{"tbr0p1", "tbr0p2"}) {
		t.Errorf("switch ports: %v", names)
	}
}
