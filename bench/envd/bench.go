package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/syncbuf"

	"connectrpc.com/connect"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// idPrefix starts the name of every container this harness makes, so that
// leftovers of an earlier, killed run can be found and removed.
const idPrefix = "hutch-bench-envd-"

type bench struct {
	ctx context.Context
	cfg *config

	devnull *os.File
	errFile *os.File

	// The Hutch sandbox running envd, and how to reach it.
	rt      *native.Runtime
	sbx     runtime.Sandbox
	envdLog *syncbuf.Buffer
	client  *http.Client // over the sandbox's host socket
	url     string
	proc    processconnect.ProcessClient

	// The OCI containers running sleep infinity.
	legacy    *harness.LegacyCgroupNS
	legacyErr string
	ociErr    string
	runcID    string // running container, or ""
	runcErr   string
	crunID    string
	crunErr   string
}

// dataDir is the native runtime's state directory for the bench's sandbox:
// fixed, so that a run can remove what a killed earlier run left.
func (b *bench) dataDir() string { return filepath.Join(b.cfg.dir, "envd-data") }

func (b *bench) prepare() error {
	var err error
	if b.devnull, err = os.OpenFile(os.DevNull, os.O_RDWR, 0); err != nil {
		return err
	}
	if b.errFile, err = os.CreateTemp("", "hutch-bench-envd-stderr-"); err != nil {
		return err
	}
	os.Remove(b.errFile.Name()) // the open file stays usable

	if _, err := os.Stat(filepath.Join(b.cfg.rootfs, "bin", "true")); err != nil {
		return fmt.Errorf("base template rootfs %s: %w (run bench/envd.sh, or hutch template build base)", b.cfg.rootfs, err)
	}
	// The idmapped rootfs first: the namespace without cgroup2 is a copy
	// of this one, and crun must see the rootfs there too.
	if err := b.prepareOCI(); err != nil {
		b.ociErr = err.Error()
	}
	if ns, err := harness.NewLegacyCgroupNS(); err == nil {
		b.legacy = ns
	} else {
		b.legacyErr = err.Error()
	}
	b.removeLeftovers()
	if err := b.startSandbox(); err != nil {
		return err
	}
	if b.ociErr != "" {
		return nil
	}
	b.runcID, b.runcErr = b.startContainer("runc", nil)
	if b.legacy != nil {
		b.crunID, b.crunErr = b.startContainer("crun", b.legacy.Do)
	} else {
		b.crunErr = b.legacyErr
	}
	return nil
}

