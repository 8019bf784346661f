// Command opensandbox is Hutch's benchmark of OpenSandbox's protocol
// beside E2B's (docs/opensandbox.md): `hutch serve` answers OpenSandbox's
// execd on the host by translating each call into calls to the sandbox's
// envd (internal/osbexecd), where E2B's clients reach envd through the
// edge. What does the translation cost?
//
// Against one `hutch serve --network=false` at a time, first with
// --warm 0, then with its default warm pool, each operation runs on both
// paths, the one that goes first alternating (A B, B A, …):
//
//   - create: Sandbox.create("base") then commands.run("true") through
//     OpenSandbox's Python SDK and E2B's, on each server; the kill is not
//     timed;
//   - rawcreate: the same from Go without an SDK: POST /v1/sandboxes (the
//     image only, and with what OpenSandbox's SDK adds by default), the
//     execd endpoint, POST /command, against POST /v2/sandboxes and envd's
//     Start, on each server;
//   - cmd: commands.run("true") in one running sandbox, through each SDK;
//   - file: a 4 KiB and a 1 MiB file written and read back through each
//     SDK (files.write_files/read_file, files.write/read);
//   - raw: in the same sandbox from Go: execd's POST /command (server-sent
//     events), POST /files/upload (multipart) and GET /files/download
//     against envd's process.Start (Connect) and POST/GET /files through
//     the edge: the server's translation without the SDKs.
//
// Per operation: p50/p95/p99 of each path, the difference, hutch serve's
// CPU per operation on each path (its threads' schedstat around each
// call), and the Python client's CPU per operation. The running-sandbox
// rows use one sandbox (made through E2B's API, with an access token,
// on the --warm 0 server), which both paths reach.
//
// It is meant to be started by bench/opensandbox.sh; see bench/README.md.
// As root (hutch serve starts sandboxes).
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

type config struct {
	hutch, dir, templates string
	osbPython, e2bPython  string
	worker                string
	n, nCreate            int
	warmup, warmupCreate  int
	warm                  int
	settle                time.Duration
	only                  string
}

// sectionKeys are the sections, in the order they run.
var sectionKeys = []string{"create", "rawcreate", "cmd", "file", "raw"}

type bench struct {
	cfg       config
	ctx       context.Context
	key       string
	want      map[string]bool
	apiClient *http.Client
}

func main() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench-opensandbox: run as root (bench/opensandbox.sh)")
		os.Exit(1)
	}
	os.Exit(realMain())
}

func realMain() int {
	var cfg config
	newFlags(&cfg).Parse(os.Args[1:])
	bad := ""
	switch {
	case cfg.dir == "" || cfg.osbPython == "" || cfg.e2bPython == "" || cfg.worker == "":
		bad = "-dir, -osb-python, -e2b-python and -worker are required (bench/opensandbox.sh sets them)"
	case cfg.n < 1 || cfg.nCreate < 1 || cfg.warmup < 0 || cfg.warmupCreate < 0 || cfg.warm < 0:
		bad = "-n and -n-create must be >= 1, -warmup, -warmup-create and -warm >= 0"
	}
	want, code := harness.CheckArgs("bench-opensandbox", bad, cfg.only, sectionKeys)
	if code != 0 {
		return code
	}
	ctx, stop := harness.SignalContext()
	defer stop()
	b := &bench{cfg: cfg, ctx: ctx, key: os.Getenv("E2B_API_KEY"), want: want, apiClient: &http.Client{Timeout: time.Minute}}
	if b.key == "" {
		fmt.Fprintln(os.Stderr, "bench-opensandbox: E2B_API_KEY is not set (bench/opensandbox.sh sets it)")
		return 2
	}

	harness.PrintTitle("Hutch OpenSandbox protocol benchmark: OpenSandbox's path vs E2B's to the same sandboxes")
	fmt.Printf("hutch: %s (%s)\n", harness.Revision(), cfg.hutch)
	fmt.Printf("SDK clients: %s (%s) and %s (%s), their async APIs, each in a Python process of its own (bench/opensandbox/worker.py), taking turns\n",
		pkgVersion(cfg.osbPython, "opensandbox"), pythonVersion(cfg.osbPython), pkgVersion(cfg.e2bPython, "e2b"), pythonVersion(cfg.e2bPython))
	fmt.Printf("raw clients: Go (%s) in this harness, a kept-alive HTTP/1.1 connection per path; both run `/bin/bash -c true` as root (what execd's POST /command asks envd for)\n", runtime.Version())
	fmt.Printf("servers, one at a time: `hutch serve --network=false --warm 0`, then `hutch serve --network=false` (its default warm pool of %d); running-sandbox rows on the first\n", cfg.warm)
	fmt.Printf("runs: create %d per path per server after %d warm-up, each when the warm pool is full again and %v more have passed; running-sandbox rows %d per path after %d warm-up\n",
		cfg.nCreate, cfg.warmupCreate, cfg.settle, cfg.n, cfg.warmup)
	harness.PrintLoad("before")
	fmt.Println()

	var sections []section
	failed := false
	for i, spec := range []struct {
		name, dir string
		warm      int
		args      []string
	}{
		{"--warm 0", "serve-cold", 0, []string{"--network=false", "--warm", "0"}},
		{fmt.Sprintf("warm pool of %d", cfg.warm), "serve-warm", cfg.warm, []string{"--network=false"}},
	} {
		running := i == 0 && b.wantAny("cmd", "file", "raw")
		if ctx.Err() != nil || !(running || b.wantAny("create", "rawcreate")) {
			continue
		}
		secs, err := b.runServer(spec.name, spec.dir, spec.warm, running, spec.args)
		sections = append(sections, secs...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-opensandbox:", err)
			failed = true
		}
	}

	fmt.Println()
	harness.PrintLoad("after the runs")
	fmt.Println()
	fmt.Println("Times in ms from the call to its return (p50/p95/p99 of each path); OSB−E2B is OpenSandbox's path minus E2B's at each percentile.")
	fmt.Println("serve CPU ms/op: hutch serve's CPU around each operation, averaged: its threads' schedstat (ns) in the running-sandbox rows; its utime+stime (10 ms ticks, which average out) in the create rows, where it includes the untimed kill.")
	fmt.Println("client CPU ms/op: the Python process's CPU (time.process_time) over the timed calls: the SDK's own work; - for the Go rows.")
	for _, sec := range sections {
		fmt.Println()
		printSection(sec)
	}
	if failed {
		return 1
	}
	return harness.ExitCode(ctx, "bench-opensandbox")
}

