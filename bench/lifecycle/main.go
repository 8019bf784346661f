// Command lifecycle is Hutch's sandbox lifecycle benchmark: p50/p95/p99 of
// pause and resume, snapshots, create from a snapshot and fork, side by
// side with the goals of the issue that asked for them.
//
//   - pause/resume, per mode, with a process in the sandbox that has
//     touched -small and -big MiB of memory and stays: pause {} (the
//     sandbox frozen in place, memory kept) against connect; pause
//     {"memory":false} (its writable layer captured into the template
//     store, its processes killed, its slot freed) against connect (which
//     boots it again) and connect until a first command answers. Next to
//     it, the freeze mode's obvious alternative: `podman pause` and
//     `podman unpause` of a container (runc) holding the same memory;
//   - snapshot of a sandbox with -snap-small and -snap-big MB of changed
//     files (random data, written once before the iterations; every
//     snapshot captures the whole writable layer): the call's latency,
//     and the longest stall a 1 ms ticker inside the sandbox saw during
//     it (how long the source was frozen, as its processes see it);
//   - create from a snapshot against from a template (base): time to the
//     201 and to the first command (`true`), both on a server without a
//     warm pool (--warm 0), and from the template on a server with its
//     default pool (-warm-url);
//   - fork of N = 1, 4, 16: the call until its 201 (all N items), and
//     until every fork has answered a first command (each reached by
//     Client.Connect, as a Go SDK user would, all at once).
//
// It is meant to be started by bench/lifecycle.sh, which starts the
// servers in a network namespace of its own and sets E2B_API_KEY. The
// snapshots it takes go to the machine's template store (shared with
// others), named -prefix-…, and are deleted by the end; the sandboxes are
// killed here and removed again by the script.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

type config struct {
	url, warmURL     string
	warmN            int
	n, nBig          int
	small, big       int // MiB of touched memory
	snapSmall        int // MB of changed files
	snapBig          int
	forks            string
	forkIters        string
	podman, rootfs   string
	serveArgs, netns string
	prefix           string
	only             string
}

// A case is one row of the results: its times, failures and goal.
type result struct {
	name     string
	times    []time.Duration
	fails    int
	firstErr string
	goal     string
	// check says whether the goal is met, from this row's p50 (and the
	// others'); nil: no goal to check.
	check func(p50 time.Duration) string
	note  string
}

func (r *result) add(d time.Duration) { r.times = append(r.times, d) }
func (r *result) fail(err error) {
	r.fails++
	if r.firstErr == "" {
		r.firstErr = harness.OneLine(err.Error())
	}
	fmt.Printf("  %s: %v\n", r.name, err)
}

type bench struct {
	cfg    config
	ctx    context.Context
	c      *sdk.Client // the --warm 0 server
	warm   *sdk.Client // the server with a warm pool, if any
	hc     *http.Client
	key    string
	rows   []*result
	byName map[string]*result
	// snapshots taken and not deleted yet, by id; deleted at the end.
	mu    sync.Mutex
	snaps map[string]bool
}

func main() {
	os.Exit(realMain())
}

