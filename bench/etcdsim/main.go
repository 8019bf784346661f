// Command etcdsim simulates the etcd traffic of a Hutch cluster (issue 21)
// of many nodes, to show where one etcd cluster stops: it starts a 3-voter
// etcd on 127.0.0.1 (embedded members, v3.6 as in go.mod, one process of
// this binary each, in a temporary directory removed afterwards; or uses
// the one -endpoints names) and plays N nodes against it, as
// /var/tmp/cluster/contract.md lays out the keys:
//
//   - each node grants a lease (TTL -lease), puts nodes/<name> (~500 B of
//     JSON) bound to it, renews it every TTL/3 on a LeaseKeepAlive stream of
//     its own (as clientv3's KeepAlive does; each round trip timed) and
//     rewrites its record with fresh load every -load-interval;
//   - placement, open loop at fixed rates: a range of all of nodes/ (what a
//     placement without a cache reads, -ranges-per-s) and sandbox creates,
//     a txn putting sandboxes/<id> (~400 B) bound to the owner's lease if
//     CreateRevision is 0 (-creates-per-s).
//
// The nodes share -clients etcd clients (gRPC connections), since a
// connection per node (5,000) on one machine is not what is measured.
// After registering every node it measures a window of -duration and
// prints, per operation, the count, ops/s against the rate asked for,
// p50/p95/p99/max and errors, then etcd's db size and revision and the CPU
// of each member and of the simulation, and whether the cluster kept up
// (renewal p99 within a third of the lease TTL, no error, no lease lost,
// the asked rates met). -sweep 500,1000,2000,5000 runs one fresh cluster
// per N and prints one row per N and where the cluster stops.
//
// Run it with bench/etcdsim.sh; see bench/README.md. It needs no root and
// talks to loopback only (unless -endpoints says otherwise).
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"golang.org/x/sys/unix"
)

type config struct {
	nodes        int
	sweep        []int
	duration     time.Duration
	lease        time.Duration
	loadEvery    time.Duration
	createsPerS  float64
	rangesPerS   float64
	clients      int
	registerConc int
	// registerWithin bounds the registration before the window.
	registerWithin time.Duration
	watchers       int
	timeout        time.Duration
	compaction     string
	dir            string
	endpoints      []string
	prefix         string
	tls            *clientTLS
}

// clientTLS are the client certificate flags for an external etcd.
type clientTLS struct{ ca, cert, key string }

func (c *clientTLS) config() (*tls.Config, error) {
	return transport.TLSInfo{TrustedCAFile: c.ca, CertFile: c.cert, KeyFile: c.key}.ClientConfig()
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == memberCmd {
		os.Exit(runMember(os.Args[2:]))
	}
	os.Exit(realMain())
}

