// Command audit is Hutch's benchmark of the audit trail (docs/audit.md):
// what recording every changing REST call, command, file write and tool
// call costs the calls themselves, how fast the writer commits, how big
// the trail grows and how fast GET /events reads it back.
//
//   - A/B: two `hutch serve --network=false` of this checkout on loopback,
//     each with its own data directory and the default warm pool, one with
//     the audit trail (the default) and one with --no-audit; through
//     Hutch's Go SDK, each operation runs on both, the one that goes first
//     alternating, so that drift hits both: Commands.Run("true") and a
//     4 KiB Files.Write in a running sandbox, SetTimeout on it (a REST call
//     that changes something), and Create → Kill. Per operation: p50, p95,
//     p99 on and off, on − off, and hutch serve's CPU per operation.
//   - writer: in this process, audit.Log recording -events events into a
//     fresh database (Record each, then Flush): events/s; the writer's
//     commits of audit.BatchSize events (store.AppendEvents, timed one by
//     one) and, for scale, of one event each; the database's size.
//   - events: a third `hutch serve` on the database the writer section
//     filled (-events events of -sandboxes sandboxes): GET /events by
//     sandbox (limit 100 and 1000), unfiltered (limit 1000) and a
//     follower's `after` cursor.
//
// It is meant to be started by bench/audit.sh; see bench/README.md. As
// root (hutch serve starts sandboxes).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/sdk"
)

type config struct {
	hutch, dir, templates string
	dataOn, dataOff       string // the A/B servers' data directories
	n, nCreate, warmup    int
	events, sandboxes     int
	warm                  int           // serve's default warm pool (for waitPools)
	settle                time.Duration // after the pools refilled
	only                  string
}

// sectionKeys are the sections, in the order they run.
var sectionKeys = []string{"cmd", "write", "timeout", "create", "writer", "events"}

type bench struct {
	cfg  config
	ctx  context.Context
	key  string
	want map[string]bool
}

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-audit: run as root (bench/audit.sh)")
		os.Exit(1)
	}
	os.Exit(realMain())
}

func realMain() int {
	var cfg config
	flag.StringVar(&cfg.hutch, "hutch", "/usr/local/bin/hutch", "the hutch binary (hutch-sandbox beside it)")
	flag.StringVar(&cfg.dir, "dir", "", "work directory: the servers' data directories and logs, the writer's databases (fresh; required)")
	flag.StringVar(&cfg.templates, "templates", harness.TemplatesDir(), "the template store")
	flag.IntVar(&cfg.n, "n", 300, "measured calls per server per A/B section (commands, writes, timeouts), GET /events per query, single-event commits")
	flag.IntVar(&cfg.nCreate, "n-create", 50, "measured create → kill per server")
	flag.IntVar(&cfg.warmup, "warmup", 20, "warm-up calls per server per section (not measured; 2 for create)")
	flag.IntVar(&cfg.events, "events", 100000, "events the writer records and GET /events reads from")
	flag.IntVar(&cfg.sandboxes, "sandboxes", 100, "sandboxes those events are spread over")
	flag.IntVar(&cfg.warm, "warm", 4, "hutch serve's default warm pool (not set: told, to wait for its refills)")
	flag.DurationVar(&cfg.settle, "settle", 200*time.Millisecond, "wait after the pools refilled, between create → kill iterations")
	flag.StringVar(&cfg.only, "only", "", "comma-separated sections ("+strings.Join(sectionKeys, ",")+"); default all")
	flag.Parse()
	bad := ""
	switch {
	case cfg.dir == "":
		bad = "-dir is required"
	case cfg.n < 1 || cfg.nCreate < 1 || cfg.warmup < 0 || cfg.events < 1 || cfg.sandboxes < 1 || cfg.events < 10*cfg.sandboxes:
		bad = "-n, -n-create, -sandboxes must be >= 1, -warmup >= 0, -events >= 10 × -sandboxes"
	}
	want, code := harness.CheckArgs("bench-audit", bad, cfg.only, sectionKeys)
	if code != 0 {
		return code
	}
	ctx, stop := harness.SignalContext()
	defer stop()
	b := &bench{cfg: cfg, ctx: ctx, key: os.Getenv("E2B_API_KEY"), want: want}
	if b.key == "" {
		fmt.Fprintln(os.Stderr, "bench-audit: E2B_API_KEY is not set (bench/audit.sh sets it)")
		return 2
	}
	b.cfg.dataOn = filepath.Join(cfg.dir, "serve-audit")
	b.cfg.dataOff = filepath.Join(cfg.dir, "serve-no-audit")

	harness.PrintTitle("Hutch audit trail benchmark: what recording costs")
	fmt.Printf("hutch: %s (%s)\n", harness.Revision(), cfg.hutch)
	fmt.Printf("client: Hutch's Go SDK (package sdk of this checkout, %s, GOMAXPROCS %d), in this harness\n", runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Printf("audit writer: a commit every %v or %d events, SQLite WAL, synchronous=FULL\n", audit.FlushInterval, audit.BatchSize)
	fmt.Printf("runs: A/B %d per server per section (create → kill %d), each after %d warm-up; writer %d events of %d sandboxes; GET /events %d per query after %d warm-up\n",
		cfg.n, cfg.nCreate, cfg.warmup, cfg.events, cfg.sandboxes, cfg.n, cfg.warmup)
	harness.PrintLoad("before")
	fmt.Println()

	var (
		ab     []*abResult
		by     map[string]int
		total  int
		wr     *writerResult
		evRows []*eventsRow
		evSrv  *server
		abErr  error
	)
	wantAny := func(keys ...string) bool {
		for _, k := range keys {
			if b.wantSection(k) {
				return true
			}
		}
		return false
	}
	if wantAny("cmd", "write", "timeout", "create") {
		ab, by, total, abErr = b.runABSections()
		if abErr != nil {
			fmt.Fprintln(os.Stderr, "bench-audit:", abErr)
		}
	}
	if wantAny("writer", "events") && ctx.Err() == nil {
		fmt.Println()
		wr = b.measureWriter(ctx)
		if wr.err == nil && b.wantSection("events") && ctx.Err() == nil {
			fmt.Println()
			var err error
			evSrv, err = b.startServe(ctx, "events", wr.filledDir, "--network=false", "--warm", "0")
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench-audit:", err)
			} else {
				evRows = b.measureEvents(evSrv)
				evSrv.stop()
			}
		}
	}

	fmt.Println()
	harness.PrintLoad("after the runs")
	if len(ab) > 0 {
		fmt.Println()
		fmt.Println("A/B: the same operations on `hutch serve --network=false` (audit trail on, the default) and `hutch serve --network=false --no-audit`, alternately; times in ms through the Go SDK, from the call to its return")
		fmt.Println("serve CPU ms/op: the hutch serve process's CPU over the section (its writer's commits included; in create → kill also the killed sandboxes' inits it reaped and the warm pool's refills) ÷ n")
		printAB(ab)
		if total > 0 {
			fmt.Printf("events the audit-on server recorded over its whole run (warm-ups and the set-up included): %d:", total)
			keys := make([]string, 0, len(by))
			for k := range by {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Printf(" %s %d", k, by[k])
			}
			fmt.Println()
		}
	}
	if wr != nil {
		fmt.Println()
		wr.print()
	}
	if len(evRows) > 0 {
		fmt.Println()
		fmt.Printf("GET /events against `hutch serve --network=false --warm 0` on that database (%d events, %d sandboxes, 1 in %d events each, interleaved); an admin key; JSON; times in ms from sending the request to reading the whole answer, kept-alive connection\n",
			cfg.events, cfg.sandboxes, cfg.sandboxes)
		printEvents(evRows)
	}
	if abErr != nil || (wr != nil && wr.err != nil) {
		return 1
	}
	return harness.ExitCode(ctx, "bench-audit")
}

