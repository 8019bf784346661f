// Command gvisor is Hutch's runtime benchmark: the gvisor backend (gVisor's
// runsc, systrap platform) beside the native one (namespaces, cgroups,
// seccomp), p50/p95/p99 of each row side by side, beside the goals of
// issue 19. Every row is measured through Hutch's Go SDK (package sdk, in
// this process) against one `hutch serve` per runtime, each on a data
// directory of its own, interleaved so that both runtimes see the same
// machine:
//
//   - create: Client.Create of base then Commands.Run("true"), timed to the
//     201 and to the command's end, on the --warm 0 servers and on the
//     servers with their default warm pool (each create waits for its pool
//     to be full again first); beside it the floor of a gVisor sandbox
//     without Hutch (`runsc do /bin/true`), and where a cold gvisor create's
//     time goes, from the files its sandbox directory gets along the way
//     (create.go);
//   - exec: Commands.Run("true") in a running sandbox;
//   - workloads (work.go): import-heavy python, `git status` in a
//     repository of 10,000 files made in the sandbox first, a byte-compile
//     of five stdlib packages (the base template has no C compiler), and
//     `find /usr` (42,000 entries);
//   - files: Files.Write and Files.Read of a 64 MiB file, as MB/s;
//   - memory (memory.go): PSS of every host process of each idle sandbox,
//     with 1 and with -mem-count sandboxes running;
//   - checkpoint (checkpoint.go): with -sizes MiB touched by a python
//     process, pause (keep memory: on gvisor a checkpoint to disk, on
//     native a cgroup freeze), resume (Client.Connect), resume → first
//     command, snapshot, and the checkpoints' size on disk;
//   - fork: Sandbox.Fork of 4 until every fork answered a command, and 4
//     creates at once from a snapshot (restores only, on gvisor).
//
// It is meant to be started by bench/gvisor.sh, which starts the servers
// in a network namespace of its own and sets E2B_API_KEY. No timing
// threshold fails a run: goals are printed beside the numbers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/sdk"
)

type config struct {
	urls, warmURLs   [2]string
	data, warmData   [2]string
	warmN            int
	n, nExec, nWork  int
	nFiles, nCkpt    int
	nCkptBig, nFork  int
	bigFrom          int // MiB from which a size is big (-n-ckpt-big)
	sizes            string
	memCount         int
	memFloor         int // MiB of MemAvailable below which no more sandboxes start
	runsc, runscVer  string
	runscRoot        string
	serveArgs, netns string
	prefix           string
	only             string
}

// Runtimes, in the order of the table's columns.
const (
	native = iota
	gvisor
)

var runtimeNames = [2]string{"native", "gvisor"}

// A contender is one runtime's servers.
type contender struct {
	rt   int
	name string
	c    *sdk.Client // the --warm 0 server
	warm *sdk.Client // the one with a warm pool (nil: none)
	data string      // the --warm 0 server's data directory
	// warmData is the warm server's data directory: its pool is full when
	// it holds -warm sandbox directories.
	warmData string
}

type bench struct {
	cfg  config
	ctx  context.Context
	cons [2]*contender
	tab  table
	// snapshots taken and not deleted yet, by id and contender; deleted at
	// the end.
	snaps map[string]*contender
}

func main() {
	os.Exit(realMain())
}