func realMain() int {
	var cfg config
	var sweep, endpoints string
	var tc clientTLS
	flag.IntVar(&cfg.nodes, "nodes", 5000, "simulated nodes")
	flag.StringVar(&sweep, "sweep", "", "comma-separated node counts, one fresh cluster and one row each (e.g. 500,1000,2000,5000); instead of -nodes")
	flag.DurationVar(&cfg.duration, "duration", 60*time.Second, "measured window per run (after every node registered)")
	flag.DurationVar(&cfg.lease, "lease", 10*time.Second, "node lease TTL (hutch serve --cluster-lease; whole seconds, >= 2s)")
	flag.DurationVar(&cfg.loadEvery, "load-interval", 2*time.Second, "how often each node rewrites its record with fresh load")
	flag.Float64Var(&cfg.createsPerS, "creates-per-s", 50, "sandbox create txns per second, all nodes together (0: none)")
	flag.Float64Var(&cfg.rangesPerS, "ranges-per-s", 2, "ranges of all of nodes/ per second, all nodes together (0: none)")
	flag.IntVar(&cfg.clients, "clients", 16, "etcd clients (gRPC connections) the simulated nodes share")
	flag.IntVar(&cfg.registerConc, "register-concurrency", 32, "nodes registering at once before the window")
	flag.DurationVar(&cfg.registerWithin, "register-within", 2*time.Minute, "nodes not registered by then are left out (and the run does not hold)")
	flag.IntVar(&cfg.watchers, "watchers", 0, "watches of all of nodes/ (e.g. nodes keeping a placement view from a watch), spread over the clients")
	flag.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "per-call timeout (a call without an answer by then is an error)")
	flag.StringVar(&cfg.compaction, "compaction", "1m", "embedded etcd: periodic auto-compaction retention (0: none)")
	flag.StringVar(&cfg.dir, "dir", "", "embedded etcd: parent of the run's temporary directory (default $TMPDIR or /tmp)")
	flag.StringVar(&endpoints, "endpoints", "", "comma-separated client URLs of an external etcd instead of the embedded one")
	flag.StringVar(&cfg.prefix, "prefix", "", "key prefix (default /hutch/v1/ embedded; /hutch-etcdsim/<random>/v1/ external, removed afterwards)")
	flag.StringVar(&tc.ca, "etcd-cacert", "", "external etcd: CA file")
	flag.StringVar(&tc.cert, "etcd-cert", "", "external etcd: client certificate file")
	flag.StringVar(&tc.key, "etcd-key", "", "external etcd: client key file")
	flag.Parse()

	bad := ""
	if sweep != "" {
		for _, f := range strings.Split(sweep, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				bad = "-sweep: node counts must be integers >= 1"
				break
			}
			cfg.sweep = append(cfg.sweep, n)
		}
	}
	if endpoints != "" {
		cfg.endpoints = strings.Split(endpoints, ",")
	}
	if tc != (clientTLS{}) {
		cfg.tls = &tc
	}
	switch {
	case bad != "":
	case cfg.nodes < 1 || cfg.clients < 1 || cfg.registerConc < 1 || cfg.watchers < 0:
		bad = "-nodes, -clients and -register-concurrency must be >= 1, -watchers >= 0"
	case cfg.duration <= 0 || cfg.loadEvery <= 0 || cfg.timeout <= 0 || cfg.registerWithin <= 0:
		bad = "-duration, -load-interval, -timeout and -register-within must be > 0"
	case cfg.lease < 2*time.Second || cfg.lease%time.Second != 0:
		bad = "-lease must be whole seconds, at least 2s (etcd's minimum TTL with its default election timeout)"
	case cfg.createsPerS < 0 || cfg.rangesPerS < 0:
		bad = "-creates-per-s and -ranges-per-s must be >= 0"
	case cfg.tls != nil && cfg.endpoints == nil:
		bad = "-etcd-cacert, -etcd-cert and -etcd-key are for -endpoints"
	}
	if _, code := harness.CheckArgs("etcdsim", bad, "", nil); code != 0 {
		return code
	}
	if cfg.prefix == "" {
		cfg.prefix = "/hutch/v1/"
		if cfg.endpoints != nil {
			cfg.prefix = fmt.Sprintf("/hutch-etcdsim/%x/v1/", time.Now().UnixNano())
		}
	}
	ctx, stop := harness.SignalContext()
	defer stop()

	counts := cfg.sweep
	if counts == nil {
		counts = []int{cfg.nodes}
	}
	printHeader(cfg, counts)
	var results []*result
	var runErr error
	for _, n := range counts {
		res, err := runStep(ctx, cfg, n)
		if err != nil {
			runErr = fmt.Errorf("%d nodes: %w", n, err)
			break
		}
		results = append(results, res)
		printRun(cfg, res)
		if ctx.Err() != nil {
			break
		}
	}
	harness.PrintLoad("after the runs")
	if len(cfg.sweep) > 0 && len(results) > 0 {
		fmt.Println()
		printSweep(cfg, results)
	}
	if len(results) > 0 {
		fmt.Println()
		printVerdict(cfg, results)
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "etcdsim:", runErr)
		return 1
	}
	return harness.ExitCode(ctx, "etcdsim")
}

