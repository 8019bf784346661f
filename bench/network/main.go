// Command network is Hutch's networking benchmark (internal/network):
//
//   - set-up and tear-down cost per sandbox: network.Manager.Attach and
//     Detach (p50/p95/p99), beside the creation of the sandbox itself
//     without a network: a stand-in (`sleep` in a new network namespace)
//     and, when the base template is installed, real sandboxes of the
//     native runtime (create, attach, create + attach);
//   - the data path: TCP throughput (download and upload) and request /
//     response latency (connect + request + response, and round trips on
//     an open connection) through Hutch's NAT and through its egress
//     proxy, side by side with a direct veth pair and a routed path
//     without Hutch, with the default bandwidth cap and with it raised.
//
// Everything happens in network namespaces the harness makes (see
// world.go): it re-executes itself in a new network namespace, which is
// the "host" the Manager, its nftables table and the egress proxy live in,
// so no link, rule or packet of the machine's real network is touched,
// whatever thread a goroutine runs on. It is meant to be started by
// bench/network.sh; see bench/network/README.md. It must run as root.
//
// The binary is also the init of the native runtime's sandboxes (as the
// hutch binary is): main hands over to native.Init first.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// envInNetNS marks the re-executed harness, in its own network namespace.
const envInNetNS = "HUTCH_BENCH_IN_NETNS"

// config is the command line (see realMain's flags).
type config struct {
	n, nNative, warmup int
	conntrack          int
	latN, latWarmup    int
	tputTime           time.Duration
	tputReps           int
	raisedRate         uint64 // bits/s
	dir                string // /var/cache/hutch/bench
	templates          string
	only               map[string]bool
}

// sectionKeys are the parts -only selects.
var sectionKeys = []string{"setup", "native", "paths"}

func main() {
	// A native sandbox's init is this very binary (see the package
	// comment), as it is the hutch binary in cmd/hutch.
	if native.IsInit() {
		native.Init() // never returns
	}
	runRole() // a server or client process of the data-path part (roles.go)
	if os.Getenv(envInNetNS) != "1" {
		if os.Geteuid() != 0 {
			fmt.Fprintln(os.Stderr, "bench-network: run as root (bench/network.sh): network namespaces, nftables, cgroups")
			os.Exit(1)
		}
		os.Exit(reexecInNetNS())
	}
	os.Exit(realMain())
}

// reexecInNetNS runs this program again in a new network namespace and
// returns its exit status. A namespace is a thread's, and Go moves
// goroutines between threads: locking only the Manager's thread (as the
// tests do) would leave the egress proxy's dials, made on whatever thread
// its goroutines run on, in the machine's real namespace. With the whole
// process in a fresh one, nothing can reach the real network.
func reexecInNetNS() int {
	return harness.Reexec(envInNetNS, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET})
}

// inPrivateNetNS reports whether this process's network namespace is
// another than its parent's: reexecInNetNS's, or whatever started it
// directly. (PID 1's namespace is not always readable, even by root.)
func inPrivateNetNS() (bool, error) {
	var self, parent unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &self); err != nil {
		return false, err
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", os.Getppid()), &parent); err != nil {
		return false, err
	}
	return self.Ino != parent.Ino || self.Dev != parent.Dev, nil
}

