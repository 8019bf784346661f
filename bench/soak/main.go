// Command soak is Hutch's long-run harness (issue 23, "long runs"): many
// sandboxes made, used and killed against one `hutch serve`, then a check
// that nothing they had is left behind.
//
//   - churn: -n sandboxes (default 10,000) over -duration (default 30 min),
//     paced evenly and taken by -workers workers; each sandbox is created,
//     runs a command (its output checked; it also asks the sandbox's
//     resolver for a name, so that it has network flows), has a file
//     written and read back (compared), and is killed;
//   - clients: -clients SDK clients (default 200, each with connections of
//     its own) for -duration (default 10 min), each in a loop of full
//     cycles (create, command, file, kill); every -long-every-th client
//     (default every second) also keeps one long-lived sandbox and
//     alternates its cycles with rounds on it (-long-cmds commands, a file
//     written and read back); -ramp spreads the clients' starts.
//
// Every operation's latency (p50/p95/p99, max) and failures are reported,
// and the error rate over all operations. Before the run (after a warm-up,
// the warm pool full) and after it (every sandbox of the run killed, the
// server settled) the leak checks of leaks.go look at the host; each class
// is printed with what it left behind. The exit code is 0 only when no
// operation failed and every class counts 0.
//
// With -hutch it starts its own `hutch serve` (networking on: it must run
// in a network namespace of its own, as bench/soak.sh and test/soak make
// it) with a fresh data directory under -root and the templates at
// -templates, and stops it at the end, its sandboxes removed; with -url it
// uses a running one (-data-dir, -serve-pid and -metrics-url then say what
// to check: classes it cannot see count what they can).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

type config struct {
	mode      string
	hutch     string
	root      string
	templates string
	warm      int
	network   bool
	serveArgs string

	url, dataDir, metricsURL string
	servePid                 int
	key                      string
	prefix                   string

	n         int
	duration  time.Duration
	workers   int
	clients   int
	ramp      time.Duration
	longCmds  int
	longEvery int
	dns       bool
	warmup    int
	settle    time.Duration
	jsonOut   string
	keep      bool
	note      string
	plant     bool
}

func main() { os.Exit(realMain()) }