// startSandbox makes a sandbox from the base template whose first process
// is this binary serving envd on a unix socket made here, as envdtest.Start
// does (and as Hutch's control plane does with `hutch envd`).
func (b *bench) startSandbox() error {
	data := b.dataDir()
	if err := os.MkdirAll(data, 0o711); err != nil {
		return err
	}
	os.Chmod(data, 0o711)
	rt, err := native.New(native.Options{DataDir: data, Templates: template.Open(b.cfg.templates)})
	if err != nil {
		return err
	}
	b.rt = rt
	sock := filepath.Join(data, "envd.sock")
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	// The sandbox's envd serves this socket; ours only hands it over, and
	// closing it must not unlink the path.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	f, err := ln.(*net.UnixListener).File()
	ln.Close()
	if err != nil {
		return err
	}
	defer f.Close()
	b.envdLog = &syncbuf.Buffer{}
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	sbx, err := rt.Create(ctx, runtime.Spec{
		Template: "base",
		// hutch run's defaults, as in the startup bench and its OCI bundle.
		Resources: runtime.Resources{MemoryBytes: 512 << 20, CPUs: 1, Pids: 512},
		Labels:    map[string]string{"hutch-bench": "envd"},
		Process: runtime.Process{
			Args: []string{runtime.SelfExe, "envd"}, User: "root",
			ExtraFiles: []*os.File{f}, Stdout: b.envdLog, Stderr: b.envdLog,
		},
	})
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	b.sbx = sbx
	b.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
		// Measure envd, not gzip: identity unless a row asks for gzip.
		DisableCompression: true,
		// Large enough buffers that the client is not what limits /files.
		WriteBufferSize: 64 << 10,
		ReadBufferSize:  64 << 10,
	}}
	b.url = "http://envd"
	b.proc = processconnect.NewProcessClient(b.client, b.url, connect.WithProtoJSON())
	for {
		resp, err := b.client.Get(b.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("envd never became healthy: %v\nlog: %s", err, b.envdLog.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// prepareOCI mounts the base template, read-only and idmapped to the
// containers' root, on the bundles' rootfs, in this process's private mount
// namespace only (as bench/startup does).
func (b *bench) prepareOCI() error {
	_, err := harness.MountBundleRootfs(b.cfg.bundleIdle, b.cfg.rootfs, b.cfg.ociRootfs)
	return err
}

// startContainer starts a detached container running sleep infinity with
// tool (runc or crun), in the given mount namespace (nil: the harness's).
func (b *bench) startContainer(tool string, in func(func())) (id, why string) {
	if _, err := exec.LookPath(tool); err != nil {
		return "", tool + " is not installed"
	}
	if in == nil {
		in = func(f func()) { f() }
	}
	id = fmt.Sprintf("%s%d-%s", idPrefix, os.Getpid(), tool)
	var err error
	in(func() { _, err = b.runCmd([]string{tool, "run", "-d", "--bundle", b.cfg.bundleIdle, id}) })
	if err != nil {
		in(func() { b.output(tool, "delete", "-f", id) })
		return "", harness.OneLine(err.Error())
	}
	return id, ""
}

// removeLeftovers removes the sandboxes and containers of an earlier run
// that was killed before it could clean up.
func (b *bench) removeLeftovers() {
	if rt, err := native.New(native.Options{DataDir: b.dataDir(), Templates: template.Open(b.cfg.templates)}); err == nil {
		if list, err := rt.List(b.ctx); err == nil {
			for _, st := range list {
				if s, err := rt.Load(b.ctx, st.ID); err == nil {
					fmt.Printf("removing sandbox %s left by an earlier run\n", st.ID)
					s.Delete(context.Background())
				}
			}
		}
	}
	harness.RemoveLeftoverOCI(b.legacy, idPrefix, func(args ...string) ([]byte, error) {
		if _, err := exec.LookPath(args[0]); err != nil {
			return nil, err
		}
		return b.output(args...)
	}, func(tool string, ids []string) {
		for _, id := range ids {
			fmt.Printf("removed %s container %s left by an earlier run\n", tool, id)
		}
	})
}

// cleanup removes the sandbox and the containers; it runs however the
// harness ends (short of SIGKILL, which the next run's removeLeftovers
// handles).
func (b *bench) cleanup() {
	var notes []string
	if b.runcID != "" {
		if _, err := b.output("runc", "delete", "-f", b.runcID); err != nil {
			notes = append(notes, err.Error())
		}
	}
	if b.crunID != "" && b.legacy != nil {
		b.legacy.Do(func() {
			if _, err := b.output("crun", "delete", "-f", b.crunID); err != nil {
				notes = append(notes, err.Error())
			}
		})
	}
	if b.sbx != nil {
		if err := b.sbx.Delete(context.Background()); err != nil {
			notes = append(notes, "delete sandbox: "+err.Error())
		}
	}
	if b.rt != nil {
		if list, err := b.rt.List(context.Background()); err == nil && len(list) > 0 {
			notes = append(notes, fmt.Sprintf("%d sandboxes still in %s", len(list), b.dataDir()))
		}
	}
	if b.legacy != nil {
		b.legacy.Close()
		b.legacy = nil
	}
	if len(notes) > 0 {
		fmt.Println("cleanup problems:")
		for _, n := range notes {
			fmt.Println("  " + n)
		}
		return
	}
	fmt.Println("cleanup: sandbox and containers removed")
}

// runCmd runs one command to completion and times it, stdio on /dev/null
// and a file (no pipes to drain, no goroutines in the timed region).
func (b *bench) runCmd(argv []string) (time.Duration, error) {
	if err := b.errFile.Truncate(0); err != nil {
		return 0, err
	}
	if _, err := b.errFile.Seek(0, 0); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = b.devnull, b.devnull, b.errFile
	t0 := time.Now()
	err := cmd.Run()
	d := time.Since(t0)
	if err != nil {
		b.errFile.Seek(0, 0)
		msg, _ := io.ReadAll(io.LimitReader(b.errFile, 1<<16))
		if len(msg) == 0 {
			return d, err
		}
		return d, fmt.Errorf("%v: %s", err, harness.OneLine(string(msg)))
	}
	return d, nil
}

// output runs a command (not timed) and returns its standard output.
func (b *bench) output(argv ...string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, harness.OneLine(stderr.String()))
	}
	return out, nil
}

// rtRow is one row of the round-trip table.
type rtRow struct {
	key, name   string
	unavailable string
	// once does one round trip; first is the part of it until the
	// process's start was reported (envd rows only).
	once func() (d, first time.Duration, err error)
}

type result struct {
	row         *rtRow
	unavailable string
	series
	first series // time to the start event (envd rows)
}

func (b *bench) roundTripRows() []*rtRow {
	cmd := func(argv ...string) func() (time.Duration, time.Duration, error) {
		return func() (time.Duration, time.Duration, error) {
			d, err := b.runCmd(argv)
			return d, 0, err
		}
	}
	oci := func(r *rtRow, id, why string) *rtRow {
		switch {
		case b.ociErr != "":
			r.unavailable = b.ociErr
		case id == "":
			r.unavailable = why
		}
		return r
	}
	crun := cmd("crun", "exec", b.crunID, "/bin/true")
	return []*rtRow{
		{key: "exec", name: "Go fork/exec /bin/true (host, no isolation: floor)", once: cmd("/bin/true")},
		{key: "envd-true", name: "envd Start /bin/true", once: b.startOnce(&pb.ProcessConfig{Cmd: "/bin/true"})},
		{key: "envd-bash", name: "envd Start /bin/bash -l -c true (SDK commands.run)", once: b.startOnce(&pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "true"}})},
		{key: "envd-list", name: "envd List (unary RPC, no process)", once: b.listOnce},
		oci(&rtRow{key: "runc", name: "runc exec <running> /bin/true", once: cmd("runc", "exec", b.runcID, "/bin/true")}, b.runcID, b.runcErr),
		oci(&rtRow{key: "crun", name: "crun exec <running> /bin/true (no cgroup2 mount)", once: func() (d, first time.Duration, err error) {
			b.legacy.Do(func() { d, first, err = crun() })
			return
		}}, b.crunID, b.crunErr),
	}
}