func realMain() int {
	var cfg config
	flag.StringVar(&cfg.urls[native], "native-url", "", "the `hutch serve --runtime native --warm 0` to measure")
	flag.StringVar(&cfg.urls[gvisor], "gvisor-url", "", "the `hutch serve --runtime gvisor --warm 0` to measure")
	flag.StringVar(&cfg.warmURLs[native], "native-warm-url", "", "a native hutch serve with a warm pool of base (warm create rows)")
	flag.StringVar(&cfg.warmURLs[gvisor], "gvisor-warm-url", "", "a gvisor hutch serve with a warm pool of base (warm create rows)")
	flag.StringVar(&cfg.data[native], "native-data", "", "the native --warm 0 server's data directory (memory, breakdown)")
	flag.StringVar(&cfg.data[gvisor], "gvisor-data", "", "the gvisor --warm 0 server's data directory (memory, checkpoint sizes, breakdown)")
	flag.StringVar(&cfg.warmData[native], "native-warm-data", "", "the native warm server's data directory (to see its pool full)")
	flag.StringVar(&cfg.warmData[gvisor], "gvisor-warm-data", "", "the gvisor warm server's data directory (to see its pool full)")
	flag.IntVar(&cfg.warmN, "warm", 0, "the warm servers' pool size")
	flag.IntVar(&cfg.n, "n", 40, "iterations of each create row")
	flag.IntVar(&cfg.nExec, "n-exec", 100, "iterations of the exec round trip")
	flag.IntVar(&cfg.nWork, "n-work", 10, "iterations of each workload")
	flag.IntVar(&cfg.nFiles, "n-files", 10, "iterations of each /files transfer")
	flag.IntVar(&cfg.nCkpt, "n-ckpt", 20, "pause/resume/snapshot iterations per size below -big-from")
	flag.IntVar(&cfg.nCkptBig, "n-ckpt-big", 8, "pause/resume/snapshot iterations per size from -big-from")
	flag.IntVar(&cfg.bigFrom, "big-from", 400, "MiB from which a size is big")
	flag.IntVar(&cfg.nFork, "n-fork", 15, "iterations of each fork row")
	flag.StringVar(&cfg.sizes, "sizes", "64,200,448", "MiB of touched memory for the checkpoint rows (a sandbox's memory limit is 512 MiB)")
	flag.IntVar(&cfg.memCount, "mem-count", 50, "sandboxes per runtime for the second idle-memory row")
	flag.IntVar(&cfg.memFloor, "mem-floor", 4096, "MiB of MemAvailable under which the memory rows start no more sandboxes")
	flag.StringVar(&cfg.runsc, "runsc", "/usr/local/lib/hutch/runsc", "runsc, for the floor row (empty: none)")
	flag.StringVar(&cfg.runscVer, "runsc-version", "unknown", "its version (for the header)")
	flag.StringVar(&cfg.runscRoot, "runsc-root", "", "runsc's --root for the floor row (default: a temporary directory)")
	flag.StringVar(&cfg.serveArgs, "serve-args", "", "the --warm 0 servers' flags besides --runtime (for the header)")
	flag.StringVar(&cfg.netns, "netns", "", "the network namespace (for the header)")
	flag.StringVar(&cfg.prefix, "prefix", fmt.Sprintf("hutch-bench-gv-%d", os.Getpid()), "prefix of the snapshots' names")
	flag.StringVar(&cfg.only, "only", "", "comma-separated parts: create,exec,work,files,memory,checkpoint,fork (default all)")
	flag.Parse()
	known := []string{"create", "exec", "work", "files", "memory", "checkpoint", "fork"}
	bad := ""
	switch {
	case cfg.urls[native] == "" || cfg.urls[gvisor] == "":
		bad = "-native-url and -gvisor-url are required"
	case cfg.data[native] == "" || cfg.data[gvisor] == "":
		bad = "-native-data and -gvisor-data are required"
	case cfg.n < 1 || cfg.nExec < 1 || cfg.nWork < 1 || cfg.nFiles < 1 || cfg.nCkpt < 1 || cfg.nCkptBig < 1 || cfg.nFork < 1 || cfg.memCount < 1:
		bad = "every -n… and -mem-count must be at least 1"
	}
	sizes := intList(cfg.sizes)
	if bad == "" && len(sizes) == 0 {
		bad = "-sizes: no size"
	}
	parts, code := harness.CheckArgs("gvisor", bad, cfg.only, known)
	if code != 0 {
		return code
	}
	want := func(p string) bool { return parts == nil || parts[p] }
	key := os.Getenv("E2B_API_KEY")
	if key == "" {
		fmt.Fprintln(os.Stderr, "gvisor: E2B_API_KEY is not set (bench/gvisor.sh sets it)")
		return 2
	}

	ctx, stop := harness.SignalContext()
	defer stop()
	b := &bench{cfg: cfg, ctx: ctx, snaps: map[string]*contender{}}
	for rt := range b.cons {
		con := &contender{rt: rt, name: runtimeNames[rt], data: cfg.data[rt], warmData: cfg.warmData[rt]}
		var err error
		if con.c, err = sdk.NewClient(sdk.Config{APIKey: key, APIURL: cfg.urls[rt], SandboxURL: cfg.urls[rt]}); err != nil {
			fmt.Fprintln(os.Stderr, "gvisor:", err)
			return 1
		}
		if u := cfg.warmURLs[rt]; u != "" {
			if con.warm, err = sdk.NewClient(sdk.Config{APIKey: key, APIURL: u, SandboxURL: u}); err != nil {
				fmt.Fprintln(os.Stderr, "gvisor:", err)
				return 1
			}
		}
		b.cons[rt] = con
	}
	defer b.deleteSnapshots()

	harness.PrintTitle("Hutch runtimes: gvisor (runsc, systrap) vs native")
	fmt.Printf("hutch: %s\n", harness.Revision())
	fmt.Printf("runsc: %s (gvisor.dev/gvisor %s), --platform=systrap\n", cfg.runsc, cfg.runscVer)
	fmt.Printf("servers: hutch serve --runtime native|gvisor %s, and each runtime with its default warm pool of %d (--network=false) for the warm rows\n", cfg.serveArgs, cfg.warmN)
	fmt.Printf("sandboxes: base template, memory 512 MiB, 1 CPU (hutch serve's limits)\n")
	fmt.Printf("network namespace: %s\n", cfg.netns)
	fmt.Printf("client: Hutch's Go SDK (sdk/), in this process\n")
	harness.PrintLoad("before the runs")
	fmt.Println()

	// Each server must run what it is said to: its sandboxes' metadata
	// names their runtime.
	if err := b.checkRuntimes(); err != nil {
		fmt.Fprintln(os.Stderr, "gvisor:", err)
		return 1
	}
	steps := []struct {
		part string
		run  func()
	}{
		{"create", b.createRows},
		{"exec", b.execRows},
		{"work", b.workRows},
		{"files", b.filesRows},
		{"memory", b.memoryRows},
		{"checkpoint", func() { b.checkpointRows(sizes) }},
		{"fork", b.forkRows},
	}
	for _, s := range steps {
		if want(s.part) && ctx.Err() == nil {
			s.run()
		}
	}

	harness.PrintLoad("after the runs")
	fmt.Println()
	b.tab.print()
	return harness.ExitCode(ctx, "gvisor")
}

