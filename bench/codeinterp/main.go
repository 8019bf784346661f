// Command codeinterp is Hutch's code interpreter benchmark: p50/p95/p99
// of what a user of E2B's code interpreter waits for, through Hutch's Go
// SDK (Sandbox.RunCode) against sandboxes of code-interpreter-v1, with
// E2B's published figures beside them where there are any.
//
//   - create → first RunCode("1+1"), cold (a server with no warm pool,
//     --warm 0: the sandbox, its Jupyter server and its kernel start on
//     demand; the create returns once the template's ready command
//     passes) and from a warm pool (--warm-template
//     code-interpreter-v1=N: the harness waits for the pool to be full
//     before each iteration, so every create takes a pooled sandbox); the
//     create and the first RunCode are rows of their own too;
//   - a RunCode("1+1") round trip in a warm context: one sandbox, the
//     default Python context used -warmup times first;
//   - the memory of an idle code interpreter sandbox: -mem sandboxes made
//     and given one RunCode("1+1"), then left idle 10 s; its memory
//     cgroup's usage (memory.usage_in_bytes, or memory.current), the
//     anonymous part of it (memory.stat total_rss, or anon: the
//     processes' own pages, without the page cache) and the PSS of its
//     processes (/proc/<pid>/smaps_rollup); a base sandbox beside it.
//
// It is meant to be started by bench/codeinterp.sh, which starts the
// servers in a network namespace of its own and sets E2B_API_KEY. Every
// sandbox it makes is killed here, and removed again by the script.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

type config struct {
	url, warmURL     string
	warmN            int
	warmData, hutch  string
	n, nWarm, nRT    int
	warmup, mem      int
	serveArgs, netns string
	only             string
}

// result is one row: its samples (ms or MiB), failures and E2B's figure.
type result struct {
	name, unit string
	samples    []float64
	fails      int
	firstErr   string
	e2b        string
}

func (r *result) add(v float64) { r.samples = append(r.samples, v) }
func (r *result) fail(err error) {
	r.fails++
	if r.firstErr == "" {
		r.firstErr = harness.OneLine(err.Error())
	}
	fmt.Printf("  %s: %v\n", r.name, err)
}

type bench struct {
	cfg  config
	ctx  context.Context
	cold *sdk.Client
	warm *sdk.Client
	rows []*result
}

// E2B's published figures, as E2B states them. E2B publishes no figure
// for a code interpreter sandbox's create → first runCode, for a runCode
// round trip, or for an idle sandbox's memory use.
const (
	e2bStart = "~150 ms (sandbox start)"
	e2bNone  = "none"
	e2bMem   = "none"
)

func main() { os.Exit(realMain()) }

