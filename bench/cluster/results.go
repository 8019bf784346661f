package main

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// goal is issue 21's: N nodes create at least this share of N × one
// node's creates per second.
const goal = 0.9

// cpuPerCreate is the machine's CPU (less this harness's and other
// processes') per successful call of the phase; 0 when none succeeded.
func cpuPerCreate(p *phase) time.Duration {
	n := len(p.ok())
	if n == 0 {
		return 0
	}
	return p.cpu.work() / time.Duration(n)
}

// nodesCPUPerCreate is the nodes' own CPU (their process trees) per
// successful create.
func nodesCPUPerCreate(p *phase) time.Duration {
	n := len(p.ok())
	if n == 0 {
		return 0
	}
	return p.cpu.nodesTotal() / time.Duration(n)
}

// scaling compares n nodes' creates with one node's (base): raw is
// creates/s over n × one node's, as measured on this one machine (where
// the nodes share its CPUs); calibrated is one node's CPU per create over
// n nodes' (the share of n × one node's creates/s n nodes on n machines
// like this one would reach, while each is bound by its CPU as one node
// is here); byNodes is the same from the nodes' own CPU alone. Each is 0
// when it cannot be computed.
func scaling(base, r *phase, n int) (raw, calibrated, byNodes float64) {
	if base == nil || r == nil || n < 1 {
		return 0, 0, 0
	}
	if t1 := base.perSecond(); t1 > 0 {
		raw = r.perSecond() / (float64(n) * t1)
	}
	if c1, cn := cpuPerCreate(base), cpuPerCreate(r); c1 > 0 && cn > 0 {
		calibrated = float64(c1) / float64(cn)
	}
	if c1, cn := nodesCPUPerCreate(base), nodesCPUPerCreate(r); c1 > 0 && cn > 0 {
		byNodes = float64(c1) / float64(cn)
	}
	return raw, calibrated, byNodes
}

// idleShare is the nodes' CPU over phase p in % of one CPU, or "-".
func idleShare(p *phase) string {
	if p == nil || p.wall <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*p.cpu.nodesTotal().Seconds()/p.wall.Seconds())
}

// hops counts the phase's successful creates that run on another node
// than the one that took them, and those whose node is unknown.
func hops(r *stepResult) (elsewhere, unknown int) {
	for _, c := range r.creates.calls {
		if c.err != nil {
			continue
		}
		switch o := r.owner[c.id]; {
		case o < 0:
			unknown++
		case o != c.node:
			elsewhere++
		}
	}
	return elsewhere, unknown
}

// printResults prints the tables.
func (b *bench) printResults(rs []*stepResult, hop *hopResult) {
	var base *stepResult // one node of a cluster: what N nodes are compared with
	for _, r := range rs {
		if r.err == nil && !r.spec.plain && r.spec.n == 1 {
			base = r
		}
	}
	var done []*stepResult
	for _, r := range rs {
		if r.err != nil {
			fmt.Printf("%s: not measured: %v\n", r.spec.label(), r.err)
			continue
		}
		done = append(done, r)
	}
	if len(done) > 0 {
		b.printCreates(done, base)
		fmt.Println()
		b.printCPU(done, base)
		fmt.Println()
		b.printPlacement(done)
		fmt.Println()
		b.printDeletes(done)
		fmt.Println()
		b.printGoal(done, base)
	}
	if hop != nil {
		fmt.Println()
		b.printHop(hop)
	}
}

func (b *bench) printCreates(rs []*stepResult, base *stepResult) {
	fmt.Printf("create throughput: %d POST /sandboxes per row (%s of %d), %d at once, create i sent to node i mod N; times in ms\n",
		b.cfg.rounds*b.cfg.creates, plural(b.cfg.rounds, "round"), b.cfg.creates, b.cfg.conc)
	rows := [][]string{{"nodes", "etcd voters", "creates/s", "ok", "failed", "wall s", "p50", "p95", "p99", "max", "placed elsewhere", "÷ (N × 1 node)"}}
	var errs []string
	for _, r := range rs {
		p := r.creates
		t := p.ok()
		failed, first := p.failed()
		if failed > 0 {
			errs = append(errs, fmt.Sprintf("  %s: %s", r.spec.label(), first))
		}
		voters, elsewhere, ratio := "-", "-", "-"
		if !r.spec.plain {
			voters = strconv.Itoa(r.spec.voters)
			e, u := hops(r)
			elsewhere = fmt.Sprintf("%d of %d", e, len(t))
			if u > 0 {
				elsewhere += fmt.Sprintf(" (%d unknown)", u)
			}
			if base != nil {
				raw, _, _ := scaling(base.creates, p, r.spec.n)
				ratio = fmt.Sprintf("%.2f", raw)
			}
		}
		rows = append(rows, []string{r.spec.label(), voters, fmt.Sprintf("%.1f", p.perSecond()), strconv.Itoa(len(t)), strconv.Itoa(failed),
			fmt.Sprintf("%.2f", p.wall.Seconds()), ms(harness.Pct(t, 0.5)), ms(harness.Pct(t, 0.95)), ms(harness.Pct(t, 0.99)), ms(maxOf(t)), elsewhere, ratio})
	}
	harness.PrintTable(rows, 10)
	if len(errs) > 0 {
		fmt.Println("first failure per row:")
		for _, e := range errs {
			fmt.Println(e)
		}
	}
	fmt.Println("÷ (N × 1 node) = creates/s over N × the 1-node cluster's, on this one machine: N nodes share its CPUs, so ~1/N is what CPU-bound nodes can show here")
}