// checkRuntimes creates a sandbox on every server and checks that its
// hutch.runtime metadata names the server's runtime.
func (b *bench) checkRuntimes() error {
	for _, con := range b.cons {
		for _, c := range []*sdk.Client{con.c, con.warm} {
			if c == nil {
				continue
			}
			s, err := c.Create(bg(), sdk.CreateOptions{Timeout: 5 * time.Minute})
			if err != nil {
				return fmt.Errorf("%s server %s: %w", con.name, c.Config().APIURL, err)
			}
			info, err := s.GetInfo(bg())
			kill(s)
			if err != nil {
				return fmt.Errorf("%s server %s: %w", con.name, c.Config().APIURL, err)
			}
			if got := info.Metadata["hutch.runtime"]; got != con.name {
				return fmt.Errorf("the %s server at %s made a sandbox with hutch.runtime %q", con.name, c.Config().APIURL, got)
			}
		}
	}
	return nil
}

// bg is the context of calls in flight: not the signal context, so that a
// call in flight on Ctrl-C finishes and its sandboxes can be killed.
func bg() context.Context { return context.Background() }

// sandboxTimeout is every sandbox's lifetime: longer than any part.
const sandboxTimeout = 30 * time.Minute

// newSandbox creates a base sandbox on con's --warm 0 server (untimed).
func (con *contender) newSandbox() (*sdk.Sandbox, error) {
	return con.c.Create(bg(), sdk.CreateOptions{Timeout: sandboxTimeout})
}

func kill(s *sdk.Sandbox) {
	if s == nil {
		return
	}
	if err := s.Kill(bg()); err != nil && !errors.Is(err, sdk.ErrNotFound) {
		fmt.Printf("warning: kill %s: %v\n", s.ID, err)
	}
}

// run runs cmd in s and returns its stdout; a non-zero exit is an error
// with its stderr.
func run(s *sdk.Sandbox, cmd string) (string, error) {
	res, err := s.Commands.Run(bg(), cmd, &sdk.RunOptions{Timeout: 10 * time.Minute})
	if err != nil {
		var ee *sdk.CommandExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%s: %w: %s", harness.OneLine(cmd), err, harness.OneLine(ee.Stderr))
		}
		return "", err
	}
	return res.Stdout, nil
}

// forBoth runs f for each runtime, native first.
func (b *bench) forBoth(f func(con *contender)) {
	for _, con := range b.cons {
		f(con)
	}
}

func (b *bench) deleteSnapshots() {
	for id, con := range b.snaps {
		if _, err := con.c.DeleteSnapshot(bg(), id); err != nil {
			fmt.Printf("warning: snapshot %s not deleted: %v\n", id, err)
		}
	}
}

func intList(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var v int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &v); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	return out
}