// startOnce is one commands.run as the E2B SDK does it
// (harness.StartProcess).
func (b *bench) startOnce(cfg *pb.ProcessConfig) func() (time.Duration, time.Duration, error) {
	return func() (time.Duration, time.Duration, error) {
		return harness.StartProcess(b.ctx, b.proc, cfg)
	}
}

func (b *bench) listOnce() (time.Duration, time.Duration, error) {
	t0 := time.Now()
	_, err := b.proc.List(b.ctx, connect.NewRequest(&pb.ListRequest{}))
	return time.Since(t0), 0, err
}

func (b *bench) measure(r *rtRow) *result {
	res := &result{row: r}
	if r.unavailable != "" {
		res.unavailable = r.unavailable
		fmt.Printf("%-52s unavailable: %s\n", r.name, r.unavailable)
		return res
	}
	fmt.Printf("%-52s ", r.name)
	var firsts []time.Duration
	res.unavailable = b.run(&res.series, b.cfg.warmup, b.cfg.n, func() (time.Duration, error) {
		d, first, err := r.once()
		if err == nil && first > 0 {
			firsts = append(firsts, first)
		}
		return d, err
	})
	if res.unavailable != "" {
		fmt.Printf("unavailable: %s\n", res.unavailable)
		return res
	}
	// The warm-up calls' firsts are in there too: drop them.
	if len(firsts) > len(res.times) {
		firsts = firsts[len(firsts)-len(res.times):]
	}
	res.first.times = firsts
	slices.Sort(res.first.times)
	fmt.Printf(" p50 %s ms, CPU busy %.0f%%", ms(res.pct(0.5)), 100*res.busy)
	if res.failed > 0 {
		fmt.Printf(" (%d failed: %s)", res.failed, harness.OneLine(fmt.Sprint(res.firstErr)))
	}
	fmt.Println()
	return res
}

func printRoundTrips(results []*result) {
	rows := [][]string{{"row", "runs", "p50", "p95", "p99", "mean", "p50 to start event", "CPU busy", ""}}
	for _, r := range results {
		if r.unavailable != "" {
			rows = append(rows, []string{r.row.name, "-", "-", "-", "-", "-", "-", "-", "unavailable: " + r.unavailable})
			continue
		}
		runs := fmt.Sprint(len(r.times))
		if r.failed > 0 {
			runs += fmt.Sprintf(" (+%d failed)", r.failed)
		}
		first := "-"
		if len(r.first.times) > 0 {
			first = ms(r.first.pct(0.5))
		}
		rows = append(rows, []string{r.row.name, runs, ms(r.pct(0.5)), ms(r.pct(0.95)), ms(r.pct(0.99)), ms(r.mean()),
			first, fmt.Sprintf("%.0f%%", 100*r.busy), ""})
	}
	printTable(rows)
	fmt.Println("times in ms. envd rows: opening the Start stream over the host unix socket until the end event")
	fmt.Println("(connect-go client, JSON codec, kept-alive HTTP/1.1 connection); exec rows: fork/exec of the CLI until it exits.")
}
