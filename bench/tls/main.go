// Command tls is Hutch's TLS benchmark: what serving TLS costs a user of
// `hutch serve`, next to what they would pick instead, nginx terminating
// TLS in front of Hutch (docs/tls.md, "Behind a reverse proxy"). Rows,
// each measured with the same client against the same sandbox:
//
//   - plain: HTTP/1.1 to `hutch serve` by address (E2B_API_URL mode: the
//     E2b-Sandbox-Id and E2b-Sandbox-Port headers route to the sandbox);
//   - tls-h1, tls-h2: Hutch's own TLS (--domain hutch.localhost
//     --tls-self-signed, port 443), HTTP/1.1 and HTTP/2 to
//     49983-<id>.hutch.localhost;
//   - nginx: nginx terminating TLS, HTTP/2 to the client, proxying to
//     `hutch serve --domain` on plain HTTP with docs/tls.md's
//     configuration (which opens a connection to Hutch per request);
//   - nginx-ka: the same with an upstream block that keeps those
//     connections alive.
//
// Per row: GET /health of envd and filesystem.Filesystem/Stat on a
// kept-alive connection, a new connection (TCP + full TLS handshake) and
// one GET /health, a 1 MiB upload and download through /files,
// process.Process/Start of /bin/true to its end event; then -c requests
// at once for -d (GET /health): requests per second over one HTTP/2
// connection or -c HTTP/1.1 connections, and the CPU per request of
// hutch serve, nginx and the client.
//
// The servers run one at a time, on fixed ports, in the network namespace
// bench/tls.sh makes for the run (unshare --net: loopback only); the
// sandbox is made by the first and taken over by each next one from the
// data directory (sandboxes outlive a server by design). It is meant to
// be started by bench/tls.sh; see bench/README.md. As root.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

type config struct {
	hutch, nginx, data, dir string
	domain, netns           string
	n, nConn, nFiles, nRun  int
	warmup, conc            int
	dur                     time.Duration
	only                    string
}

// rowKeys are the rows, in the tables' order.
var rowKeys = []string{"plain", "tls-h1", "tls-h2", "nginx", "nginx-ka"}

// op is one latency section of the table.
type op struct {
	key, name string
	n         func(cfg config) int
	size      int64 // bytes moved, for MB/s; 0: none
}

const fileSize = 1 << 20

var ops = []op{
	{"health", "GET /health of envd, kept-alive connection", func(c config) int { return c.n }, 0},
	{"stat", "filesystem.Filesystem/Stat (Connect, unary), kept-alive connection", func(c config) int { return c.n }, 0},
	{"conn", "new connection (TCP, full TLS handshake) + GET /health", func(c config) int { return c.nConn }, 0},
	{"upload", "1 MiB upload, POST /files (octet-stream), kept-alive", func(c config) int { return c.nFiles }, fileSize},
	{"download", "1 MiB download, GET /files, kept-alive", func(c config) int { return c.nFiles }, fileSize},
	{"run", "process.Process/Start of /bin/true to its end event, kept-alive", func(c config) int { return c.nRun }, 0},
}

// filePath is the /files rows' file in the sandbox.
const filePath = "/tmp/hutch-bench-tls-1MiB"

type series struct {
	times    []time.Duration // sorted once measured
	fails    int
	firstErr string
}

type tputResult struct {
	conns            int64
	reqs, fails      int
	elapsed          time.Duration
	lat              []time.Duration
	serve, nginx, me time.Duration // CPU used
	firstErr         string
}

type bench struct {
	cfg     config
	ctx     context.Context
	key     string
	sbx     *sdk.Sandbox
	rows    []*target
	want    map[string]bool
	results map[string]map[string]*series // op key → row key
	tput    map[string]*tputResult
	servers map[string]string // row key → the servers' command lines
	payload []byte
}

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-tls: run as root (bench/tls.sh)")
		os.Exit(1)
	}
	os.Exit(realMain())
}

