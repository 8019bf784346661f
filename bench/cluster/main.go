// Command cluster is Hutch's cluster benchmark (issue 21): what
// `hutch serve --cluster` costs and gives, measured with real nodes on
// one machine. Each node is a `hutch serve --cluster` in a network
// namespace of its own (a "host"), on a LAN of veth pairs to a bridge in
// the harness's own namespace (bench/cluster.sh gives it one: unshare
// --net), with its own data dir, certificate (hutch cluster ca / issue)
// and, on 1 and 3 nodes, its own embedded etcd voter; at 2 nodes the
// second is an etcd client of the first (docs/cluster.md: 1, 3 or 5
// voters), or a second voter with -voters all.
//
// Per step (a plain `hutch serve` without --cluster as the reference,
// then 1, 2 and 3 nodes, each a fresh cluster):
//
//   - create throughput: -creates POST /sandboxes (E2B's REST API, the
//     base template), -c at once, create i sent to node i mod N; then as
//     many DELETEs, each through the node that took its create. Creates
//     per second, latency p50/p95/p99, CPU of each node (its process tree)
//     and of the machine over the creates, and how many creates placement
//     sent on to another node than the one that took them (hutch ps of
//     each node's data dir says who runs what);
//   - the calibrated ratio: the nodes share this machine's CPUs, so N
//     nodes cannot do N times one node's creates here; the CPU each create
//     costs the machine (its busy time less this harness's) at 1 node over
//     that at N nodes is the share of N × one node that N nodes on N such
//     machines would reach while a node is bound by its CPU, as one node is
//     here;
//   - the routing hop (on the largest cluster): envd and API round trips
//     to a sandbox of node A, sent to A and through node B, which proxies
//     them to A's cluster listener.
//
// Run it with bench/cluster.sh; see bench/README.md. As root; it sends
// traffic only to the namespaces it makes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

type config struct {
	hutch, dir, netnsDesc string
	nodes                 []int
	creates, conc, warmup int
	warm                  int
	network, plain        bool
	voters                string
	rounds                int
	hop                   bool
	hopN, hopWarmup       int
}

// bench is one run of the harness.
type bench struct {
	cfg   config
	key   string
	start time.Time // for the progress lines
}

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-cluster: run as root (bench/cluster.sh)")
		os.Exit(1)
	}
	os.Exit(realMain())
}