// runStep runs n nodes against a fresh embedded cluster (removed
// afterwards) or the external etcd.
func runStep(ctx context.Context, cfg config, n int) (*result, error) {
	if cfg.endpoints != nil {
		return runOnce(ctx, cfg, n, target{endpoints: cfg.endpoints, tls: cfg.tls, prefix: cfg.prefix, cleanup: true})
	}
	dir, err := os.MkdirTemp(cfg.dir, "hutch-etcdsim-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c, err := startCluster(ctx, dir, 3, cfg.compaction)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	return runOnce(ctx, cfg, n, target{endpoints: c.endpoints(), members: c.members, prefix: cfg.prefix})
}

func printHeader(cfg config, counts []int) {
	harness.PrintTitle("Hutch etcd simulation: nodes' lease renewals, load updates and placement against one etcd cluster")
	fmt.Printf("hutch: %s\n", harness.Revision())
	if cfg.endpoints != nil {
		fmt.Printf("etcd: external, %s (client %s), keys under %s (removed afterwards)\n",
			strings.Join(cfg.endpoints, ","), moduleVersion("go.etcd.io/etcd/client/v3"), cfg.prefix)
	} else {
		dir := cfg.dir
		if dir == "" {
			dir = os.TempDir()
		}
		fmt.Printf("etcd: 3 voters, embedded go.etcd.io/etcd/server/v3 %s, one process of this binary each, on 127.0.0.1 of this machine (they share its CPUs and disk with each other and with the simulation), a fresh cluster per run in %s (%s), removed afterwards; defaults but auto-compaction periodic %s; keys under %s\n",
			moduleVersion("go.etcd.io/etcd/server/v3"), dir, fsType(dir), cfg.compaction, cfg.prefix)
	}
	fmt.Printf("clients: %d etcd clients (gRPC connections, round-robin over the endpoints) shared by the simulated nodes: a connection per node is unrealistic on one machine; each node keeps its own LeaseKeepAlive stream, as a client per node would (%s, GOMAXPROCS %d)\n",
		cfg.clients, runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Printf("nodes: %s; each: lease TTL %s renewed every %s, record rewritten every %s; registered %d at once before the window\n",
		joinInts(counts), cfg.lease, (cfg.lease / 3).Round(time.Millisecond), cfg.loadEvery, cfg.registerConc)
	fmt.Printf("placement (open loop, all nodes together): %g ranges of nodes/ and %g sandbox create txns per second; %d watches of nodes/; per-call timeout %s\n",
		cfg.rangesPerS, cfg.createsPerS, cfg.watchers, cfg.timeout)
	fmt.Printf("window: %s per run; it holds when renewal p99 <= TTL/3 (%s), no call fails, no lease is lost and the renewals and load updates asked for are >= 90%% done\n",
		cfg.duration, (cfg.lease / 3).Round(time.Millisecond))
	harness.PrintLoad("before")
}

// printRun prints one run's table and its etcd's state.
func printRun(cfg config, r *result) {
	fmt.Println()
	left := ""
	if r.unregistered > 0 {
		left = fmt.Sprintf(" (%d left out: %d failed tries, or not tried within %s)", r.unregistered, registerTries, cfg.registerWithin)
	}
	fmt.Printf("-- %d nodes: registered in %.1f s%s, then %.1f s measured (record %d B, sandbox record %d B)\n",
		r.nodes, r.registered.Seconds(), left, r.window.Seconds(), r.recordSize, r.sboxSize)
	rows := [][]string{{"operation", "count", "ops/s", "asked/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors"}}
	var errLines []string
	for _, k := range opOrder {
		st := r.stats[k]
		if st.count() == 0 && (k == opRejoin || r.target[k] == 0 && k != opGrant && k != opRegister) {
			continue
		}
		rate, asked := "-", "-"
		if k != opGrant && k != opRegister {
			rate = fmt.Sprintf("%.0f", float64(st.count())/r.window.Seconds())
			if a, ok := r.target[k]; ok {
				asked = fmt.Sprintf("%.0f", a)
			}
		}
		rows = append(rows, []string{opNames[k], strconv.Itoa(st.count()), rate, asked,
			ms(harness.Pct(st.times, 0.5)), ms(harness.Pct(st.times, 0.95)), ms(harness.Pct(st.times, 0.99)),
			ms(maxOf(st.times)), strconv.Itoa(st.errs)})
		if st.errs > 0 {
			errLines = append(errLines, fmt.Sprintf("  %s: %s", k, st.errSummary()))
		}
	}
	harness.PrintTable(rows)
	if len(errLines) > 0 {
		fmt.Println("errors:")
		for _, l := range errLines {
			fmt.Println(l)
		}
	}
	fmt.Printf("leases lost in the window: %d; at the end %d nodes/ and %d sandboxes/ keys; last range of nodes/: %d keys, %.2f MB\n",
		r.lost, r.nodeKeys, r.sboxKeys, r.rangeKeys, float64(r.rangeBytes)/1e6)
	var etcd []string
	for _, m := range r.members {
		if m.statusErr != nil {
			etcd = append(etcd, fmt.Sprintf("%s: status: %v", m.name, m.statusErr))
			continue
		}
		lead := ""
		if m.leader {
			lead = " (leader)"
		}
		s := fmt.Sprintf("%s%s db %.1f MB (in use %.1f MB), revision %d, raft index %d", m.name, lead,
			float64(m.dbSize)/1e6, float64(m.dbInUse)/1e6, m.revision, m.raftIndex)
		if m.cpu >= 0 {
			s += fmt.Sprintf(", CPU %.2f", m.cpu.Seconds()/r.window.Seconds())
		}
		if m.rssKiB >= 0 {
			s += fmt.Sprintf(", RSS %.0f MB", float64(m.rssKiB)/1024)
		}
		etcd = append(etcd, s)
	}
	version := ""
	for _, m := range r.members {
		if m.version != "" {
			version = " " + m.version
			break
		}
	}
	fmt.Printf("etcd%s at the end: %s\n", version, strings.Join(etcd, "; "))
	fmt.Printf("CPU over the window, in CPUs of %d: etcd members %s, the simulation (its nodes and clients) %.2f; the machine %.2f busy, so %.2f for other processes\n",
		runtime.NumCPU(), fmtCPUs(r.etcdCPU(), r.window), r.simCPU.Seconds()/r.window.Seconds(), r.busyCPUs, r.otherCPUs())
	if p := r.problems(cfg); len(p) > 0 {
		fmt.Printf("=> does not hold at %d nodes: %s\n", r.nodes, strings.Join(p, "; "))
	} else {
		fmt.Printf("=> holds at %d nodes: renewal p99 %s ms is %.1f%% of TTL/3\n", r.nodes,
			ms(harness.Pct(r.stats[opRenew].times, 0.99)), 100*float64(harness.Pct(r.stats[opRenew].times, 0.99))/float64(cfg.lease/3))
	}
}

// printSweep prints one row per node count.
func printSweep(cfg config, rs []*result) {
	fmt.Println("sweep: one row per node count (each a fresh cluster); rates are done/asked per second, times in ms")
	rows := [][]string{{"nodes", "renew/s", "renew p50", "p99", "max", "load/s", "load p99", "range p99", "create p99", "errors", "lost", "db MB", "etcd CPUs", "sim CPUs", "other CPUs", "holds?"}}
	for _, r := range rs {
		errs := 0
		for _, k := range opOrder {
			errs += r.stats[k].errs
		}
		rn, ld := r.stats[opRenew], r.stats[opLoad]
		db := "-"
		for _, m := range r.members {
			if m.leader {
				db = fmt.Sprintf("%.1f", float64(m.dbSize)/1e6)
			}
		}
		holds := "yes"
		if p := r.problems(cfg); len(p) > 0 {
			holds = "no: " + strings.Join(p, "; ")
		}
		rows = append(rows, []string{strconv.Itoa(r.nodes),
			fmt.Sprintf("%.0f/%.0f", float64(rn.count())/r.window.Seconds(), r.target[opRenew]),
			ms(harness.Pct(rn.times, 0.5)), ms(harness.Pct(rn.times, 0.99)), ms(maxOf(rn.times)),
			fmt.Sprintf("%.0f/%.0f", float64(ld.count())/r.window.Seconds(), r.target[opLoad]),
			ms(harness.Pct(ld.times, 0.99)), ms(harness.Pct(r.stats[opRange].times, 0.99)), ms(harness.Pct(r.stats[opCreate].times, 0.99)),
			strconv.Itoa(errs), strconv.FormatInt(r.lost, 10), db,
			fmtCPUs(r.etcdCPU(), r.window), fmt.Sprintf("%.2f", r.simCPU.Seconds()/r.window.Seconds()), fmt.Sprintf("%.2f", r.otherCPUs()), holds})
	}
	harness.PrintTable(rows, 15)
}

// printVerdict says where one etcd cluster stops, as far as these runs
// show.
func printVerdict(cfg config, rs []*result) {
	lastOK := 0
	for _, r := range rs {
		p := r.problems(cfg)
		if len(p) > 0 {
			where := "this etcd"
			if cfg.endpoints == nil {
				where = "one 3-voter etcd on this machine (voters and nodes on the same CPUs)"
			}
			if lastOK > 0 {
				fmt.Printf("where it stops: %s kept up with %d nodes and stops at %d: %s\n", where, lastOK, r.nodes, strings.Join(p, "; "))
			} else {
				fmt.Printf("where it stops: %s does not keep up already at %d nodes: %s\n", where, r.nodes, strings.Join(p, "; "))
			}
			return
		}
		lastOK = r.nodes
	}
	fmt.Printf("where it stops: not within these runs; it kept up with %d nodes (renewal p99 within TTL/3, no errors, no lease lost); the limit is higher\n", lastOK)
}

// problems are the reasons the run did not hold; none when it did.
func (r *result) problems(cfg config) []string {
	var p []string
	budget := cfg.lease / 3
	renew := r.stats[opRenew]
	if p99 := harness.Pct(renew.times, 0.99); p99 > budget {
		p = append(p, fmt.Sprintf("renewal p99 %s ms > TTL/3 (%s ms)", ms(p99), ms(budget)))
	}
	if r.unregistered > 0 {
		p = append(p, fmt.Sprintf("%d nodes not registered", r.unregistered))
	}
	if r.lost > 0 {
		p = append(p, fmt.Sprintf("%d leases lost", r.lost))
	}
	errs := 0
	for _, k := range opOrder {
		errs += r.stats[k].errs
	}
	if errs > 0 {
		p = append(p, fmt.Sprintf("%d calls failed", errs))
	}
	for _, k := range []string{opRenew, opLoad} {
		done := float64(r.stats[k].count()) / r.window.Seconds()
		if done < 0.9*r.target[k] {
			p = append(p, fmt.Sprintf("%s %.0f/s of %.0f/s asked", k, done, r.target[k]))
		}
	}
	return p
}

// otherCPUs is the CPU (in CPUs) that neither etcd nor the simulation
// used over the window: the machine's other work, which slows both.
func (r *result) otherCPUs() float64 {
	used := r.simCPU.Seconds()
	for _, m := range r.members {
		used += max(m.cpu, 0).Seconds()
	}
	return max(0, r.busyCPUs-used/r.window.Seconds())
}

// etcdCPU is the members' CPU over the window, leader first; nil when
// unknown (an external etcd).
func (r *result) etcdCPU() []memberStatus {
	var out []memberStatus
	for _, m := range r.members {
		if m.cpu < 0 {
			continue
		}
		if m.leader {
			out = append([]memberStatus{m}, out...)
		} else {
			out = append(out, m)
		}
	}
	return out
}

// fmtCPUs is each member's CPU over window as CPUs ("0.85 leader + 0.31 +
// 0.30"), or "-".
func fmtCPUs(ms []memberStatus, window time.Duration) string {
	if len(ms) == 0 {
		return "-"
	}
	var parts []string
	for _, m := range ms {
		s := fmt.Sprintf("%.2f", m.cpu.Seconds()/window.Seconds())
		if m.leader {
			s += " leader"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " + ")
}

func ms(d time.Duration) string {
	v := float64(d) / 1e6
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 1000:
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

func joinInts(ns []int) string {
	var s []string
	for _, n := range ns {
		s = append(s, strconv.Itoa(n))
	}
	return strings.Join(s, ", ")
}

// moduleVersion is the version of module path this binary was built with.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "(version unknown)"
}

// fsType names the file system of dir (etcd fsyncs its WAL: tmpfs would
// make that free).
func fsType(dir string) string {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return "file system unknown"
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs: fsync costs nothing there"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("file system 0x%x", st.Type)
}
