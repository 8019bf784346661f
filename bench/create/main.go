// Command create is Hutch's create → first command benchmark: how long from
// asking for a new sandbox until a first command has run in it, one at a
// time and with many at once, next to the container runtimes a user would
// pick instead.
//
//   - hutch: the official E2B JS SDK (bench/create/create.mjs, run with
//     node): `await Sandbox.create()` then `await sbx.commands.run('true')`,
//     against a `hutch serve --warm 0` (every sandbox a cold start) and,
//     when given one, a `hutch serve` with its default warm pool;
//   - hutch, Go SDK: the same through Hutch's own Go SDK (package sdk),
//     in this process: `c.Create(ctx, sdk.CreateOptions{})` then
//     `sbx.Commands.Run(ctx, "true", nil)` (gosdk.go), against the same
//     two servers, each row right after the JS SDK's row against that
//     server;
//   - runc and crun: `run -d` of the OCI bundle bundle-idle (sleep
//     infinity) then `exec <id> /bin/true`;
//   - podman (runc): `podman run -d … sleep infinity` then
//     `podman exec <id> /bin/true`, with the startup bench's flags.
//
// Each row: one first (cold) iteration reported apart, warm-up iterations,
// N sequential ones, then C started at once; the sandbox or container is
// removed after each iteration (after all C), outside the timed part. One
// table with p50/p95/p99 of both series and creates per second of the
// concurrent one.
//
// It is meant to be started by bench/create.sh, which starts the servers
// it measures (-cold-url, -warm-url) and sets E2B_API_KEY; see
// bench/README.md. It must run as root. It re-executes itself in a
// private mount namespace so that the idmapped rootfs it mounts for the OCI
// peers never outlives it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

type config struct {
	n, c, warmup int
	dir          string // /var/cache/hutch/bench
	rootfs       string // the base template's rootfs
	script       string // bench/create/create.mjs
	node         string
	only         map[string]bool
	runTimeout   time.Duration
	coldURL      string // hutch serve --warm 0
	warmURL      string // hutch serve with its default warm pool, or ""
	warm         int    // that pool's size
	warmData     string // that server's data directory (to count its pool)
	hutch        string // the hutch binary (hutch ps)
	serveArgs    string // both servers' other arguments, for the header

	bundleIdle string // OCI bundle running sleep infinity
	ociRootfs  string // its rootfs: the template, idmapped, read-only
	hostID     int    // host uid of the OCI containers' root
}

var rowKeys = []string{"hutch", "hutch-go", "hutch-warm", "hutch-warm-go", "runc", "crun", "podman"}

func main() { harness.Main("bench-create", "bench/create.sh", realMain) }