func realMain() int {
	var cfg config
	flag.StringVar(&cfg.hutch, "hutch", "/usr/local/bin/hutch", "the hutch binary")
	flag.StringVar(&cfg.nginx, "nginx", "/usr/sbin/nginx", "the nginx binary")
	flag.StringVar(&cfg.data, "data", "", "hutch serve's data directory (fresh; required)")
	flag.StringVar(&cfg.dir, "dir", "", "work directory: logs, nginx's files (required)")
	flag.StringVar(&cfg.domain, "domain", "hutch.localhost", "the domain of the TLS rows")
	flag.StringVar(&cfg.netns, "netns", "", "the network namespace (for the header)")
	flag.IntVar(&cfg.n, "n", 2000, "measured GET /health and Stat calls per row")
	flag.IntVar(&cfg.nConn, "n-conn", 500, "measured new connections per row")
	flag.IntVar(&cfg.nFiles, "n-files", 200, "measured uploads and downloads per row")
	flag.IntVar(&cfg.nRun, "n-run", 500, "measured Start of /bin/true per row")
	flag.IntVar(&cfg.warmup, "warmup", 20, "warm-up calls per section (not measured)")
	flag.IntVar(&cfg.conc, "c", 32, "requests at once in the throughput line")
	flag.DurationVar(&cfg.dur, "d", 5*time.Second, "duration of the throughput line per row")
	flag.StringVar(&cfg.only, "only", "", "comma-separated rows ("+strings.Join(rowKeys, ",")+"); default all")
	flag.Parse()
	bad := ""
	switch {
	case cfg.data == "" || cfg.dir == "":
		bad = "-data and -dir are required"
	case cfg.n < 1 || cfg.nConn < 1 || cfg.nFiles < 1 || cfg.nRun < 1 || cfg.warmup < 0 || cfg.conc < 1 || cfg.dur <= 0:
		bad = "-n, -n-conn, -n-files, -n-run and -c must be >= 1, -warmup >= 0, -d > 0"
	}
	want, code := harness.CheckArgs("bench-tls", bad, cfg.only, rowKeys)
	if code != 0 {
		return code
	}
	ctx, stop := harness.SignalContext()
	defer stop()
	b := &bench{cfg: cfg, ctx: ctx, key: os.Getenv("E2B_API_KEY"), want: want,
		results: map[string]map[string]*series{}, tput: map[string]*tputResult{}, servers: map[string]string{}}
	if b.key == "" {
		fmt.Fprintln(os.Stderr, "bench-tls: E2B_API_KEY is not set (bench/tls.sh sets it)")
		return 2
	}
	b.payload = make([]byte, fileSize)
	for i := range b.payload {
		b.payload[i] = byte(i*7919 + i>>8)
	}
	if err := os.MkdirAll(cfg.dir+"/nginx", 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench-tls:", err)
		return 1
	}

	harness.PrintTitle("Hutch TLS benchmark: hutch serve's own TLS vs plain HTTP vs nginx in front")
	fmt.Printf("hutch: %s\n", harness.Revision())
	fmt.Printf("nginx: %s\n", nginxVersion(cfg.nginx))
	fmt.Printf("network namespace: %s\n", cfg.netns)
	fmt.Printf("client: Go net/http and connect-go (%s, GOMAXPROCS %d), in this harness: the same code for every row; it dials the server's loopback address itself (no name resolution timed); new connections make full handshakes (no session resumption)\n",
		runtime.Version(), runtime.GOMAXPROCS(0))
	fmt.Printf("sandbox: one, base template, made by the first server and taken over by each next one\n")
	fmt.Printf("runs per row: %d GET /health, %d Stat, %d new connections, %d uploads and %d downloads of 1 MiB, %d Start of /bin/true (each after %d warm-up calls); throughput: %d at once for %v\n",
		cfg.n, cfg.n, cfg.nConn, cfg.nFiles, cfg.nFiles, cfg.nRun, cfg.warmup, cfg.conc, cfg.dur)
	harness.PrintLoad("before")
	fmt.Println()

	err := b.run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-tls:", err)
	}
	fmt.Println()
	harness.PrintLoad("after the runs")
	fmt.Println()
	b.printTables()
	if err != nil {
		return 1
	}
	return harness.ExitCode(ctx, "bench-tls")
}

func (b *bench) wantRow(key string) bool { return b.want == nil || b.want[key] }