func realMain() int {
	var cfg config
	flag.StringVar(&cfg.hutch, "hutch", "", "start this hutch binary's serve (hutch-sandbox beside it); else -url")
	flag.StringVar(&cfg.root, "root", "/var/tmp/hutch-soak", "where the started serve's fresh data directory is made")
	flag.StringVar(&cfg.templates, "templates", harness.TemplatesDir(), "the started serve's template store (read only)")
	flag.IntVar(&cfg.warm, "warm", 4, "the started serve's --warm")
	flag.BoolVar(&cfg.network, "network", true, "the started serve's --network")
	flag.StringVar(&cfg.serveArgs, "serve-args", "", "more flags for the started serve, space-separated")
	flag.StringVar(&cfg.url, "url", "", "a running hutch serve to use instead (E2B_API_KEY is its key)")
	flag.StringVar(&cfg.dataDir, "data-dir", "", "with -url: its data directory")
	flag.IntVar(&cfg.servePid, "serve-pid", 0, "with -url: its process id")
	flag.StringVar(&cfg.metricsURL, "metrics-url", "", "with -url: its --metrics-listen URL (http://ADDR/metrics)")
	flag.StringVar(&cfg.prefix, "network-cidr", "10.200.0.0/16", "the serve's --network-cidr")
	flag.IntVar(&cfg.n, "n", 10000, "churn: sandboxes")
	flag.DurationVar(&cfg.duration, "duration", 0, "churn: the time the sandboxes' starts are spread over (default 30m); clients: how long they run (default 10m)")
	flag.IntVar(&cfg.workers, "workers", 8, "churn: sandboxes in flight at most")
	flag.IntVar(&cfg.clients, "clients", 200, "clients: concurrent SDK clients")
	flag.DurationVar(&cfg.ramp, "ramp", 10*time.Second, "clients: the clients' starts are spread over this")
	flag.IntVar(&cfg.longCmds, "long-cmds", 3, "clients: commands per round on a long-lived sandbox")
	flag.IntVar(&cfg.longEvery, "long-every", 2, "clients: every Nth client keeps a long-lived sandbox (0: none); 200 clients each with one and a cycle's would pass the node's default cap of sandboxes (one per 64 MiB: 376 here)")
	flag.BoolVar(&cfg.dns, "dns", true, "each command also looks a name up through the sandbox's resolver (network flows)")
	flag.IntVar(&cfg.warmup, "warmup", 0, "sandboxes churned before the baseline (default 2 × the pool, at least 4)")
	flag.DurationVar(&cfg.settle, "settle", 2*time.Minute, "how long the server may take to settle after the run")
	flag.StringVar(&cfg.jsonOut, "json", "", "also write the report to this file as JSON")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the started serve's data directory (it is removed when nothing leaked)")
	flag.StringVar(&cfg.note, "note", "", "a note for the header (what else the machine runs)")
	flag.BoolVar(&cfg.plant, "plant", false, "after the run, leave one thing of several classes behind (a test of the checks: the run must then fail, naming them)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: soak [flags] churn|clients\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || (flag.Arg(0) != "churn" && flag.Arg(0) != "clients") {
		flag.Usage()
		return 2
	}
	cfg.mode = flag.Arg(0)
	if cfg.duration == 0 {
		cfg.duration = 30 * time.Minute
		if cfg.mode == "clients" {
			cfg.duration = 10 * time.Minute
		}
	}
	if cfg.warmup == 0 {
		cfg.warmup = max(4, 2*cfg.warm)
	}
	if (cfg.hutch == "") == (cfg.url == "") {
		fmt.Fprintln(os.Stderr, "soak: give -hutch (start a serve) or -url (use one)")
		return 2
	}
	prefix, err := netip.ParsePrefix(cfg.prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: -network-cidr:", err)
		return 2
	}

	ctx, stop := harness.SignalContext()
	defer stop()
	var srv *server
	if cfg.hutch != "" {
		if srv, err = startServe(ctx, &cfg); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			return 1
		}
	} else {
		cfg.key = os.Getenv("E2B_API_KEY")
	}
	code := run(ctx, &cfg, prefix, srv)
	if srv != nil {
		srv.stop(code == 0 && !cfg.keep)
	}
	return code
}

// Report is the run's result, as -json writes it.
type Report struct {
	Mode       string     `json:"mode"`
	Machine    string     `json:"machine"`
	Revision   string     `json:"revision"`
	Server     string     `json:"server"`
	Note       string     `json:"note,omitempty"`
	Start      time.Time  `json:"start"`
	Seconds    float64    `json:"seconds"`
	Sandboxes  int        `json:"sandboxes"` // created by the run (not the warm-up)
	Clients    int        `json:"clients,omitempty"`
	Ops        []OpResult `json:"ops"`
	TotalOps   int        `json:"total_ops"`
	Errors     int        `json:"errors"`
	ErrorRate  float64    `json:"error_rate"`
	Leaks      []Leak     `json:"leaks"`
	LeaksTotal int        `json:"leaks_total"`
	// Unchecked names what could not be looked at.
	Unchecked []string `json:"unchecked,omitempty"`
	// Baseline is what the server held before the run.
	BaselineFds        int     `json:"baseline_fds"`
	BaselineGoroutines int     `json:"baseline_goroutines"`
	SettleSeconds      float64 `json:"settle_seconds"`
}

func newKey() string {
	b := make([]byte, 20)
	rand.Read(b)
	return "e2b_" + hex.EncodeToString(b)
}