func (b *bench) printCPU(rs []*stepResult, base *stepResult) {
	fmt.Println("CPU over the creates, CPU seconds: each node = its hutch serve (embedded etcd member included) and every process below it (helpers), its sandboxes by their cgroups' CPU accounting")
	rows := [][]string{{"nodes", "each node", "nodes", "kernel threads", "irq", "unattributed", "harness", "others", "machine", "busy", "ms/create", "nodes ms/create", "idle nodes", "calibrated", "by nodes' CPU", "N × 1 node × calibrated"}}
	for _, r := range rs {
		u := r.creates.cpu
		var each []string
		for _, d := range u.nodes {
			each = append(each, fmt.Sprintf("%.2f", d.Seconds()))
		}
		busy := 0.0
		if r.creates.wall > 0 {
			busy = u.machine.Seconds() / r.creates.wall.Seconds() / float64(runtime.NumCPU())
		}
		cal, byNodes, proj := "-", "-", "-"
		if !r.spec.plain && base != nil {
			_, c, bn := scaling(base.creates, r.creates, r.spec.n)
			cal, byNodes = fmt.Sprintf("%.2f", c), fmt.Sprintf("%.2f", bn)
			proj = fmt.Sprintf("%.1f/s", float64(r.spec.n)*base.creates.perSecond()*c)
		}
		sec := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }
		rows = append(rows, []string{r.spec.label(), strings.Join(each, " / "), sec(u.nodesTotal()), sec(u.kernel), sec(u.irq), sec(u.unattributed()),
			sec(u.client), sec(u.other), sec(u.machine), fmt.Sprintf("%.0f%%", 100*busy),
			ms(cpuPerCreate(r.creates)), ms(nodesCPUPerCreate(r.creates)), idleShare(r.idle), cal, byNodes, proj})
	}
	harness.PrintTable(rows, 1)
	fmt.Println("kernel threads = kthreadd's (workers tearing down namespaces, cgroups, loop devices; RCU); irq = interrupts and softirqs (the packets between namespaces among them)")
	fmt.Println("unattributed = the machine's busy time none of these shows: exited kernel workers, processes' times rounded down to whole ticks, a sandbox's init before it moved into its cgroup")
	fmt.Println("others = every other process on the machine (work not the cluster's); busy = the machine's busy time over the wall time, all CPUs")
	fmt.Println("ms/create = (machine − harness − others) CPU per create: what a create costs the machine wherever it runs, the client left out")
	fmt.Println("idle nodes = the nodes' CPU with no call in flight (a few seconds before the creates), in % of one CPU: what the cluster costs by itself")
	fmt.Println("calibrated = 1 node's ms/create ÷ N nodes' ms/create: N nodes on N machines like this one, each bound by its CPU (as 1 node is here: see busy), would create")
	fmt.Println("  calibrated × N × the 1-node cluster's creates/s (last column); \"by nodes' CPU\" is the same ratio from the nodes' process trees alone")
}