// run starts the servers one after the other and measures their rows.
func (b *bench) run() error {
	const plainAddr, tlsAddr = "127.0.0.1:3000", "127.0.0.1:443"
	common := []string{"--warm", "0", "--network=false"}

	// 1. Plain HTTP by address: it also makes the sandbox.
	plainFlags := append([]string{"--listen", plainAddr}, common...)
	serve, err := b.startServe("serve-plain", plainFlags...)
	if err != nil {
		return err
	}
	defer func() { serve.Stop(15 * time.Second) }()
	plainHC := func() (*http.Client, error) { return http.DefaultClient, nil }
	if err := waitHealthy(b.ctx, serve, plainHC, "http://"+plainAddr+"/health"); err != nil {
		return err
	}
	api, err := sdk.NewClient(sdk.Config{APIKey: b.key, APIURL: "http://" + plainAddr})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	b.sbx, err = api.Create(cctx, sdk.CreateOptions{Timeout: 30 * time.Minute})
	cancel()
	if err != nil {
		return fmt.Errorf("create the sandbox: %w", err)
	}
	fmt.Printf("sandbox %s\n", b.sbx.ID)
	plain := &target{key: "plain", name: "plain HTTP/1.1 to hutch serve (E2B_API_URL mode)", addr: plainAddr, routed: true}
	b.rows = append(b.rows, plain)
	b.servers["plain"] = "hutch serve " + strings.Join(plainFlags, " ")
	if b.wantRow("plain") {
		b.measureRow(plain, serve.Pid(), 0)
	}
	serve.Stop(15 * time.Second)
	if b.ctx.Err() != nil {
		return nil
	}

	// 2. Hutch's own TLS on :443.
	tlsFlags := append([]string{"--listen", ":443", "--domain", b.cfg.domain, "--tls-self-signed"}, common...)
	h1 := &target{key: "tls-h1", name: "hutch serve's TLS, HTTP/1.1", addr: tlsAddr}
	h2 := &target{key: "tls-h2", name: "hutch serve's TLS, HTTP/2", addr: tlsAddr, h2: true}
	b.rows = append(b.rows, h1, h2)
	if b.wantRow("tls-h1") || b.wantRow("tls-h2") {
		if serve, err = b.startServe("serve-tls", tlsFlags...); err != nil {
			return err
		}
		if err := waitHealthy(b.ctx, serve, b.apiClient(tlsAddr), "https://api."+b.cfg.domain+"/health"); err != nil {
			return err
		}
		for _, t := range []*target{h1, h2} {
			b.servers[t.key] = "hutch serve " + strings.Join(tlsFlags, " ")
			if b.wantRow(t.key) && b.ctx.Err() == nil {
				if t.roots, err = b.caPool(); err != nil {
					return err
				}
				b.measureRow(t, serve.Pid(), 0)
			}
		}
		serve.Stop(15 * time.Second)
	}
	if b.ctx.Err() != nil {
		return nil
	}

	// 3. nginx in front of hutch serve --domain on plain HTTP.
	ng := &target{key: "nginx", name: "nginx TLS, HTTP/2 → hutch serve plain HTTP/1.1 (docs/tls.md)", addr: tlsAddr, h2: true}
	ka := &target{key: "nginx-ka", name: "the same, upstream connections kept alive", addr: tlsAddr, h2: true}
	b.rows = append(b.rows, ng, ka)
	if !b.wantRow("nginx") && !b.wantRow("nginx-ka") {
		return nil
	}
	if _, _, err := b.issueNginxCert(); err != nil {
		return fmt.Errorf("nginx's certificate: %w", err)
	}
	behindFlags := append([]string{"--listen", plainAddr, "--domain", b.cfg.domain}, common...)
	if serve, err = b.startServe("serve-behind-nginx", behindFlags...); err != nil {
		return err
	}
	if err := waitHealthy(b.ctx, serve, plainHC, "http://"+plainAddr+"/health"); err != nil {
		return err
	}
	for _, t := range []*target{ng, ka} {
		if !b.wantRow(t.key) || b.ctx.Err() != nil {
			continue
		}
		nginx, err := b.startNginx(t == ka, plainAddr)
		if err != nil {
			return err
		}
		b.servers[t.key] = "nginx (" + map[bool]string{false: "docs/tls.md's configuration", true: "upstream keepalive 64"}[t == ka] +
			") + hutch serve " + strings.Join(behindFlags, " ")
		err = waitHealthy(b.ctx, nginx, b.apiClient(tlsAddr), "https://api."+b.cfg.domain+"/health")
		if err == nil {
			t.roots, err = b.caPool()
		}
		if err != nil {
			nginx.Stop(15 * time.Second)
			return err
		}
		b.measureRow(t, serve.Pid(), nginx.Pid())
		nginx.Stop(15 * time.Second)
	}
	return nil
}

// apiClient is a client of the API on addr over TLS, trusting the run's
// CA once the server has made it.
func (b *bench) apiClient(addr string) func() (*http.Client, error) {
	return func() (*http.Client, error) {
		pool, err := b.caPool()
		if err != nil {
			return nil, err
		}
		t := &target{addr: addr, roots: pool}
		return &http.Client{Transport: t.transport(), Timeout: 5 * time.Second}, nil
	}
}