// realMain is the harness proper, in its own network namespace: flags,
// the world, the two parts, the tables.
func realMain() int {
	cfg := &config{templates: harness.TemplatesDir()}
	var only, raised string
	flag.IntVar(&cfg.n, "n", 200, "sandbox stand-ins attached (all at once) and detached, for the set-up/tear-down table")
	flag.IntVar(&cfg.nNative, "n-native", 50, "native runtime sandboxes created, attached, detached and deleted (one at a time)")
	flag.IntVar(&cfg.warmup, "warmup", 5, "unmeasured set-up/tear-down rounds first")
	flag.IntVar(&cfg.conntrack, "conntrack", 10000, "UDP flows the host tracks for the 'Detach, busy conntrack' row (0: skip)")
	flag.IntVar(&cfg.latN, "lat-n", 2000, "measured round trips per latency column")
	flag.IntVar(&cfg.latWarmup, "lat-warmup", 100, "unmeasured round trips first")
	flag.DurationVar(&cfg.tputTime, "tput-time", 3*time.Second, "duration of one bulk transfer")
	flag.IntVar(&cfg.tputReps, "tput-reps", 3, "rounds over all paths: one bulk transfer each way per path and round (the median is shown); the round trips are shared out")
	flag.StringVar(&raised, "raised-rate", "100G", "bandwidth cap of the 'cap raised' rows, bits/s (K, M, G suffixes)")
	flag.StringVar(&cfg.dir, "dir", "/var/cache/hutch/bench", "bench cache: the native runtime's state for this bench goes in network-data under it")
	flag.StringVar(&cfg.templates, "templates", cfg.templates, "template directory; the native rows need its base template")
	flag.StringVar(&only, "only", "", "comma-separated parts to run ("+strings.Join(sectionKeys, ",")+"); default all")
	flag.Parse()
	if cfg.n < 1 || cfg.nNative < 1 || cfg.warmup < 0 || cfg.latN < 1 || cfg.latWarmup < 0 || cfg.tputReps < 1 || cfg.tputTime <= 0 || cfg.conntrack < 0 {
		fmt.Fprintln(os.Stderr, "bench-network: -n, -n-native, -lat-n, -tput-reps and -tput-time must be positive, -warmup, -lat-warmup and -conntrack >= 0")
		return 2
	}
	var err error
	if cfg.raisedRate, err = parseRate(raised); err != nil {
		fmt.Fprintf(os.Stderr, "bench-network: -raised-rate: %v\n", err)
		return 2
	}
	if cfg.only, err = harness.ParseOnly(only, sectionKeys); err != nil {
		fmt.Fprintf(os.Stderr, "bench-network: %v\n", err)
		return 2
	}
	want := func(k string) bool { return cfg.only == nil || cfg.only[k] }

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	// Everything below writes the namespace's firewall and links: never
	// the machine's own.
	if private, err := inPrivateNetNS(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-network: which network namespace: %v\n", err)
		return 1
	} else if !private {
		fmt.Fprintf(os.Stderr, "bench-network: not in a network namespace of its own: start it without %s set\n", envInNetNS)
		return 1
	}
	w, err := newWorld(0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-network: building the namespaces: %v\n", err)
		return 1
	}
	defer w.Close()
	b := &bench{ctx: ctx, cfg: cfg, w: w}
	defer b.cleanup()

	printHeader(cfg)
	if want("setup") || want("native") {
		fmt.Println()
		fmt.Println("== Network set-up and tear-down per sandbox")
		rows := b.setupTeardown(want("setup"), want("native"))
		fmt.Println()
		printSteps(rows)
	}
	if want("paths") && ctx.Err() == nil {
		fmt.Println()
		fmt.Println("== TCP throughput and latency by path")
		rows := b.paths()
		fmt.Println()
		printPaths(cfg, rows)
	}
	fmt.Println()
	harness.PrintLoad("after the runs")
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench-network: interrupted")
		return 130
	}
	return 0
}

// bench is one run.
type bench struct {
	ctx context.Context
	cfg *config
	w   *world

	// Stand-ins still running, for cleanup.
	standIns map[*standIn]bool
	// The native runtime, when its rows run.
	rt *native.Runtime
}

// cleanup stops every stand-in left (an interrupted run); native
// sandboxes are deleted by their own loop, and the next run removes what a
// killed one left (see removeNativeLeftovers).
func (b *bench) cleanup() {
	for s := range b.standIns {
		s.stop()
	}
}

// track remembers a running stand-in, for cleanup.
func (b *bench) track(s *standIn) {
	if b.standIns == nil {
		b.standIns = map[*standIn]bool{}
	}
	b.standIns[s] = true
}