func (b *bench) printPlacement(rs []*stepResult) {
	fmt.Println("placement: creates each node took (create i went to node i mod N) and sandboxes each ran after them (hutch ps of its data dir, a warm pool's included); create latency, ms, by whether placement kept the create on the node that took it or sent it on (the hop)")
	rows := [][]string{{"nodes", "took", "ran", "kept p50", "p95", "p99", "sent on p50", "p95", "p99", "etcd writes/create", "/delete"}}
	for _, r := range rs {
		if r.spec.plain {
			continue
		}
		took := make([]int, len(r.running))
		var kept, sent []time.Duration
		for _, c := range r.creates.calls {
			if c.err != nil {
				continue
			}
			took[c.node]++
			if o := r.owner[c.id]; o >= 0 && o != c.node {
				sent = append(sent, c.d)
			} else if o == c.node {
				kept = append(kept, c.d)
			}
		}
		slices.Sort(kept)
		slices.Sort(sent)
		row := []string{r.spec.label(), joinInts(took, " / "), joinInts(r.running, " / ")}
		for _, t := range [][]time.Duration{kept, sent} {
			if len(t) == 0 {
				row = append(row, "-", "-", "-")
				continue
			}
			row = append(row, ms(harness.Pct(t, 0.5)), ms(harness.Pct(t, 0.95)), ms(harness.Pct(t, 0.99)))
		}
		row = append(row, writesPer(r.revCreates, r.idleRevPerSec, r.creates), writesPer(r.revDeletes, r.idleRevPerSec, r.deletes))
		rows = append(rows, row)
	}
	harness.PrintTable(rows, 1, 2)
	fmt.Println("etcd writes/create (/delete) = etcd's new revisions over the phase, less the idle rate just before it (the nodes' record refreshes) × its wall time, ÷ its successful calls")
}

// writesPer is the etcd writes per successful call of phase p: rev
// revisions over it, less idle per second over its wall time.
func writesPer(rev int64, idle float64, p *phase) string {
	n := len(p.ok())
	if rev < 0 || n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", (float64(rev)-idle*p.wall.Seconds())/float64(n))
}

func (b *bench) printDeletes(rs []*stepResult) {
	fmt.Println("deletes: DELETE /sandboxes/{id} of every sandbox made, through the node that took its create, same concurrency; times in ms")
	rows := [][]string{{"nodes", "deletes/s", "ok", "failed", "p50", "p95", "p99", "machine ms/delete"}}
	var errs []string
	for _, r := range rs {
		p := r.deletes
		t := p.ok()
		failed, first := p.failed()
		if failed > 0 {
			errs = append(errs, fmt.Sprintf("  %s: %s", r.spec.label(), first))
		}
		rows = append(rows, []string{r.spec.label(), fmt.Sprintf("%.1f", p.perSecond()), strconv.Itoa(len(t)), strconv.Itoa(failed),
			ms(harness.Pct(t, 0.5)), ms(harness.Pct(t, 0.95)), ms(harness.Pct(t, 0.99)), ms(cpuPerCreate(p))})
	}
	harness.PrintTable(rows)
	if len(errs) > 0 {
		fmt.Println("first failure per row:")
		for _, e := range errs {
			fmt.Println(e)
		}
	}
}

func (b *bench) printGoal(rs []*stepResult, base *stepResult) {
	if base == nil {
		fmt.Println("goal (N nodes >= 0.9 × N × one node): no 1-node cluster measured to compare with")
		return
	}
	for _, r := range rs {
		if r.spec.plain || r.spec.n < 2 {
			continue
		}
		raw, cal, _ := scaling(base.creates, r.creates, r.spec.n)
		verdict := "met"
		if cal < goal {
			verdict = "NOT met"
		}
		fmt.Printf("goal %d nodes >= %.1f × %d × one node: calibrated %.2f (raw on one machine %.2f): %s\n", r.spec.n, goal, r.spec.n, cal, raw, verdict)
	}
}

func (b *bench) printHop(h *hopResult) {
	if h.err != nil {
		fmt.Printf("routing hop: not measured: %v\n", h.err)
		return
	}
	fmt.Printf("routing hop: round trips to sandbox %s of node %s, sent to %s directly and through %s (which proxies them to %s's cluster listener: HTTP/1.1 over mutual TLS, kept alive); ms\n",
		h.sandbox, h.owner, h.owner, h.via, h.owner)
	rows := [][]string{{"round trip", "direct p50", "p95", "p99", "through " + h.via + " p50", "p95", "p99", "added p50", "p95", "p99"}}
	for _, op := range hopOps {
		t := h.times[op.key]
		row := []string{op.name}
		for _, s := range t {
			row = append(row, ms(harness.Pct(s, 0.5)), ms(harness.Pct(s, 0.95)), ms(harness.Pct(s, 0.99)))
		}
		for _, q := range []float64{0.5, 0.95, 0.99} {
			row = append(row, ms(harness.Pct(t[1], q)-harness.Pct(t[0], q)))
		}
		rows = append(rows, row)
	}
	harness.PrintTable(rows)
	fails := 0
	for _, n := range h.fails {
		fails += n
	}
	if fails > 0 {
		fmt.Printf("failed round trips: %d, the first: %s\n", fails, h.first)
	}
	fmt.Println("added = through the other node minus direct, percentile by percentile")
}

func ms(d time.Duration) string {
	v := float64(d) / 1e6
	switch {
	case v > -10 && v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v > -1000 && v < 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func maxOf(sorted []time.Duration) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[len(sorted)-1]
}

func joinInts(ns []int, sep string) string {
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, sep)
}