func realMain() int {
	var cfg config
	flag.StringVar(&cfg.url, "url", "", "a hutch serve --warm 0 (cold rows, round trips, memory)")
	flag.StringVar(&cfg.warmURL, "warm-url", "", "a hutch serve with a warm pool of code-interpreter-v1 (warm rows)")
	flag.IntVar(&cfg.warmN, "warm", 0, "that pool's size")
	flag.StringVar(&cfg.warmData, "warm-data", "", "that server's data directory (the pool is counted with hutch ps in it)")
	flag.StringVar(&cfg.hutch, "hutch", "hutch", "the hutch binary (hutch ps)")
	flag.IntVar(&cfg.n, "n", 10, "iterations of the cold create → first RunCode")
	flag.IntVar(&cfg.nWarm, "n-warm", 10, "iterations of the warm-pool create → first RunCode")
	flag.IntVar(&cfg.nRT, "n-rt", 200, "RunCode round trips in a warm context")
	flag.IntVar(&cfg.warmup, "warmup", 20, "RunCode calls before the round trips are timed")
	flag.IntVar(&cfg.mem, "mem", 3, "idle sandboxes measured (each of code-interpreter-v1 and base)")
	flag.StringVar(&cfg.serveArgs, "serve-args", "", "the cold server's flags (for the header)")
	flag.StringVar(&cfg.netns, "netns", "", "the network namespace (for the header)")
	flag.StringVar(&cfg.only, "only", "", "comma-separated parts: cold,warm,rt,mem (default all)")
	flag.Parse()
	known := []string{"cold", "warm", "rt", "mem"}
	bad := ""
	switch {
	case cfg.url == "":
		bad = "-url is required"
	case cfg.n < 1 || cfg.nWarm < 1 || cfg.nRT < 1 || cfg.mem < 1 || cfg.warmup < 0:
		bad = "-n, -n-warm, -n-rt and -mem must be at least 1"
	}
	parts, code := harness.CheckArgs("codeinterp", bad, cfg.only, known)
	if code != 0 {
		return code
	}
	want := func(p string) bool { return parts == nil || parts[p] }
	key := os.Getenv("E2B_API_KEY")
	if key == "" {
		fmt.Fprintln(os.Stderr, "codeinterp: E2B_API_KEY is not set (bench/codeinterp.sh sets it)")
		return 2
	}

	ctx, stop := harness.SignalContext()
	defer stop()
	b := &bench{cfg: cfg, ctx: ctx}
	var err error
	if b.cold, err = sdk.NewClient(sdk.Config{APIKey: key, APIURL: cfg.url, SandboxURL: cfg.url}); err != nil {
		fmt.Fprintln(os.Stderr, "codeinterp:", err)
		return 1
	}
	if cfg.warmURL != "" {
		if b.warm, err = sdk.NewClient(sdk.Config{APIKey: key, APIURL: cfg.warmURL, SandboxURL: cfg.warmURL}); err != nil {
			fmt.Fprintln(os.Stderr, "codeinterp:", err)
			return 1
		}
	}

	harness.PrintTitle("Hutch code interpreter benchmark: create → first RunCode, RunCode round trips, idle memory")
	fmt.Printf("hutch: %s; template %s\n", harness.Revision(), sdk.CodeInterpreterTemplate)
	fmt.Printf("servers: hutch serve %s; warm rows: %s\n", cfg.serveArgs, warmDesc(cfg))
	fmt.Printf("network namespace: %s\n", cfg.netns)
	fmt.Println("client: Hutch's Go SDK (sdk/): Create, Sandbox.RunCode (E2B's code interpreter protocol on port 49999 through hutch serve's port routing)")
	harness.PrintLoad("before the runs")
	fmt.Println()

	if want("cold") && ctx.Err() == nil {
		b.firstRun("cold", b.cold, cfg.n, nil)
	}
	if want("warm") && ctx.Err() == nil {
		if b.warm == nil {
			fmt.Println("warm rows: no -warm-url, skipped")
		} else {
			b.firstRun(fmt.Sprintf("warm pool of %d", cfg.warmN), b.warm, cfg.nWarm, b.waitForPool)
		}
	}
	if want("rt") && ctx.Err() == nil {
		b.roundTrips()
	}
	if want("mem") && ctx.Err() == nil {
		b.memory()
	}

	harness.PrintLoad("after the runs")
	fmt.Println()
	b.printTable()
	return harness.ExitCode(ctx, "codeinterp")
}

func warmDesc(cfg config) string {
	if cfg.warmURL == "" {
		return "none"
	}
	return fmt.Sprintf("a hutch serve --warm 0 --warm-template %s=%d --network=false (the pool full before each create)", sdk.CodeInterpreterTemplate, cfg.warmN)
}