// untrack stops a stand-in and forgets it.
func (b *bench) untrack(s *standIn) {
	s.stop()
	delete(b.standIns, s)
}

// parseRate parses bits/s with an optional K, M or G (decimal) suffix.
func parseRate(s string) (uint64, error) {
	mult := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1e3, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1e9, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad rate %q", s)
	}
	return n * mult, nil
}

// rateName prints a rate in bits/s the way tc does.
func rateName(bits uint64) string {
	switch {
	case bits%1e9 == 0:
		return fmt.Sprintf("%d Gbit/s", bits/1e9)
	case bits%1e6 == 0:
		return fmt.Sprintf("%d Mbit/s", bits/1e6)
	}
	return fmt.Sprintf("%d bit/s", bits)
}

// printHeader names the machine, the Hutch measured, the world and the
// run's sizes, and how busy the CPUs are.
func printHeader(cfg *config) {
	harness.PrintTitle("Hutch network benchmark")
	fmt.Printf("hutch: commit %s (internal/network, internal/network/egress, internal/runtime/native)\n", harness.Revision())
	fmt.Printf("world: network namespaces only (host, internet, sandboxes, direct pair, routed trio); no real link, rule or address touched\n")
	fmt.Printf("runs: set-up %d stand-ins + %d warm-up, native %d; latency %d round trips + %d warm-up per column; throughput %d × %s per direction\n",
		cfg.n, cfg.warmup, cfg.nNative, cfg.latN, cfg.latWarmup, cfg.tputReps, cfg.tputTime)
	harness.PrintLoad("before")
}

// series is a set of measured durations.
type series struct {
	times    []time.Duration // sorted by end
	busy     float64         // share of all CPUs busy while it was measured
	failed   int
	firstErr error

	i0, t0      uint64 // CPU sample at begin
	idle, total uint64 // CPU jiffies between begin and pause, summed
}

// begin starts (or resumes) the CPU accounting of the series.
func (s *series) begin() { s.i0, s.t0, _ = harness.CPUSample() }

// pause adds the CPU time since begin.
func (s *series) pause() {
	if i1, t1, err := harness.CPUSample(); err == nil && t1 > s.t0 && s.t0 > 0 {
		s.idle += i1 - s.i0
		s.total += t1 - s.t0
	}
	s.t0 = 0
}

// end sorts the times and computes how busy the CPUs were.
func (s *series) end() {
	if s.t0 > 0 {
		s.pause()
	}
	if s.total > 0 {
		s.busy = 1 - float64(s.idle)/float64(s.total)
	}
	sort.Slice(s.times, func(i, j int) bool { return s.times[i] < s.times[j] })
}

// add records one measured time.
func (s *series) add(d time.Duration) { s.times = append(s.times, d) }

// fail counts one failed measurement and keeps the first error.
func (s *series) fail(err error) {
	s.failed++
	if s.firstErr == nil {
		s.firstErr = err
	}
}

// pct is the q-quantile (0..1), nearest rank; the series must be ended.
func (s *series) pct(q float64) time.Duration {
	if len(s.times) == 0 {
		return 0
	}
	// Nearest rank.
	i := int(math.Ceil(q*float64(len(s.times)))) - 1
	return s.times[max(i, 0)]
}

// mean is the average time.
func (s *series) mean() time.Duration {
	if len(s.times) == 0 {
		return 0
	}
	var sum time.Duration
	for _, t := range s.times {
		sum += t
	}
	return sum / time.Duration(len(s.times))
}

func printTable(rows [][]string, left ...int) { harness.PrintTable(rows, left...) }

// ms and us format a duration for the tables.
func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }

// nativeDataDir is the native runtime's state directory for this bench:
// fixed, so that a run can remove what a killed earlier run left.
func (b *bench) nativeDataDir() string { return filepath.Join(b.cfg.dir, "network-data") }