// measureRow measures every section for one row; servePID and nginxPID
// (0: none) are whose CPU the throughput line reads.
func (b *bench) measureRow(t *target, servePID, nginxPID int) {
	fmt.Printf("== %s\n", t.name)
	e := t.client(b.sbx, b.cfg.domain)
	defer e.close()
	// The download reads what the upload wrote; write it once in any case.
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	_, err := harness.UploadFile(ctx, e.Client, harness.FilesURL(e.Base, filePath), b.payload)
	cancel()
	if err != nil {
		fmt.Printf("  unavailable: upload before the runs: %v\n", err)
		return
	}
	fileURL := harness.FilesURL(e.Base, filePath)
	calls := map[string]func(context.Context) (time.Duration, error){
		"health": e.Health,
		"stat":   e.Stat,
		"conn":   func(ctx context.Context) (time.Duration, error) { return t.newConn(ctx, b.sbx, b.cfg.domain) },
		"upload": func(ctx context.Context) (time.Duration, error) {
			return harness.UploadFile(ctx, e.Client, fileURL, b.payload)
		},
		"download": func(ctx context.Context) (time.Duration, error) {
			return harness.DownloadFile(ctx, e.Client, fileURL, fileSize, false)
		},
		"run": e.Run,
	}
	for _, o := range ops {
		if b.ctx.Err() != nil {
			return
		}
		s := b.measure(o.n(b.cfg), calls[o.key])
		if b.results[o.key] == nil {
			b.results[o.key] = map[string]*series{}
		}
		b.results[o.key][t.key] = s
		fmt.Printf("  %-72s p50 %s ms", o.name, ms(harness.Pct(s.times, 0.5)))
		if s.fails > 0 {
			fmt.Printf(" (%d failed: %s)", s.fails, s.firstErr)
		}
		fmt.Println()
	}
	if b.ctx.Err() != nil {
		return
	}
	r := b.throughput(t, servePID, nginxPID)
	b.tput[t.key] = r
	fmt.Printf("  %-72s %.0f requests/s over %d connections\n", fmt.Sprintf("GET /health, %d at once for %v", b.cfg.conc, b.cfg.dur),
		float64(r.reqs)/r.elapsed.Seconds(), r.conns)
}

// measure makes the warm-up calls, then n measured ones, one at a time.
func (b *bench) measure(n int, f func(context.Context) (time.Duration, error)) *series {
	s := &series{}
	call := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
		defer cancel()
		return f(ctx)
	}
	for i := 0; i < b.cfg.warmup && b.ctx.Err() == nil; i++ {
		call()
	}
	for i := 0; i < n && b.ctx.Err() == nil; i++ {
		d, err := call()
		if err != nil {
			s.fails++
			if s.firstErr == "" {
				s.firstErr = harness.OneLine(err.Error())
			}
			continue
		}
		s.times = append(s.times, d)
	}
	slices.Sort(s.times)
	return s
}