func realMain() int {
	var cfg config
	var nodes string
	flag.StringVar(&cfg.hutch, "hutch", "/usr/local/bin/hutch", "the hutch binary")
	flag.StringVar(&cfg.dir, "dir", "", "work directory: each step's CA, data dirs and logs, removed after the step (required)")
	flag.StringVar(&cfg.netnsDesc, "netns", "", "the harness's network namespace (for the header)")
	flag.StringVar(&nodes, "nodes", "1,2,3", "node counts, one fresh cluster each")
	flag.IntVar(&cfg.creates, "creates", 300, "measured creates per step")
	flag.IntVar(&cfg.conc, "c", 8, "creates (and deletes) at once, over all the nodes")
	flag.IntVar(&cfg.rounds, "rounds", 2, "rounds of every step (odd rounds in reverse order), added up per step")
	flag.IntVar(&cfg.warmup, "warmup", 16, "creates and deletes per step before the measured ones")
	flag.IntVar(&cfg.warm, "warm", 0, "each node's --warm (warm pool of base)")
	flag.BoolVar(&cfg.network, "network", true, "sandboxes with networking (hutch serve --network); each node has a namespace of its own")
	flag.BoolVar(&cfg.plain, "plain", true, "also measure one hutch serve without --cluster, the reference row")
	flag.StringVar(&cfg.voters, "voters", "odd", "which nodes run an etcd voter: odd (the largest odd number of them: 1, 1, 3 at 1, 2, 3 nodes), all, or a number (the first ones; the rest are etcd clients)")
	flag.BoolVar(&cfg.hop, "hop", true, "measure the routing hop on the largest cluster")
	flag.IntVar(&cfg.hopN, "hop-n", 300, "measured round trips of each kind, each way")
	flag.IntVar(&cfg.hopWarmup, "hop-warmup", 20, "round trips of each kind, each way, before the measured ones")
	flag.Parse()
	bad := ""
	for _, f := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 9 {
			bad = "-nodes: node counts from 1 to 9"
			break
		}
		cfg.nodes = append(cfg.nodes, n)
	}
	switch {
	case bad != "":
	case cfg.dir == "":
		bad = "-dir is required"
	case votersFor(1, cfg.voters) == 0:
		bad = "-voters: odd, all or a number >= 1"
	case cfg.creates < 1 || cfg.conc < 1 || cfg.rounds < 1 || cfg.warmup < 0 || cfg.warm < 0 || cfg.hopN < 1 || cfg.hopWarmup < 0:
		bad = "-creates, -c, -rounds and -hop-n must be >= 1, -warmup, -warm and -hop-warmup >= 0"
	}
	if _, code := harness.CheckArgs("bench-cluster", bad, "", nil); code != 0 {
		return code
	}
	b := &bench{cfg: cfg, key: os.Getenv("E2B_API_KEY"), start: time.Now()}
	if b.key == "" {
		fmt.Fprintln(os.Stderr, "bench-cluster: E2B_API_KEY is not set (bench/cluster.sh sets it)")
		return 2
	}
	if err := ownNetNS(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cluster:", err)
		return 1
	}
	ctx, stop := harness.SignalContext()
	defer stop()

	maxN := 0
	for _, n := range cfg.nodes {
		maxN = max(maxN, n)
	}
	self, err := netns.Get()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-cluster:", err)
		return 1
	}
	defer self.Close()

	// What a killed earlier run left: its nodes' sandboxes and dirs.
	if ents, err := os.ReadDir(cfg.dir); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				if err := removeData(cfg.hutch, filepath.Join(cfg.dir, e.Name())); err != nil {
					fmt.Fprintf(os.Stderr, "bench-cluster: an earlier run's %s: %v\n", e.Name(), err)
					return 1
				}
			}
		}
	}
	b.printHeader(maxN)
	var steps []clusterSpec
	if cfg.plain {
		steps = append(steps, clusterSpec{plain: true})
	}
	for _, n := range cfg.nodes {
		steps = append(steps, clusterSpec{n: n, voters: votersFor(n, cfg.voters)})
	}
	// Each round runs every step, odd rounds in reverse order, so that
	// whatever drifts over a run (the page cache, other work) weighs on
	// every step alike; a step's rounds are added up.
	results := make([]*stepResult, len(steps))
	var hop *hopResult
rounds:
	for round := range cfg.rounds {
		order := slices.Clone(steps)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, spec := range order {
			if ctx.Err() != nil {
				break rounds
			}
			// A fresh LAN per step: no namespace keeps anything of the
			// last step's nodes (nftables, sockets in TIME_WAIT).
			l, err := newLAN(self, "hbr0", maxN, true)
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench-cluster:", err)
				return 1
			}
			measureHop := cfg.hop && hop == nil && !spec.plain && spec.n == maxN && maxN >= 2
			if cfg.rounds > 1 {
				b.logf("round %d of %d", round+1, cfg.rounds)
			}
			r, h := b.runStep(ctx, spec, l.hosts, measureHop)
			if err := l.close(); err != nil {
				b.logf("LAN: %v", err)
			}
			if r.err != nil {
				b.logf("%s: %v", spec.label(), r.err)
			}
			i := slices.Index(steps, spec)
			results[i] = results[i].add(r)
			if h != nil {
				hop = h
			}
		}
	}
	results = slices.DeleteFunc(results, func(r *stepResult) bool { return r == nil })
	fmt.Println()
	harness.PrintLoad("after the runs")
	fmt.Println()
	b.printResults(results, hop)
	for _, r := range results {
		if r.err != nil {
			return 1
		}
	}
	return harness.ExitCode(ctx, "bench-cluster")
}