func (b *bench) wantSection(key string) bool { return b.want == nil || b.want[key] }

// runABSections starts the two servers, a sandbox on each, runs the A/B
// sections wanted, counts the audit-on server's events, and kills the
// sandboxes through the API and stops the servers whatever happens.
func (b *bench) runABSections() (results []*abResult, by map[string]int, total int, err error) {
	var sides [2]*side
	defer func() {
		// Not the harness's context: after Ctrl-C the sandboxes still go.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, s := range sides {
			if s == nil {
				continue
			}
			if s.c != nil {
				for info, err := range s.c.List(sdk.ListOptions{}).All(ctx) {
					if err != nil {
						fmt.Fprintf(os.Stderr, "bench-audit: list the sandboxes of %s: %v\n", s.srv.name, err)
						break
					}
					if err := s.c.Kill(ctx, info.SandboxID); err != nil {
						fmt.Fprintf(os.Stderr, "bench-audit: kill %s: %v\n", info.SandboxID, err)
					}
				}
			}
			s.srv.stop()
		}
	}()
	for i, spec := range []struct {
		name, data string
		args       []string
	}{
		{"audit on", b.cfg.dataOn, []string{"--network=false"}},
		{"audit off", b.cfg.dataOff, []string{"--network=false", "--no-audit"}},
	} {
		if err := os.MkdirAll(spec.data, 0o711); err != nil {
			return nil, nil, 0, err
		}
		srv, err := b.startServe(b.ctx, spec.name, spec.data, spec.args...)
		if err != nil {
			return nil, nil, 0, err
		}
		sides[i] = &side{srv: srv}
		c, err := sdk.NewClient(sdk.Config{APIKey: b.key, APIURL: srv.url, SandboxURL: srv.url})
		if err != nil {
			return nil, nil, 0, err
		}
		sides[i].c = c
	}
	// Both pools full before anything is measured.
	if err := b.waitPools(b.ctx, 0); err != nil {
		return nil, nil, 0, err
	}
	for i, s := range sides {
		ctx, cancel := context.WithTimeout(b.ctx, sdkTimeout)
		sbx, err := s.c.Create(ctx, sdk.CreateOptions{Timeout: time.Hour})
		cancel()
		if err != nil {
			return nil, nil, 0, fmt.Errorf("create a sandbox on %s: %w", sides[i].srv.name, err)
		}
		s.sbx = sbx
	}
	if err := b.waitPools(b.ctx, 1); err != nil {
		return nil, nil, 0, err
	}
	fmt.Printf("sandboxes: %s on %s (audit on), %s on %s (audit off)\n\n", sides[0].sbx.ID, sides[0].srv.url, sides[1].sbx.ID, sides[1].srv.url)
	for _, sec := range b.abSections() {
		if !b.wantSection(sec.key) || b.ctx.Err() != nil {
			continue
		}
		results = append(results, b.runAB(sec, sides))
	}
	by, total, err = b.countEvents(sides[0].srv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-audit: count the events: %v\n", err)
	}
	return results, by, total, nil
}