func (b *bench) wantSection(key string) bool { return b.want == nil || b.want[key] }

func (b *bench) wantAny(keys ...string) bool {
	for _, k := range keys {
		if b.wantSection(k) {
			return true
		}
	}
	return false
}

// runServer starts one server and runs the sections wanted on it: the
// creates, and with running the running-sandbox rows; it kills what is
// left and stops the server whatever happens.
func (b *bench) runServer(name, dir string, warm int, running bool, args []string) (sections []section, err error) {
	fmt.Printf("==> server: %s\n", name)
	s, err := b.startServe(b.ctx, name, dir, warm, args...)
	if err != nil {
		return nil, err
	}
	defer b.killAll(s)
	var osb, osbTuned, e2b *worker
	defer func() { osb.stop(); osbTuned.stop(); e2b.stop() }()
	osbEnv := []string{"OPEN_SANDBOX_DOMAIN=" + strings.TrimPrefix(s.url, "http://"), "OPEN_SANDBOX_API_KEY=" + b.key}
	if b.wantSection("create") || (running && b.wantAny("cmd", "file")) {
		if osb, err = b.startWorker("osb", b.cfg.osbPython, s.data+".osb.log", osbEnv); err != nil {
			return nil, err
		}
		if e2b, err = b.startWorker("e2b", b.cfg.e2bPython, s.data+".e2b.log",
			[]string{"E2B_API_URL=" + s.url, "E2B_SANDBOX_URL=" + s.url, "E2B_API_KEY=" + b.key}); err != nil {
			return nil, err
		}
	}
	if b.wantSection("create") {
		if osbTuned, err = b.startWorker("osb-tuned", b.cfg.osbPython, s.data+".osb-tuned.log", osbEnv); err != nil {
			return nil, err
		}
	}
	workers := [2]*worker{osb, e2b}
	between := func(ctx context.Context) error { return b.waitPool(ctx, s) }
	createCPU, runningCPU := processCPU(s.Pid()), threadCPU(s.Pid())

	if b.wantSection("create") && b.ctx.Err() == nil {
		sec := section{title: fmt.Sprintf("create → first command through the SDKs, `hutch serve --network=false` with %s", name)}
		for _, osbWorker := range []*worker{osb, osbTuned} {
			name := `Sandbox.create("base") + commands.run("true")`
			if osbWorker == osbTuned {
				name = "the same, OSB with one shared ConnectionConfig(transport=…, disable_metrics=True)"
			}
			pair := [2]*worker{osbWorker, e2b}
			sec.rows = append(sec.rows, b.runAB(name, b.cfg.nCreate, b.cfg.warmupCreate, createCPU,
				func(ctx context.Context, side int) (sample, error) {
					var t timing
					if err := pair[side].call(ctx, map[string]any{"op": "create"}, &t); err != nil {
						return sample{}, err
					}
					return sample{total: msDur(t.Total), clientCPU: msDur(t.CPU),
						parts: map[string]time.Duration{"1 create": msDur(t.Create), "2 first command": msDur(t.Run)}}, nil
				}, between))
		}
		sections = append(sections, sec)
	}
	if b.wantSection("rawcreate") && b.ctx.Err() == nil {
		sec := section{title: fmt.Sprintf("create → first command from Go, no SDK, `hutch serve --network=false` with %s: POST /v1/sandboxes, GET its execd endpoint, POST /command vs POST /v2/sandboxes, envd's Start", name)}
		for _, sdkDefaults := range []bool{false, true} {
			title := "image only"
			if sdkDefaults {
				title = "with the OSB SDK's defaults (resourceLimits cpu 1, memory 2Gi; entrypoint tail -f /dev/null)"
			}
			sec.rows = append(sec.rows, b.runAB(title, b.cfg.nCreate, b.cfg.warmupCreate, createCPU, b.rawCreate(s, sdkDefaults), between))
		}
		sections = append(sections, sec)
	}
	if !running || b.ctx.Err() != nil {
		return sections, nil
	}

	// The running sandbox both paths use, made as E2B's SDKs make one
	// (with an access token, which execd's endpoint hands out too).
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	sb, err := b.createE2B(ctx, s)
	cancel()
	if err != nil {
		return sections, fmt.Errorf("create the running sandbox: %w", err)
	}
	fmt.Printf("    running sandbox: %s (base, made through POST /v2/sandboxes)\n", sb.SandboxID)
	if b.wantAny("cmd", "file") {
		for _, w := range workers {
			ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
			err := w.call(ctx, map[string]any{"op": "connect", "id": sb.SandboxID}, nil)
			cancel()
			if err != nil {
				return sections, fmt.Errorf("connect the %s SDK to %s: %w", w.name, sb.SandboxID, err)
			}
		}
	}
	sdkOp := func(req func(side int) map[string]any) abOp {
		return func(ctx context.Context, side int) (sample, error) {
			var t timing
			if err := workers[side].call(ctx, req(side), &t); err != nil {
				return sample{}, err
			}
			return sample{total: msDur(t.Total), clientCPU: msDur(t.CPU)}, nil
		}
	}
	if b.wantSection("cmd") && b.ctx.Err() == nil {
		sec := section{title: "command round trip in a running sandbox through the SDKs: OSB commands.run (execd's SSE, translated on the host) vs E2B commands.run (envd's Connect stream through the edge)"}
		sec.rows = append(sec.rows, b.runAB(`commands.run("true")`, b.cfg.n, b.cfg.warmup, runningCPU,
			sdkOp(func(int) map[string]any { return map[string]any{"op": "cmd"} }), nil))
		sections = append(sections, sec)
	}
	if b.wantSection("file") && b.ctx.Err() == nil {
		sec := section{title: "files through the SDKs: OSB files.write_files / read_file (execd's /files/upload, /files/download) vs E2B files.write / read (envd's /files)"}
		for _, size := range []int{4 << 10, 1 << 20} {
			for _, op := range []string{"write", "read"} {
				name := fmt.Sprintf("%s %s", op, sizeName(size))
				sec.rows = append(sec.rows, b.runAB(name, b.cfg.n, b.cfg.warmup, runningCPU, sdkOp(func(side int) map[string]any {
					return map[string]any{"op": op, "size": size, "path": fmt.Sprintf("/tmp/osbbench-%s-%d", workers[side].name, size)}
				}), nil))
			}
		}
		sections = append(sections, sec)
	}
	if b.wantSection("raw") && b.ctx.Err() == nil {
		secs, err := b.rawRunning(s, sb.SandboxID, sb.EnvdAccessToken)
		sections = append(sections, secs...)
		if err != nil {
			return sections, err
		}
	}
	return sections, nil
}

// sizeName is "4 KiB", "1 MiB".
func sizeName(size int) string {
	if size >= 1<<20 {
		return fmt.Sprintf("%d MiB", size>>20)
	}
	return fmt.Sprintf("%d KiB", size>>10)
}

// pkgVersion is "name version" of a package in python's environment.
func pkgVersion(python, name string) string {
	out, err := exec.Command(python, "-c", "import sys; from importlib.metadata import version; print(version(sys.argv[1]))", name).Output()
	if err != nil {
		return name + " (version unknown)"
	}
	return name + " " + strings.TrimSpace(string(out))
}

// pythonVersion is "Python 3.11.2, venv <dir>".
func pythonVersion(python string) string {
	out, _ := exec.Command(python, "-c", "import platform; print(platform.python_version())").Output()
	return fmt.Sprintf("Python %s, venv %s", strings.TrimSpace(string(out)), filepath.Dir(filepath.Dir(python)))
}