func (b *bench) row(name, unit, e2b string) *result {
	r := &result{name: name, unit: unit, e2b: e2b}
	b.rows = append(b.rows, r)
	return r
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// bg is the context of calls in flight: not the signal context, so that
// a call in flight on Ctrl-C finishes and its sandbox can be killed.
func bg() context.Context { return context.Background() }

func kill(s *sdk.Sandbox) {
	if s == nil {
		return
	}
	if err := s.Kill(bg()); err != nil && !errors.Is(err, sdk.ErrNotFound) {
		fmt.Printf("warning: kill %s: %v\n", s.ID, err)
	}
}

// firstRun times n creates of code-interpreter-v1 on c, each followed by
// RunCode("1+1"), one after the other; before, when set, runs untimed
// before each.
func (b *bench) firstRun(label string, c *sdk.Client, n int, before func() error) {
	fmt.Printf("==> %s: create → first RunCode(\"1+1\"), %d times\n", label, n)
	create := b.row(label+": create (201, interpreter ready)", "ms", e2bStart)
	first := b.row(label+": first RunCode(\"1+1\")", "ms", e2bNone)
	total := b.row(label+": create → first RunCode(\"1+1\")", "ms", e2bNone)
	for i := 0; i < n && b.ctx.Err() == nil; i++ {
		if before != nil {
			if err := before(); err != nil {
				create.fail(err)
				continue
			}
		}
		start := time.Now()
		sbx, err := c.Create(bg(), sdk.CreateOptions{Template: sdk.CodeInterpreterTemplate, Timeout: 10 * time.Minute})
		created := time.Now()
		if err != nil {
			create.fail(err)
			continue
		}
		exec, err := sbx.RunCode(bg(), "1+1", nil)
		done := time.Now()
		if err == nil && exec.Text() != "2" {
			err = fmt.Errorf("RunCode(\"1+1\") gave %q", exec.Text())
		}
		kill(sbx)
		create.add(ms(created.Sub(start)))
		if err != nil {
			first.fail(err)
			continue
		}
		first.add(ms(done.Sub(created)))
		total.add(ms(done.Sub(start)))
	}
}

// waitForPool waits until the warm server has its pool full: -warm
// sandboxes in its data directory (hutch ps), none of them the
// harness's (each is killed before the next iteration).
func (b *bench) waitForPool() error {
	if b.cfg.warmData == "" || b.cfg.warmN == 0 {
		return nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cmd := exec.Command(b.cfg.hutch, "ps", "-q")
		cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+b.cfg.warmData)
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("hutch ps in %s: %w", b.cfg.warmData, err)
		}
		if len(strings.Fields(string(out))) >= b.cfg.warmN {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool did not refill to %d within 2 minutes (%d sandboxes)", b.cfg.warmN, len(strings.Fields(string(out))))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// roundTrips times RunCode("1+1") in one sandbox's default context,
// after warm-up calls.
func (b *bench) roundTrips() {
	fmt.Printf("==> RunCode(\"1+1\") round trips in a warm context: %d warm-up, %d timed\n", b.cfg.warmup, b.cfg.nRT)
	rt := b.row("RunCode(\"1+1\") round trip, warm context", "ms", e2bNone)
	cmd := b.row("for scale: Commands.Run(\"true\") round trip, same sandbox", "ms", e2bNone)
	sbx, err := b.cold.Create(bg(), sdk.CreateOptions{Template: sdk.CodeInterpreterTemplate, Timeout: 10 * time.Minute})
	if err != nil {
		rt.fail(err)
		return
	}
	defer kill(sbx)
	for i := 0; i < b.cfg.warmup; i++ {
		if _, err := sbx.RunCode(bg(), "1+1", nil); err != nil {
			rt.fail(err)
			return
		}
	}
	for i := 0; i < b.cfg.nRT && b.ctx.Err() == nil; i++ {
		start := time.Now()
		exec, err := sbx.RunCode(bg(), "1+1", nil)
		d := time.Since(start)
		if err == nil && exec.Text() != "2" {
			err = fmt.Errorf("RunCode(\"1+1\") gave %q", exec.Text())
		}
		if err != nil {
			rt.fail(err)
			continue
		}
		rt.add(ms(d))
	}
	for i := 0; i < b.cfg.nRT/4+5 && b.ctx.Err() == nil; i++ {
		start := time.Now()
		_, err := sbx.Commands.Run(bg(), "true", nil)
		d := time.Since(start)
		if err != nil {
			cmd.fail(err)
			continue
		}
		if i >= 5 {
			cmd.add(ms(d))
		}
	}
}

// memSettle is how long sandboxes idle before they are measured.
const memSettle = 10 * time.Second

// memory measures -mem idle sandboxes of code-interpreter-v1, then of
// base, each given one call first (RunCode("1+1"), Commands.Run("true")).
func (b *bench) memory() {
	for _, t := range []struct{ template, call string }{
		{sdk.CodeInterpreterTemplate, "RunCode(\"1+1\")"},
		{"base", "Commands.Run(\"true\")"},
	} {
		if b.ctx.Err() != nil {
			return
		}
		fmt.Printf("==> idle memory: %d sandboxes of %s, one %s each, %v idle\n", b.cfg.mem, t.template, t.call, memSettle)
		e2b := e2bMem
		if t.template == "base" {
			e2b = "(Hutch's base, for scale)"
		}
		usage := b.row(fmt.Sprintf("idle %s sandbox: memory cgroup usage", t.template), "MiB", e2b)
		anon := b.row(fmt.Sprintf("idle %s sandbox: its anonymous memory (cgroup, no page cache)", t.template), "MiB", e2b)
		pss := b.row(fmt.Sprintf("idle %s sandbox: PSS of its processes", t.template), "MiB", e2b)
		var made []*sdk.Sandbox
		for i := 0; i < b.cfg.mem && b.ctx.Err() == nil; i++ {
			sbx, err := b.cold.Create(bg(), sdk.CreateOptions{Template: t.template, Timeout: 10 * time.Minute})
			if err != nil {
				usage.fail(err)
				continue
			}
			made = append(made, sbx)
			if t.template == "base" {
				_, err = sbx.Commands.Run(bg(), "true", nil)
			} else {
				_, err = sbx.RunCode(bg(), "1+1", nil)
			}
			if err != nil {
				usage.fail(err)
			}
		}
		select {
		case <-time.After(memSettle):
		case <-b.ctx.Done():
		}
		for _, sbx := range made {
			dir := cgroupDir("memory", sbx.ID)
			if dir == "" {
				usage.fail(fmt.Errorf("no memory cgroup of %s under /sys/fs/cgroup", sbx.ID))
				continue
			}
			if v, err := readInt(filepath.Join(dir, "memory.usage_in_bytes"), filepath.Join(dir, "memory.current")); err == nil {
				usage.add(float64(v) / (1 << 20))
			} else {
				usage.fail(err)
			}
			if v, err := statField(filepath.Join(dir, "memory.stat"), "total_rss", "anon"); err == nil {
				anon.add(float64(v) / (1 << 20))
			} else {
				anon.fail(err)
			}
			var kib int64
			for _, pid := range cgroupProcs(sbx.ID) {
				if r, err := harness.ReadRollup(pid); err == nil {
					kib += r.Pss
				}
			}
			pss.add(float64(kib) / 1024)
		}
		for _, sbx := range made {
			kill(sbx)
		}
	}
}

// cgroupDir is sandbox id's cgroup directory of controller ctrl (cgroup
// v1 or hybrid: /sys/fs/cgroup/<ctrl>/hutch/<id>; v2:
// /sys/fs/cgroup/hutch/<id>); "" when there is none.
func cgroupDir(ctrl, id string) string {
	for _, d := range []string{filepath.Join("/sys/fs/cgroup", ctrl, "hutch", id), filepath.Join("/sys/fs/cgroup", "hutch", id)} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// cgroupProcs lists the processes in sandbox id's cgroup and below.
func cgroupProcs(id string) []int {
	dir := cgroupDir("pids", id)
	if dir == "" {
		dir = cgroupDir("memory", id)
	}
	if dir == "" {
		return nil
	}
	var out []int
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out
}

// readInt reads the first of files that exists as one integer.
func readInt(files ...string) (int64, error) {
	var last error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			last = err
			continue
		}
		return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	return 0, last
}

// statField reads the first of keys found in a memory.stat file.
func statField(file string, keys ...string) (int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	vals := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			vals[k] = n
		}
	}
	for _, k := range keys {
		if v, ok := vals[k]; ok {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%s has none of %v", file, keys)
}

func pct(sorted []float64, q float64) float64 {
	d := make([]time.Duration, len(sorted))
	for i, v := range sorted {
		d[i] = time.Duration(v * 1e6)
	}
	return float64(harness.Pct(d, q)) / 1e6
}

func (b *bench) printTable() {
	rows := [][]string{{"case", "unit", "n", "fail", "p50", "p95", "p99", "E2B (published)"}}
	for _, r := range b.rows {
		s := append([]float64(nil), r.samples...)
		sort.Float64s(s)
		line := []string{r.name, r.unit, strconv.Itoa(len(s)), strconv.Itoa(r.fails)}
		if len(s) == 0 {
			line = append(line, "-", "-", "-")
		} else {
			for _, q := range []float64{0.5, 0.95, 0.99} {
				line = append(line, strconv.FormatFloat(pct(s, q), 'f', 1, 64))
			}
		}
		rows = append(rows, append(line, r.e2b))
	}
	fmt.Println("p99 is the slowest with fewer than 100 samples")
	harness.PrintTable(rows, 1, 7)
	fmt.Println()
	for _, r := range b.rows {
		if r.firstErr != "" {
			fmt.Printf("%s: first failure: %s\n", r.name, r.firstErr)
		}
	}
	fmt.Println("E2B (published): ~150 ms is E2B's stated sandbox start (e2b.dev), which does not include a code interpreter's first run;")
	fmt.Println("E2B publishes no figure for create → first runCode, for a runCode round trip or for an idle sandbox's memory use")
	fmt.Println("(its default sandbox is given 512 MiB: a limit, not use). \"none\" marks those rows.")
}