// ownNetNS refuses to build the LAN's bridge in a namespace that is not
// the harness's own: PID 1's (when this process may look at it), or any
// with a link besides loopback (a fresh `unshare --net` has only lo).
func ownNetNS() error {
	self, err1 := os.Readlink("/proc/self/ns/net")
	init, err2 := os.Readlink("/proc/1/ns/net")
	if err1 == nil && err2 == nil && self == init {
		return errors.New("run in a network namespace of its own (bench/cluster.sh does: unshare --net), not PID 1's")
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("links: %w", err)
	}
	for _, l := range links {
		if l.Attrs().Name != "lo" {
			return fmt.Errorf("this network namespace has %s: run in one of its own with nothing but loopback (bench/cluster.sh does: unshare --net)", l.Attrs().Name)
		}
	}
	return nil
}

// newTransport is the client's transport: HTTP/1.1, kept-alive
// connections (enough for every call at once), dialled from the harness's
// namespace, the switch: straight onto the LAN.
func newTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// apiClient is a client of one node's API.
func (b *bench) apiClient() *http.Client {
	return &http.Client{Transport: newTransport(), Timeout: 3 * time.Minute}
}

// logf prints a progress line, with the time since the run began.
func (b *bench) logf(format string, args ...any) {
	fmt.Printf("==> %5.1fs "+format+"\n", append([]any{time.Since(b.start).Seconds()}, args...)...)
}

func (b *bench) printHeader(maxN int) {
	harness.PrintTitle("Hutch cluster benchmark: create throughput at 1, 2, 3 nodes and the routing hop")
	fmt.Printf("hutch: %s (%s)\n", harness.Revision(), b.cfg.hutch)
	fmt.Printf("network: the harness in %s; a bridge there (%s/24) and %d hosts on it, each a network namespace of its own with a veth pair to the bridge (%s1..%d/24), fresh for each step\n",
		orDefault(b.cfg.netnsDesc, "its own network namespace"), switchIP, maxN, lanPrefix, maxN)
	fmt.Printf("nodes: hutch serve --listen HOST:%d %s on each host, with --cluster --cluster-listen HOST:%d --advertise-url https://HOST:%d, a certificate of the step's CA (hutch cluster ca/issue), a fresh data dir under %s, the machine's template store; every node on the same %d CPUs\n",
		apiPort, strings.Join(b.commonFlags(), " "), clusterPort, clusterPort, b.cfg.dir, runtime.NumCPU())
	var etcd []string
	for _, n := range b.cfg.nodes {
		etcd = append(etcd, fmt.Sprintf("%d: %s", n, clusterSpec{n: n, voters: votersFor(n, b.cfg.voters)}.etcdDesc()))
	}
	fmt.Printf("etcd per node count: %s\n", strings.Join(etcd, "; "))
	fmt.Printf("client: this harness, Go net/http (%s, GOMAXPROCS %d), kept-alive HTTP/1.1 connections to each node's address from the bridge's namespace\n",
		runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Printf("per step: a fresh cluster; %d creates and deletes to warm up, then %d POST /sandboxes %s, %d at once, create i sent to node i mod N; then a DELETE of each through the node that took its create\n",
		b.cfg.warmup, b.cfg.creates, createBody, b.cfg.conc)
	fmt.Printf("rounds: %d, each of every step (odd rounds in reverse order); the tables add up each step's rounds\n", b.cfg.rounds)
	if b.cfg.hop {
		fmt.Printf("routing hop: on the %d-node cluster, %d round trips of each kind (after %d to warm up) to one sandbox, to its node and through the next node, alternately\n",
			maxN, b.cfg.hopN, b.cfg.hopWarmup)
	}
	harness.PrintLoad("before")
	fmt.Println()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