func run(ctx context.Context, cfg *config, prefix netip.Prefix, srv *server) int {
	l := &load{cfg: cfg, o: newOps(), created: map[string]bool{}}
	l.chk = newChecker(cfg.dataDir, cfg.servePid, cfg.metricsURL, prefix)
	if cfg.dataDir == "" {
		fmt.Println("warning: no -data-dir: the checks of files under it see nothing")
	}
	serverDesc := "hutch serve at " + cfg.url
	if srv != nil {
		serverDesc = "hutch " + strings.Join(srv.args, " ")
	}
	harness.PrintTitle("Hutch soak: " + cfg.mode)
	fmt.Printf("hutch: %s\n", harness.Revision())
	fmt.Printf("server: %s (pid %d)\n", serverDesc, cfg.servePid)
	fmt.Printf("network namespace: %s\n", netnsDesc())
	if cfg.note != "" {
		fmt.Printf("note: %s\n", cfg.note)
	}
	switch cfg.mode {
	case "churn":
		fmt.Printf("run: %d sandboxes over %s, %d workers; each: create, command, file write + read back, kill\n", cfg.n, cfg.duration, cfg.workers)
	case "clients":
		fmt.Printf("run: %d SDK clients for %s (starts over %s); each: cycles (create, command, file, kill); every %d%s also a long-lived sandbox, a round on it (%d commands, a file) between its cycles\n",
			cfg.clients, cfg.duration, cfg.ramp, cfg.longEvery, ordinal(cfg.longEvery), cfg.longCmds)
	}
	harness.PrintLoad("before")

	sampleCtx, stopSampling := context.WithCancel(context.Background())
	defer stopSampling()
	go l.chk.sampleEvery(sampleCtx, time.Second)

	// Warm-up: every path the run takes is taken once (the network's
	// table, the blank disk, the pool's refills, the client's
	// connections), then the server settles and the baseline is taken.
	fmt.Printf("==> warm-up: %d sandboxes\n", cfg.warmup)
	warm := newOps()
	c := l.newClient()
	for i := 0; i < cfg.warmup && ctx.Err() == nil; i++ {
		l.cycle(ctx, c.Client, warm, fmt.Sprintf("w%d", i), "")
	}
	if _, _, errs := warm.results(); errs > 0 {
		rs, _, _ := warm.results()
		printOps(rs)
		fmt.Println("soak: the warm-up failed")
		return 1
	}
	c.close()
	if err := l.quiet(ctx, time.Minute); err != nil {
		fmt.Println("soak: before the run:", err)
		return 1
	}
	before := l.chk.take(ctx)
	fmt.Printf("==> baseline: serve fds %d, goroutines %d, %d sandboxes (the pool)\n", before.fds, before.goroutines, len(before.sandboxDirs))

	rep := &Report{Mode: cfg.mode, Machine: harness.Machine(), Revision: harness.Revision(), Server: serverDesc, Note: cfg.note,
		Start: time.Now().UTC(), BaselineFds: before.fds, BaselineGoroutines: before.goroutines}
	t0 := time.Now()
	switch cfg.mode {
	case "churn":
		l.churn(ctx)
	case "clients":
		rep.Clients = cfg.clients
		l.clients(ctx)
	}
	rep.Seconds = time.Since(t0).Seconds()
	rep.Sandboxes = int(l.made.Load())
	fmt.Printf("==> run done in %.0f s: %d sandboxes\n", rep.Seconds, rep.Sandboxes)
	l.killLeftovers(ctx)

	// Settle: the pool refilled, no sandbox listed; then the checks again
	// until they count nothing or -settle runs out.
	t1 := time.Now()
	deadline := t1.Add(cfg.settle)
	if err := l.quiet(ctx, cfg.settle); err != nil {
		fmt.Println("warning: after the run:", err)
	}
	fmt.Printf("==> quiet after %.0f s (no sandbox listed, the pool full)\n", time.Since(t1).Seconds())
	if cfg.plant {
		var id string
		l.mu.Lock()
		for c := range l.created {
			id = c
			break
		}
		l.mu.Unlock()
		undo, err := l.chk.plant(id)
		if err != nil {
			fmt.Println("soak: -plant:", err)
			return 1
		}
		defer undo()
		fmt.Printf("==> planted a leak of each of: %s (sandbox %s)\n", strings.Join(planted, ", "), id)
	}
	var leaks []Leak
	var after *snapshot
	for {
		after = l.chk.take(ctx)
		live, extra := l.live(ctx, after)
		leaks = l.chk.leaks(before, after, live, extra)
		if total(leaks) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		// Still settling: say what, so that a slow class shows.
		var left []string
		for _, lk := range leaks {
			if lk.Count > 0 {
				left = append(left, fmt.Sprintf("%s %d", lk.Class, lk.Count))
			}
		}
		fmt.Printf("  settling (%.0f s): %s\n", time.Since(t1).Seconds(), strings.Join(left, ", "))
		time.Sleep(2 * time.Second)
	}
	rep.SettleSeconds = time.Since(t1).Seconds()
	rep.Ops, rep.TotalOps, rep.Errors = l.o.results()
	if rep.TotalOps > 0 {
		rep.ErrorRate = float64(rep.Errors) / float64(rep.TotalOps)
	}
	rep.Leaks, rep.LeaksTotal = leaks, total(leaks)
	rep.Unchecked = append(before.errs, after.errs...)

	harness.PrintLoad("after")
	fmt.Println()
	fmt.Printf("%d sandboxes in %.1f min; %d operations, %d failed (error rate %.4f%%)\n",
		rep.Sandboxes, rep.Seconds/60, rep.TotalOps, rep.Errors, 100*rep.ErrorRate)
	printOps(rep.Ops)
	fmt.Println()
	fmt.Printf("left behind (settled after %.0f s; baseline: serve fds %d, goroutines %d; after: %d, %d):\n",
		rep.SettleSeconds, before.fds, before.goroutines, after.fds, after.goroutines)
	rows := [][]string{{"class", "left", "looked at"}}
	for _, lk := range leaks {
		rows = append(rows, []string{lk.Class, fmt.Sprint(lk.Count), lk.Where})
	}
	harness.PrintTable(rows, 0, 2)
	for _, lk := range leaks {
		for _, it := range lk.Items {
			fmt.Printf("LEAK %s: %s\n", lk.Class, it)
		}
	}
	for _, e := range rep.Unchecked {
		fmt.Printf("UNCHECKED %s\n", e)
	}
	if cfg.jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Println("soak:", err)
			return 1
		}
	}
	switch {
	case ctx.Err() != nil:
		fmt.Println("soak: interrupted")
		return 130
	case rep.Errors > 0 || rep.LeaksTotal > 0 || len(rep.Unchecked) > 0:
		var why []string
		if rep.Errors > 0 {
			why = append(why, fmt.Sprintf("%d operations failed", rep.Errors))
		}
		for _, lk := range leaks {
			if lk.Count > 0 {
				why = append(why, fmt.Sprintf("%s: %d left", lk.Class, lk.Count))
			}
		}
		if len(rep.Unchecked) > 0 {
			why = append(why, fmt.Sprintf("%d checks could not look", len(rep.Unchecked)))
		}
		fmt.Println("soak: FAIL:", strings.Join(why, "; "))
		return 1
	}
	fmt.Println("soak: ok: no failure, nothing left behind")
	return 0
}

func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return "th"
	case n%10 == 1:
		return "st"
	case n%10 == 2:
		return "nd"
	case n%10 == 3:
		return "rd"
	}
	return "th"
}

func netnsDesc() string {
	self, _ := os.Readlink("/proc/self/ns/net")
	init, _ := os.Readlink("/proc/1/ns/net")
	if self == init {
		return "the host's (" + self + ")"
	}
	return "its own (" + self + ")"
}

// errNotQuiet is returned when the server does not settle in time.
var errNotQuiet = errors.New("the server did not settle")