func realMain() int {
	cfg := &config{}
	templates := harness.TemplatesDir()
	var only string
	flag.IntVar(&cfg.n, "n", 100, "measured sequential iterations per row")
	flag.IntVar(&cfg.c, "c", 50, "sandboxes or containers started at once (0: no concurrent series)")
	flag.IntVar(&cfg.warmup, "warmup", 5, "warm-up iterations per row after the first (cold) one, not measured")
	flag.StringVar(&cfg.dir, "dir", "/var/cache/hutch/bench", "bench cache: OCI bundles made by bench/create.sh")
	flag.StringVar(&cfg.rootfs, "rootfs", filepath.Join(templates, "base", "rootfs"), "rootfs of the base template")
	flag.StringVar(&cfg.script, "script", "bench/create/create.mjs", "the SDK side (node script)")
	flag.StringVar(&cfg.node, "node", "node", "node binary")
	flag.StringVar(&only, "only", "", "comma-separated rows to run ("+strings.Join(rowKeys, ",")+"); default all")
	flag.DurationVar(&cfg.runTimeout, "timeout", 2*time.Minute, "limit for one command of a peer (the SDK row: 30 min in all)")
	flag.StringVar(&cfg.coldURL, "cold-url", "", "URL of a `hutch serve --warm 0` (bench/create.sh starts it)")
	flag.StringVar(&cfg.warmURL, "warm-url", "", "URL of a `hutch serve` with its default warm pool (bench/create.sh starts it)")
	flag.IntVar(&cfg.warm, "warm", 0, "the size of that server's warm pool")
	flag.StringVar(&cfg.warmData, "warm-data", "", "that server's data directory: before each warm-pool row, wait until `hutch ps` there counts -warm sandboxes")
	flag.StringVar(&cfg.hutch, "hutch", "/usr/local/bin/hutch", "hutch binary (for hutch ps)")
	flag.StringVar(&cfg.serveArgs, "serve-args", "", "the servers' other arguments (for the header)")
	flag.Parse()
	if cfg.n < 1 || cfg.c < 0 || cfg.warmup < 0 {
		fmt.Fprintln(os.Stderr, "bench-create: -n must be >= 1, -c and -warmup >= 0")
		return 2
	}
	var err error
	if cfg.only, err = harness.ParseOnly(only, rowKeys); err != nil {
		fmt.Fprintf(os.Stderr, "bench-create: %v\n", err)
		return 2
	}
	cfg.bundleIdle = filepath.Join(cfg.dir, "bundle-idle")
	cfg.ociRootfs = filepath.Join(cfg.dir, "bundle", "rootfs")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	b := &bench{ctx: ctx, cfg: cfg, bins: map[string]string{}}
	// Whatever happens from here on, the containers go.
	defer b.close()
	if err := b.prepare(); err != nil {
		fmt.Fprintf(os.Stderr, "bench-create: %v\n", err)
		return 1
	}
	printHeader(cfg)
	fmt.Println()

	// Each server through the JS SDK, then through the Go SDK.
	want := func(key string) bool { return (cfg.only == nil || cfg.only[key]) && ctx.Err() == nil }
	var rows []*row
	if want("hutch") {
		rows = append(rows, b.measureSDK("hutch", "hutch serve --warm 0 (E2B JS SDK)", cfg.coldURL))
	}
	if want("hutch-go") {
		rows = append(rows, b.measureGoSDK("hutch-go", "hutch serve --warm 0 (Go SDK)", cfg.coldURL))
	}
	for _, w := range []struct {
		key, client string
		measure     func(key, name, url string) *row
	}{{"hutch-warm", "E2B JS SDK", b.measureSDK}, {"hutch-warm-go", "Go SDK", b.measureGoSDK}} {
		if !want(w.key) {
			continue
		}
		if cfg.warmURL != "" {
			// Every warm row starts with a full pool, as the first did.
			b.waitWarmPool()
			rows = append(rows, w.measure(w.key, fmt.Sprintf("hutch serve, warm pool of %d (%s)", cfg.warm, w.client), cfg.warmURL))
		} else if cfg.only != nil {
			r := &row{key: w.key, name: fmt.Sprintf("hutch serve, warm pool (%s)", w.client), unavailable: "this hutch serve has no warm pool (--warm)"}
			fmt.Printf("%-42s unavailable: %s\n", r.name, r.unavailable)
			rows = append(rows, r)
		}
	}
	for _, p := range b.peers() {
		if ctx.Err() != nil {
			break
		}
		if cfg.only != nil && !cfg.only[p.key] {
			continue
		}
		rows = append(rows, b.measurePeer(p))
	}
	harness.PrintLoad("after the runs")
	fmt.Println()
	printResults(cfg, rows)
	fmt.Println()
	b.cleanup(true)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench-create: interrupted")
		return 130
	}
	return 0
}