func realMain() int {
	var cfg config
	flag.StringVar(&cfg.url, "url", "", "the hutch serve --warm 0 to measure")
	flag.StringVar(&cfg.warmURL, "warm-url", "", "a hutch serve with a warm pool of base (create rows only)")
	flag.IntVar(&cfg.warmN, "warm", 0, "its pool's size (for the header)")
	flag.IntVar(&cfg.n, "n", 40, "iterations of the small cases")
	flag.IntVar(&cfg.nBig, "n-big", 15, "iterations of the big cases (-big MiB, -snap-big MB)")
	flag.IntVar(&cfg.small, "small", 64, "MiB of touched memory, small case")
	flag.IntVar(&cfg.big, "big", 448, "MiB of touched memory, big case (a sandbox's memory limit is 512 MiB)")
	flag.IntVar(&cfg.snapSmall, "snap-small", 10, "MB of changed files, small snapshot")
	flag.IntVar(&cfg.snapBig, "snap-big", 500, "MB of changed files, big snapshot")
	flag.StringVar(&cfg.forks, "forks", "1,4,16", "fork counts")
	flag.StringVar(&cfg.forkIters, "fork-iters", "30,15,10", "iterations per fork count")
	flag.StringVar(&cfg.podman, "podman", "", "podman binary for the podman pause rows (empty: none)")
	flag.StringVar(&cfg.rootfs, "rootfs", "", "the base template's root directory, for podman --rootfs (default: the store's base)")
	flag.StringVar(&cfg.serveArgs, "serve-args", "", "the server's flags (for the header)")
	flag.StringVar(&cfg.netns, "netns", "", "the network namespace (for the header)")
	flag.StringVar(&cfg.prefix, "prefix", fmt.Sprintf("hutch-bench-lc-%d", os.Getpid()), "prefix of the snapshots' names")
	flag.StringVar(&cfg.only, "only", "", "comma-separated parts: pause,podman,snapshot,create,fork (default all)")
	flag.Parse()
	if cfg.rootfs == "" {
		cfg.rootfs = harness.BaseRootfs(harness.TemplatesDir())
	}
	known := []string{"pause", "podman", "snapshot", "create", "fork"}
	bad := ""
	if cfg.url == "" {
		bad = "-url is required"
	}
	parts, code := harness.CheckArgs("lifecycle", bad, cfg.only, known)
	if code != 0 {
		return code
	}
	want := func(p string) bool { return parts == nil || parts[p] }

	ctx, stop := harness.SignalContext()
	defer stop()
	b := &bench{cfg: cfg, ctx: ctx, key: os.Getenv("E2B_API_KEY"), snaps: map[string]bool{}, byName: map[string]*result{},
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	var err error
	if b.c, err = sdk.NewClient(sdk.Config{APIKey: b.key, APIURL: cfg.url, SandboxURL: cfg.url}); err != nil {
		fmt.Fprintln(os.Stderr, "lifecycle:", err)
		return 1
	}
	if cfg.warmURL != "" {
		if b.warm, err = sdk.NewClient(sdk.Config{APIKey: b.key, APIURL: cfg.warmURL, SandboxURL: cfg.warmURL}); err != nil {
			fmt.Fprintln(os.Stderr, "lifecycle:", err)
			return 1
		}
	}
	defer b.deleteSnapshots()

	harness.PrintTitle("Hutch sandbox lifecycle: pause/resume, snapshots, create from a snapshot, fork")
	fmt.Printf("hutch: %s\n", harness.Revision())
	fmt.Printf("server: hutch serve %s (and %s for the warm rows)\n", cfg.serveArgs, warmDesc(cfg))
	fmt.Printf("network namespace: %s\n", cfg.netns)
	fmt.Printf("client: Hutch's Go SDK (sdk/) for create, connect and commands; plain HTTP for pause, snapshots, fork\n")
	harness.PrintLoad("before the runs")
	fmt.Println()

	// Create first: resume from a filesystem pause is judged against it.
	if want("create") && ctx.Err() == nil {
		b.createRows()
	}
	if want("pause") && ctx.Err() == nil {
		b.pauseRows(cfg.small, cfg.n)
		b.pauseRows(cfg.big, cfg.nBig)
	}
	if want("podman") && ctx.Err() == nil {
		b.podmanRows(cfg.small, cfg.n)
		b.podmanRows(cfg.big, cfg.nBig)
	}
	if want("snapshot") && ctx.Err() == nil {
		b.snapshotRows(cfg.snapSmall, cfg.n)
		b.snapshotRows(cfg.snapBig, cfg.nBig)
	}
	if want("fork") && ctx.Err() == nil {
		b.forkRows()
	}

	harness.PrintLoad("after the runs")
	fmt.Println()
	b.printTable()
	return harness.ExitCode(ctx, "lifecycle")
}

func warmDesc(cfg config) string {
	if cfg.warmURL == "" {
		return "none"
	}
	return fmt.Sprintf("one with its default pool of %d base sandboxes", cfg.warmN)
}

// row makes (or returns) the row called name, in order of first use.
func (b *bench) row(name string) *result {
	if r := b.byName[name]; r != nil {
		return r
	}
	r := &result{name: name}
	b.rows = append(b.rows, r)
	b.byName[name] = r
	return r
}

func p50(name string, rows map[string]*result) time.Duration {
	r := rows[name]
	if r == nil || len(r.times) == 0 {
		return 0
	}
	t := append([]time.Duration(nil), r.times...)
	sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
	return harness.Pct(t, 0.5)
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }

func (b *bench) printTable() {
	rows := [][]string{{"case", "n", "fail", "p50", "p95", "p99", "goal (issue)", "met (p50)"}}
	for _, r := range b.rows {
		t := append([]time.Duration(nil), r.times...)
		sort.Slice(t, func(i, j int) bool { return t[i] < t[j] })
		line := []string{r.name, strconv.Itoa(len(t)), strconv.Itoa(r.fails)}
		if len(t) == 0 {
			line = append(line, "-", "-", "-")
		} else {
			line = append(line, ms(harness.Pct(t, 0.5)), ms(harness.Pct(t, 0.95)), ms(harness.Pct(t, 0.99)))
		}
		met := ""
		if r.check != nil && len(t) > 0 {
			met = r.check(harness.Pct(t, 0.5))
		}
		line = append(line, r.goal, met)
		rows = append(rows, line)
	}
	fmt.Println("times in ms; p99 is the slowest with fewer than 100 iterations")
	harness.PrintTable(rows, 6, 7)
	fmt.Println()
	for _, r := range b.rows {
		if r.firstErr != "" {
			fmt.Printf("%s: first failure: %s\n", r.name, r.firstErr)
		}
		if r.note != "" {
			fmt.Printf("%s: %s\n", r.name, r.note)
		}
	}
	fmt.Println()
	fmt.Println("anchors (vendor figures, VMs on big hosts): CubeSandbox resume 42 ms, pause 558 ms, snapshot ~50 ms + ~40 ms per 100 MB changed,")
	fmt.Println("create from a snapshot ~64 ms flat, clone 220 ms; AgentENV resume p50 45 ms; Blaxel resume < 25 ms")
}

// atMost is a goal check: met when p50 ≤ limit().
func atMost(limit func() time.Duration) func(time.Duration) string {
	return func(p time.Duration) string {
		l := limit()
		if l <= 0 {
			return "?"
		}
		if p <= l {
			return "yes (≤ " + ms(l) + ")"
		}
		return fmt.Sprintf("no (%.1f× %s)", float64(p)/float64(l), ms(l))
	}
}

func fixed(d time.Duration) func() time.Duration { return func() time.Duration { return d } }

// ---- HTTP calls the SDK does not make -------------------------------

// call makes an API request to the --warm 0 server; want is the expected
// status; out, when not nil, gets the JSON answer.
func (b *bench) call(method, path string, in any, want int, out any) error {
	var body io.Reader
	if in != nil {
		j, _ := json.Marshal(in)
		body = bytes.NewReader(j)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, b.cfg.url+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", b.key)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func (b *bench) pause(id string, memory bool) error {
	var in any = map[string]any{}
	if !memory {
		in = map[string]any{"memory": false}
	}
	return b.call("POST", "/sandboxes/"+id+"/pause", in, http.StatusNoContent, nil)
}

// connect resumes a paused sandbox (201) through the SDK.
func (b *bench) connect(id string) (*sdk.Sandbox, error) {
	return b.c.Connect(b.bg(), id, sdk.ConnectOptions{Timeout: 10 * time.Minute})
}

func (b *bench) snapshot(id, name string) (string, error) {
	var out struct {
		SnapshotID string `json:"snapshotID"`
	}
	if err := b.call("POST", "/sandboxes/"+id+"/snapshots", map[string]any{"name": name}, http.StatusCreated, &out); err != nil {
		return "", err
	}
	b.mu.Lock()
	b.snaps[out.SnapshotID] = true
	b.mu.Unlock()
	return out.SnapshotID, nil
}

func (b *bench) deleteSnapshot(id string) error {
	err := b.call("DELETE", "/templates/"+id, nil, http.StatusNoContent, nil)
	if err == nil {
		b.mu.Lock()
		delete(b.snaps, id)
		b.mu.Unlock()
	}
	return err
}

func (b *bench) deleteSnapshots() {
	for id := range b.snaps {
		if err := b.deleteSnapshot(id); err != nil {
			fmt.Printf("warning: snapshot %s not deleted: %v\n", id, err)
		}
	}
}

type forkItem struct {
	Sandbox *struct {
		SandboxID string `json:"sandboxID"`
	} `json:"sandbox"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// bg is the context of calls in flight: not the signal context, so that a
// call in flight on Ctrl-C finishes and its sandboxes can be killed.
func (b *bench) bg() context.Context { return context.Background() }

// newSandbox creates a base sandbox on the --warm 0 server (untimed).
func (b *bench) newSandbox() (*sdk.Sandbox, error) {
	return b.c.Create(b.bg(), sdk.CreateOptions{Timeout: 20 * time.Minute})
}

func (b *bench) kill(s *sdk.Sandbox) {
	if s != nil {
		if err := s.Kill(b.bg()); err != nil && !errors.Is(err, sdk.ErrNotFound) {
			fmt.Printf("warning: kill %s: %v\n", s.ID, err)
		}
	}
}

func run(s *sdk.Sandbox, cmd string) (string, error) {
	res, err := s.Commands.Run(context.Background(), cmd, &sdk.RunOptions{Timeout: 5 * time.Minute})
	if err != nil {
		return "", err
	}
	return res.Stdout, nil
}

// touchCmd starts, in the background, a process that allocates and
// touches mib MiB and stays, and returns once it has touched them all.
func touchCmd(mib int) string {
	py := fmt.Sprintf(`import time
b = bytearray(%d << 20)
for i in range(0, len(b), 4096): b[i] = 1
open("/tmp/touched", "w").close()
time.sleep(1e9)`, mib)
	return fmt.Sprintf(`rm -f /tmp/touched; setsid python3 -c '%s' </dev/null >/dev/null 2>&1 &
for i in $(seq 1 600); do [ -f /tmp/touched ] && exit 0; sleep 0.05; done; echo "not touched after 30 s" >&2; exit 1`, py)
}

// ---- create --------------------------------------------------------

func (b *bench) createRows() {
	fmt.Println("==> create from a template vs from a snapshot")
	// The snapshot: of a base sandbox with -snap-small MB of files.
	src, err := b.newSandbox()
	if err != nil {
		b.row("create from snapshot").fail(err)
		return
	}
	defer b.kill(src)
	if _, err := run(src, fmt.Sprintf("head -c %dM /dev/urandom > ~/changed", b.cfg.snapSmall)); err != nil {
		b.row("create from snapshot").fail(err)
		return
	}
	snapID, err := b.snapshot(src.ID, b.cfg.prefix+"-create")
	if err != nil {
		b.row("create from snapshot").fail(err)
		return
	}
	tpl201 := b.row("create from template (base, --warm 0) → 201")
	tplCmd := b.row("create from template (base, --warm 0) → first command")
	snap201 := b.row("create from snapshot (base + 10 MB) → 201")
	snapCmd := b.row("create from snapshot (base + 10 MB) → first command")
	snap201.goal = "≤ 1.2× from template"
	snapCmd.goal = "≤ 1.2× from template"
	rows := b.byName
	snap201.check = atMost(func() time.Duration { return p50(tpl201.name, rows) * 12 / 10 })
	snapCmd.check = atMost(func() time.Duration { return p50(tplCmd.name, rows) * 12 / 10 })
	one := func(c *sdk.Client, tpl string, r201, rCmd *result) {
		t0 := time.Now()
		s, err := c.Create(b.bg(), sdk.CreateOptions{Template: tpl, Timeout: 10 * time.Minute})
		if err != nil {
			r201.fail(err)
			return
		}
		defer b.kill(s)
		t1 := time.Now()
		if _, err := run(s, "true"); err != nil {
			rCmd.fail(err)
			return
		}
		t2 := time.Now()
		r201.add(t1.Sub(t0))
		rCmd.add(t2.Sub(t0))
	}
	// One unmeasured of each first (page cache, the client's connection).
	one(b.c, "", &result{name: "warm-up"}, &result{name: "warm-up"})
	one(b.c, snapID, &result{name: "warm-up"}, &result{name: "warm-up"})
	// Interleaved, so that both see the same machine.
	for i := 0; i < b.cfg.n && b.ctx.Err() == nil; i++ {
		one(b.c, "", tpl201, tplCmd)
		one(b.c, snapID, snap201, snapCmd)
	}
	if b.warm != nil && b.ctx.Err() == nil {
		w201 := b.row(fmt.Sprintf("create from template (base, --warm %d) → 201", b.cfg.warmN))
		wCmd := b.row(fmt.Sprintf("create from template (base, --warm %d) → first command", b.cfg.warmN))
		one(b.warm, "", &result{name: "warm-up"}, &result{name: "warm-up"})
		for i := 0; i < b.cfg.n && b.ctx.Err() == nil; i++ {
			// Let the pool refill (a refill starts a sandbox): each create
			// finds it full, as a create now and then would.
			time.Sleep(500 * time.Millisecond)
			one(b.warm, "", w201, wCmd)
		}
	}
	if err := b.deleteSnapshot(snapID); err != nil {
		fmt.Printf("warning: %v\n", err)
	}
}

// ---- pause/resume -----------------------------------------------------

func (b *bench) pauseRows(mib, n int) {
	fmt.Printf("==> pause/resume with %d MiB touched\n", mib)
	full := func(suffix string) *result { return b.row(fmt.Sprintf("%d MiB, keep memory: %s", mib, suffix)) }
	fsr := func(suffix string) *result { return b.row(fmt.Sprintf("%d MiB, filesystem: %s", mib, suffix)) }
	pF, rF, cF := full("pause"), full("resume (connect)"), full("resume → first command")
	pS, rS, cS := fsr("pause"), fsr("resume (connect, boots)"), fsr("resume → first command")
	rF.goal = "p50 ≤ 5 ms"
	rF.check = atMost(fixed(5 * time.Millisecond))
	rows := b.byName
	tplCmd := "create from template (base, --warm 0) → first command"
	tpl201 := "create from template (base, --warm 0) → 201"
	rS.goal = "≤ create (→201) + 5 ms"
	rS.check = atMost(func() time.Duration {
		if p := p50(tpl201, rows); p > 0 {
			return p + 5*time.Millisecond
		}
		return 0
	})
	cS.goal = "≤ create (→cmd) + 5 ms"
	cS.check = atMost(func() time.Duration {
		if p := p50(tplCmd, rows); p > 0 {
			return p + 5*time.Millisecond
		}
		return 0
	})

	s, err := b.newSandbox()
	if err != nil {
		pF.fail(err)
		return
	}
	defer b.kill(s)
	if _, err := run(s, touchCmd(mib)); err != nil {
		pF.fail(fmt.Errorf("touching %d MiB: %w", mib, err))
		return
	}
	pid, _ := run(s, "pgrep -f '[b]ytearray' | head -n 1")
	pid = strings.TrimSpace(pid)

	// Keep memory: the same sandbox and process throughout.
	for i := 0; i <= n && b.ctx.Err() == nil; i++ {
		measured := i > 0 // the first round is a warm-up
		t0 := time.Now()
		if err := b.pause(s.ID, true); err != nil {
			pF.fail(err)
			return
		}
		t1 := time.Now()
		if _, err := b.connect(s.ID); err != nil {
			rF.fail(err)
			return
		}
		t2 := time.Now()
		if _, err := run(s, "true"); err != nil {
			cF.fail(err)
			return
		}
		t3 := time.Now()
		if measured {
			pF.add(t1.Sub(t0))
			rF.add(t2.Sub(t1))
			cF.add(t3.Sub(t1))
		}
	}
	if out, err := run(s, "kill -0 "+pid+" && echo alive"); err != nil || !strings.Contains(out, "alive") {
		pF.note = fmt.Sprintf("the touching process (pid %q) did not survive the pauses: %v", pid, err)
	}

	// Filesystem: every pause kills the process, so it is started again
	// (untimed) after each resume.
	for i := 0; i <= n && b.ctx.Err() == nil; i++ {
		measured := i > 0
		if i > 0 {
			if _, err := run(s, touchCmd(mib)); err != nil {
				pS.fail(fmt.Errorf("touching %d MiB again: %w", mib, err))
				return
			}
		}
		t0 := time.Now()
		if err := b.pause(s.ID, false); err != nil {
			pS.fail(err)
			return
		}
		t1 := time.Now()
		if _, err := b.connect(s.ID); err != nil {
			rS.fail(err)
			return
		}
		t2 := time.Now()
		if _, err := run(s, "true"); err != nil {
			cS.fail(err)
			return
		}
		t3 := time.Now()
		if measured {
			pS.add(t1.Sub(t0))
			rS.add(t2.Sub(t1))
			cS.add(t3.Sub(t1))
		}
	}
	if out, _ := run(s, "pgrep -f '[b]ytearray' || echo none"); !strings.Contains(out, "none") {
		pS.note = "a process survived a pause without memory: " + harness.OneLine(out)
	}
}

// ---- podman pause/unpause ------------------------------------------------

func (b *bench) podmanRows(mib, n int) {
	if b.cfg.podman == "" || b.cfg.rootfs == "" {
		return
	}
	fmt.Printf("==> podman pause/unpause (runc) with %d MiB touched\n", mib)
	pP := b.row(fmt.Sprintf("%d MiB, podman pause (runc)", mib))
	pU := b.row(fmt.Sprintf("%d MiB, podman unpause (runc)", mib))
	pE := b.row(fmt.Sprintf("%d MiB, podman unpause → exec true", mib))
	global := []string{"--runtime=runc", "--cgroup-manager=cgroupfs", "--events-backend=none"}
	pm := func(args ...string) error {
		cmd := exec.Command(b.cfg.podman, append(append([]string{}, global...), args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("podman %s: %v: %s", strings.Join(args, " "), err, harness.OneLine(string(out)))
		}
		return nil
	}
	name := fmt.Sprintf("%s-podman", b.cfg.prefix)
	pm("rm", "-f", "-t", "0", name)
	defer pm("rm", "-f", "-t", "0", name)
	py := fmt.Sprintf("import time\nb = bytearray(%d << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nopen('/tmp/touched', 'w').close()\ntime.sleep(1e9)", mib)
	// As bench/create's podman peer (its flags, Hutch's limits), but
	// python3 touching the memory instead of sleep.
	if err := pm("run", "-d", "--name="+name, "--network=none", "--cgroupns=private", "--log-driver=none",
		"--ulimit=nofile=1024:1024", "--ulimit=nproc=4096:4096",
		"--memory=512m", "--memory-swap=512m", "--cpus=1", "--pids-limit=512",
		"--rootfs", b.cfg.rootfs+":O", "/usr/bin/python3", "-c", py); err != nil {
		pP.fail(err)
		return
	}
	touched := false
	for i := 0; i < 600 && !touched; i++ {
		touched = pm("exec", name, "test", "-f", "/tmp/touched") == nil
		if !touched {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !touched {
		pP.fail(fmt.Errorf("the container did not touch %d MiB within 30 s", mib))
		return
	}
	for i := 0; i <= n && b.ctx.Err() == nil; i++ {
		t0 := time.Now()
		if err := pm("pause", name); err != nil {
			pP.fail(err)
			return
		}
		t1 := time.Now()
		if err := pm("unpause", name); err != nil {
			pU.fail(err)
			return
		}
		t2 := time.Now()
		if err := pm("exec", name, "/bin/true"); err != nil {
			pE.fail(err)
			return
		}
		t3 := time.Now()
		if i > 0 {
			pP.add(t1.Sub(t0))
			pU.add(t2.Sub(t1))
			pE.add(t3.Sub(t1))
		}
	}
}

// ---- snapshots ---------------------------------------------------------

// ticker runs in the sandbox: it sleeps 1 ms at a time and appends to
// /tmp/stalls every gap longer than 5 ms it sees (in ms): the sandbox
// frozen, or not given the CPU.
const ticker = `import time
last = time.monotonic()
while True:
    time.sleep(0.001)
    t = time.monotonic()
    if t - last > 0.005:
        with open("/tmp/stalls", "a") as f: f.write("%.1f\n" % ((t - last) * 1000))
    last = t`

func (b *bench) snapshotRows(mb, n int) {
	fmt.Printf("==> snapshot with %d MB of changed files\n", mb)
	r := b.row(fmt.Sprintf("snapshot, %d MB changed", mb))
	st := b.row(fmt.Sprintf("snapshot, %d MB changed: longest stall inside", mb))
	goal := 20*time.Millisecond + time.Duration(mb)*20*time.Millisecond/100
	r.goal = fmt.Sprintf("≤ 20 ms + 20 ms/100 MB = %s", ms(goal))
	r.check = atMost(fixed(goal))
	st.goal = "(≈ the call)"
	s, err := b.newSandbox()
	if err != nil {
		r.fail(err)
		return
	}
	defer b.kill(s)
	// Files of 10 MB each (one when smaller), random: incompressible.
	files := max(1, mb/10)
	each := mb / files
	if _, err := run(s, fmt.Sprintf("mkdir -p ~/changed && for i in $(seq 1 %d); do head -c %dM /dev/urandom > ~/changed/f$i; done && sync", files, each)); err != nil {
		r.fail(err)
		return
	}
	if _, err := run(s, fmt.Sprintf("setsid python3 -c '%s' </dev/null >/dev/null 2>&1 &", ticker)); err != nil {
		r.fail(err)
		return
	}
	time.Sleep(200 * time.Millisecond)
	for i := 0; i <= n && b.ctx.Err() == nil; i++ {
		if _, err := run(s, ": > /tmp/stalls"); err != nil {
			st.fail(err)
			return
		}
		// Let the command's own stall pass.
		time.Sleep(50 * time.Millisecond)
		t0 := time.Now()
		id, err := b.snapshot(s.ID, fmt.Sprintf("%s-%dmb", b.cfg.prefix, mb))
		if err != nil {
			r.fail(err)
			continue
		}
		d := time.Since(t0)
		time.Sleep(20 * time.Millisecond)
		out, err := run(s, "cat /tmp/stalls")
		if err != nil {
			st.fail(err)
		}
		var longest time.Duration
		for _, f := range strings.Fields(out) {
			if v, err := strconv.ParseFloat(f, 64); err == nil {
				longest = max(longest, time.Duration(v*1e6))
			}
		}
		if i > 0 {
			r.add(d)
			st.add(longest)
		}
		// Each snapshot under the same name replaces the one before; the
		// replaced one is removed by the server. Delete this one now.
		if err := b.deleteSnapshot(id); err != nil {
			fmt.Printf("warning: %v\n", err)
		}
	}
}

// ---- fork -------------------------------------------------------------

func (b *bench) forkRows() {
	counts := intList(b.cfg.forks)
	iters := intList(b.cfg.forkIters)
	src, err := b.newSandbox()
	if err != nil {
		b.row("fork").fail(err)
		return
	}
	defer b.kill(src)
	if _, err := run(src, fmt.Sprintf("head -c %dM /dev/urandom > ~/changed", b.cfg.snapSmall)); err != nil {
		b.row("fork").fail(err)
		return
	}
	for k, count := range counts {
		n := b.cfg.n
		if k < len(iters) {
			n = iters[k]
		}
		fmt.Printf("==> fork of %d (source with %d MB changed)\n", count, b.cfg.snapSmall)
		r201 := b.row(fmt.Sprintf("fork N=%d → 201 (all items)", count))
		rCmd := b.row(fmt.Sprintf("fork N=%d → every fork answered a command", count))
		if count == 16 {
			r201.goal = "≤ 500 ms"
			r201.check = atMost(fixed(500 * time.Millisecond))
		}
		for i := 0; i <= n && b.ctx.Err() == nil; i++ {
			var items []forkItem
			t0 := time.Now()
			err := b.call("POST", "/sandboxes/"+src.ID+"/fork", map[string]any{"count": count, "timeout": 600}, http.StatusCreated, &items)
			t1 := time.Now()
			if err != nil {
				r201.fail(err)
				continue
			}
			var ids []string
			var itemErr error
			for _, it := range items {
				switch {
				case it.Sandbox != nil:
					ids = append(ids, it.Sandbox.SandboxID)
				case it.Error != nil && itemErr == nil:
					itemErr = errors.New("a fork failed: " + it.Error.Message)
				}
			}
			// Every fork: connect (the SDK's handle) and `true`, all at once.
			var wg sync.WaitGroup
			errs := make([]error, len(ids))
			handles := make([]*sdk.Sandbox, len(ids))
			for j, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h, err := b.c.Connect(b.bg(), id, sdk.ConnectOptions{Timeout: 10 * time.Minute})
					if err != nil {
						errs[j] = err
						return
					}
					handles[j] = h
					_, errs[j] = run(h, "true")
				}()
			}
			wg.Wait()
			t2 := time.Now()
			cmdErr := errors.Join(errs...)
			// Kill the forks (untimed), all at once.
			for _, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := b.c.Kill(b.bg(), id); err != nil {
						fmt.Printf("warning: kill fork %s: %v\n", id, err)
					}
				}()
			}
			wg.Wait()
			switch {
			case itemErr != nil || len(ids) != count:
				r201.fail(fmt.Errorf("%d of %d forks: %v", len(ids), count, itemErr))
			case cmdErr != nil:
				rCmd.fail(cmdErr)
			case i > 0:
				r201.add(t1.Sub(t0))
				rCmd.add(t2.Sub(t0))
			}
		}
	}
}

func intList(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, v)
		}
	}
	return out
}