// throughput runs -c callers of GET /health at once for -d on a new
// client: over HTTP/2 they share one connection, over HTTP/1.1 each has
// its own.
func (b *bench) throughput(t *target, servePID, nginxPID int) *tputResult {
	r := &tputResult{}
	dials0 := t.dials.Load()
	e := t.client(b.sbx, b.cfg.domain)
	defer e.close()
	// HTTP/1.1: one connection per caller, no more (Go's transport would
	// otherwise dial a spare one when none is idle at that instant).
	e.tr.MaxConnsPerHost = b.cfg.conc
	// One call first, so that an HTTP/2 connection and its settings are
	// there before the callers start.
	e.Health(b.ctx)
	var mu sync.Mutex
	burst := func(d time.Duration, keep bool) {
		end := time.Now().Add(d)
		var wg sync.WaitGroup
		for range b.cfg.conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lat []time.Duration
				fails, firstErr := 0, ""
				for time.Now().Before(end) && b.ctx.Err() == nil {
					d, err := e.Health(b.ctx)
					if err != nil {
						fails++
						if firstErr == "" {
							firstErr = harness.OneLine(err.Error())
						}
						continue
					}
					lat = append(lat, d)
				}
				if keep {
					mu.Lock()
					r.lat = append(r.lat, lat...)
					r.fails += fails
					if r.firstErr == "" {
						r.firstErr = firstErr
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	burst(500*time.Millisecond, false)
	serve0, _ := harness.ProcCPU(servePID)
	nginx0 := nginxCPU(nginxPID)
	me0 := harness.SelfCPU()
	t0 := time.Now()
	burst(b.cfg.dur, true)
	r.elapsed = time.Since(t0)
	serve1, _ := harness.ProcCPU(servePID)
	r.serve = serve1 - serve0
	r.nginx = nginxCPU(nginxPID) - nginx0
	r.me = harness.SelfCPU() - me0
	r.conns = t.dials.Load() - dials0
	r.reqs = len(r.lat)
	slices.Sort(r.lat)
	return r
}

// nginxCPU is the CPU time of nginx's master and workers; 0 without.
func nginxCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	return harness.TreeCPU(pid)
}

func ms(d time.Duration) string {
	v := float64(d) / 1e6
	if v < 10 {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// perReq is CPU time per request in µs.
func perReq(cpu time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(cpu)/1e3/float64(n), 'f', 0, 64)
}

func ratio(v, base float64) string {
	if base <= 0 || v <= 0 {
		return "-"
	}
	return strconv.FormatFloat(v/base, 'f', 2, 64) + "×"
}

func (b *bench) printTables() {
	fmt.Println("servers (one at a time):")
	for _, t := range b.rows {
		if s := b.servers[t.key]; s != "" && (b.results["health"] != nil && b.results["health"][t.key] != nil) {
			fmt.Printf("  %-8s %s\n", t.key, s)
		}
	}
	fmt.Println("TLS negotiated (first new connection of the row):")
	for _, t := range b.rows {
		if t.negotiated != "" {
			fmt.Printf("  %-8s %s\n", t.key, t.negotiated)
		}
	}
	fmt.Println()
	rows := [][]string{{"operation / row", "n", "fail", "p50", "p95", "p99", "p50 × plain", "MB/s at p50"}}
	for _, o := range ops {
		byRow := b.results[o.key]
		if byRow == nil {
			continue
		}
		rows = append(rows, []string{"-- " + o.name})
		base := 0.0
		if p := byRow["plain"]; p != nil && len(p.times) > 0 {
			base = float64(harness.Pct(p.times, 0.5))
		}
		for _, t := range b.rows {
			s := byRow[t.key]
			if s == nil {
				continue
			}
			if len(s.times) == 0 {
				rows = append(rows, harness.UnavailableRow(t.key+": "+t.name, 8, s.firstErr))
				continue
			}
			p50 := harness.Pct(s.times, 0.5)
			mbs := ""
			if o.size > 0 {
				mbs = strconv.FormatFloat(float64(o.size)/1e6/p50.Seconds(), 'f', 0, 64)
			}
			rows = append(rows, []string{t.key + ": " + t.name, strconv.Itoa(len(s.times)), strconv.Itoa(s.fails),
				ms(p50), ms(harness.Pct(s.times, 0.95)), ms(harness.Pct(s.times, 0.99)), ratio(float64(p50), base), mbs})
		}
	}
	fmt.Println("times in ms, from sending the request to reading the whole answer (to the end event for Start)")
	harness.PrintTable(rows)
	if len(b.tput) == 0 {
		return
	}
	fmt.Println()
	fmt.Printf("throughput: GET /health of envd, %d callers at once for %v, one new client per row\n", b.cfg.conc, b.cfg.dur)
	trows := [][]string{{"row", "conns", "req/s", "× plain", "p50", "p95", "p99", "fail", "serve CPU µs/req", "nginx CPU µs/req", "client CPU µs/req"}}
	base := 0.0
	if p := b.tput["plain"]; p != nil {
		base = float64(p.reqs) / p.elapsed.Seconds()
	}
	for _, t := range b.rows {
		r := b.tput[t.key]
		if r == nil {
			continue
		}
		rate := float64(r.reqs) / r.elapsed.Seconds()
		ng := "-"
		if t.key == "nginx" || t.key == "nginx-ka" {
			ng = perReq(r.nginx, r.reqs)
		}
		trows = append(trows, []string{t.key, strconv.FormatInt(r.conns, 10), strconv.FormatFloat(rate, 'f', 0, 64), ratio(rate, base),
			ms(harness.Pct(r.lat, 0.5)), ms(harness.Pct(r.lat, 0.95)), ms(harness.Pct(r.lat, 0.99)), strconv.Itoa(r.fails),
			perReq(r.serve, r.reqs), ng, perReq(r.me, r.reqs)})
		if r.firstErr != "" {
			defer fmt.Printf("%s: first failure: %s\n", t.key, r.firstErr)
		}
	}
	harness.PrintTable(trows)
	fmt.Println("conns: connections the row's client opened for the line; CPU from /proc (hutch serve's process, nginx's master and workers) and getrusage (this client), per request")
}