func printHeader(cfg *config) {
	harness.PrintTitle("Hutch create → first command benchmark")
	rev := harness.Revision()
	fmt.Printf("hutch: commit %s; sandboxes: base template, memory 512M, cpus 1, pids 512\n", rev)
	args := ""
	if cfg.serveArgs != "" {
		args = " " + cfg.serveArgs
	}
	fmt.Printf("servers: `hutch serve --warm 0%s` at %s", args, orNone(cfg.coldURL))
	if cfg.warmURL != "" {
		fmt.Printf(", `hutch serve%s` (warm pool of %d, its default) at %s", args, cfg.warm, cfg.warmURL)
	}
	fmt.Println()
	node := "node not found"
	if out, err := exec.Command(cfg.node, "--version").Output(); err == nil {
		node = "node " + strings.TrimSpace(string(out))
	}
	fmt.Printf("client: official E2B JS SDK (%s, %s), from test/e2bjs/js; Go SDK rows: package sdk of this checkout (%s), in the harness's process\n",
		sdkVersion(cfg.script), node, runtime.Version())
	fmt.Printf("peers: %s\n", harness.PeerVersions("runc", "crun", "podman", "conmon"))
	conc := "no concurrent series"
	if cfg.c > 0 {
		conc = fmt.Sprintf("then %d started at once", cfg.c)
	}
	fmt.Printf("runs per row: 1 first (cold) + %d warm-up + %d measured one after the other, %s\n", cfg.warmup, cfg.n, conc)
	harness.PrintLoad("before")
}

// series is a set of measured durations, with the two phases of each
// iteration (create or start; first command) kept apart.
type series struct {
	total, create, run []time.Duration // each sorted once finished
	busy               float64         // share of all CPUs busy during the series (-1: unknown)
	wall               time.Duration   // concurrent series: first start to last command done
	failed             int
	firstErr           string
}

func (s *series) sort() {
	for _, t := range [][]time.Duration{s.total, s.create, s.run} {
		sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	}
}

func (s *series) add(it iteration) {
	s.total = append(s.total, it.total)
	s.create = append(s.create, it.create)
	s.run = append(s.run, it.run)
}

func (s *series) fail(err string) {
	s.failed++
	if s.firstErr == "" {
		s.firstErr = err
	}
}

// pct is the nearest-rank percentile q of sorted times.
func pct(times []time.Duration, q float64) time.Duration {
	if len(times) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(times)))) - 1
	if i < 0 {
		i = 0
	}
	return times[i]
}

// iteration is one create → first command.
type iteration struct {
	total, create, run time.Duration
}

// row is one contender's results.
type row struct {
	key, name   string
	createName  string // what its first phase is, for the breakdown
	runName     string // and its first command
	unavailable string
	first       iteration
	seq, conc   series
	concurrency int
	// Removals (not timed) that failed at first.
	removeFailed int
	removeErr    string
	// Failures among the first iteration and the warm-up.
	firstFailed bool
	warmFailed  int
	warmErr     string
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func printResults(cfg *config, rows []*row) {
	c := fmt.Sprint(cfg.c)
	head := []string{"row", "first", "seq p50", "seq p95", "seq p99", "CPU busy", c + "× p50", c + "× p95", c + "× p99", c + "× wall", "creates/s", ""}
	if cfg.c == 0 {
		head = head[:6]
		head = append(head, "")
	}
	table := [][]string{head}
	for _, r := range rows {
		if r.unavailable != "" {
			line := []string{r.name}
			for len(line) < len(head)-1 {
				line = append(line, "-")
			}
			table = append(table, append(line, "unavailable: "+r.unavailable))
			continue
		}
		first := ms(r.first.total)
		if r.firstFailed {
			first = "failed"
		}
		line := []string{r.name, first, ms(pct(r.seq.total, .5)), ms(pct(r.seq.total, .95)), ms(pct(r.seq.total, .99)), busy(r.seq.busy)}
		var notes []string
		if r.warmFailed > 0 {
			notes = append(notes, fmt.Sprintf("%d of the first %d (first + warm-up) failed: %s", r.warmFailed, cfg.warmup+1, r.warmErr))
		}
		if r.seq.failed > 0 {
			notes = append(notes, fmt.Sprintf("%d of %d sequential failed: %s", r.seq.failed, r.seq.failed+len(r.seq.total), r.seq.firstErr))
		}
		if cfg.c > 0 {
			if len(r.conc.total) == 0 {
				line = append(line, "-", "-", "-", ms(r.conc.wall), "-")
			} else {
				line = append(line, ms(pct(r.conc.total, .5)), ms(pct(r.conc.total, .95)), ms(pct(r.conc.total, .99)), ms(r.conc.wall),
					fmt.Sprintf("%.1f", float64(len(r.conc.total))/r.conc.wall.Seconds()))
			}
			if r.conc.failed > 0 {
				notes = append(notes, fmt.Sprintf("%d of %d at once failed: %s", r.conc.failed, r.concurrency, r.conc.firstErr))
			}
		}
		if r.removeFailed > 0 {
			notes = append(notes, fmt.Sprintf("removal (not timed) failed %d times: %s", r.removeFailed, r.removeErr))
		}
		table = append(table, append(line, strings.Join(notes, "; ")))
	}
	printTable(table)
	fmt.Println("times in ms; first = the row's very first iteration (JS SDK rows: the first calls of a new node process;")
	fmt.Println("Go SDK rows: of a new sdk.Client in the harness's process),")
	fmt.Println("seq = one at a time after the warm-up;")
	if cfg.c > 0 {
		fmt.Printf("%d× = %d started at once, each timed from its own start; wall = until the last had run its command;\n", cfg.c, cfg.c)
		fmt.Printf("creates/s = successful creates → first command in the %d× series / wall;\n", cfg.c)
	}
	fmt.Printf("CPU busy = share of all CPUs busy during the sequential series (%d CPUs here).\n", runtime.NumCPU())

	measured := 0
	for _, r := range rows {
		if r.unavailable == "" {
			measured++
		}
	}
	if measured == 0 {
		return
	}
	fmt.Println()
	fmt.Println("Where the time goes (p50 of each phase; the phases' p50s need not add up to the total's):")
	bd := [][]string{{"row", "create or start", "seq p50", c + "× p50", "first command", "seq p50", c + "× p50"}}
	if cfg.c == 0 {
		bd = [][]string{{"row", "create or start", "seq p50", "first command", "seq p50"}}
	}
	for _, r := range rows {
		if r.unavailable != "" {
			continue
		}
		if cfg.c == 0 {
			bd = append(bd, []string{r.name, r.createName, ms(pct(r.seq.create, .5)), r.runName, ms(pct(r.seq.run, .5))})
			continue
		}
		bd = append(bd, []string{r.name, r.createName, ms(pct(r.seq.create, .5)), ms(pct(r.conc.create, .5)),
			r.runName, ms(pct(r.seq.run, .5)), ms(pct(r.conc.run, .5))})
	}
	if cfg.c == 0 {
		printTable(bd, 1, 3)
	} else {
		printTable(bd, 1, 4)
	}

	// The goals: cold (no pool) for the sequential p50; 50 at once for
	// both servers. They were set for the E2B JS SDK's rows; the Go SDK's
	// are in the table.
	first := true
	for _, r := range rows {
		if (r.key != "hutch" && r.key != "hutch-warm") || r.unavailable != "" || len(r.seq.total) == 0 {
			continue
		}
		if first {
			fmt.Println()
			first = false
		}
		if r.key == "hutch" {
			p50 := pct(r.seq.total, .5)
			fmt.Printf("goal: sequential p50 under 50 ms, cold: %s ms, %s\n", ms(p50), metOrNot(p50 < 50*time.Millisecond))
		}
		if cfg.c == 50 && len(r.conc.total) > 0 {
			p99 := pct(r.conc.total, .99)
			ok := p99 < 150*time.Millisecond && r.conc.failed == 0
			fmt.Printf("goal: 50 at once with p99 under 150 ms (%s): %s ms, %s\n", r.name, ms(p99), metOrNot(ok))
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func metOrNot(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func busy(b float64) string {
	if b < 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*b)
}

func printTable(rows [][]string, left ...int) { harness.PrintTable(rows, left...) }
