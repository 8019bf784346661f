package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
)

// idPrefix starts the name of every container the harness makes, so that
// leftovers can be found and removed.
const idPrefix = "hutch-bench-"

// contender is one way of running /bin/true in isolation.
type contender struct {
	key  string // for -only
	name string // in the table
	// argv returns the command line for one run; id is unique per run.
	argv func(id string) []string
	// legacyCgroups runs the command in the mount namespace without the
	// cgroup2 tree (see harness.LegacyCgroupNS).
	legacyCgroups bool
	// unavailable is why the contender cannot run here, if known upfront.
	unavailable string
}

func contenderKeys() []string {
	return []string{"exec", "hutch", "hutch-cli", "bwrap", "runc", "crun", "podman-runc", "podman-crun"}
}

type bench struct {
	ctx context.Context
	cfg *config
	run *runner

	bins      map[string]string // tool name -> path, or missing
	legacy    *harness.LegacyCgroupNS
	legacyErr string
	ociErr    string // why the OCI bundle cannot be used, if so

	hutchBefore   map[string]bool // sandboxes that existed before the bench
	cgroupsBefore map[string]bool // cgroups (see cgroupDirs) that did
}

func newBench(ctx context.Context, cfg *config) *bench {
	return &bench{ctx: ctx, cfg: cfg, bins: map[string]string{}}
}

func (b *bench) prepare() error {
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	errFile, err := os.CreateTemp("", "hutch-bench-stderr-")
	if err != nil {
		return err
	}
	os.Remove(errFile.Name()) // the open file stays usable
	b.run = &runner{devnull: devnull, errFile: errFile, timeout: b.cfg.runTimeout}

	for _, t := range []string{"bwrap", "runc", "crun", "podman"} {
		if p, err := exec.LookPath(t); err == nil {
			b.bins[t] = p
		}
	}
	if _, err := os.Stat(filepath.Join(b.cfg.rootfs, "bin", "true")); err != nil {
		return fmt.Errorf("base template rootfs %s: %w (run bench/run.sh, or hutch template build base)", b.cfg.rootfs, err)
	}
	b.hutchBefore = map[string]bool{}
	if ids, err := b.hutchIDs(); err == nil {
		for _, id := range ids {
			b.hutchBefore[id] = true
		}
	} else {
		return err
	}

	b.cgroupsBefore = map[string]bool{}
	for _, c := range cgroupDirs() {
		b.cgroupsBefore[c] = true
	}

	// The OCI peers' rootfs: the very template Hutch uses, read-only and
	// idmapped to the containers' root, mounted in this process's private
	// mount namespace only.
	if err := b.prepareOCI(); err != nil {
		b.ociErr = err.Error()
	}
	if ns, err := harness.NewLegacyCgroupNS(); err == nil {
		b.legacy = ns
	} else {
		b.legacyErr = err.Error()
	}
	return nil
}

func (b *bench) prepareOCI() error {
	hostID, err := harness.MountBundleRootfs(b.cfg.bundle, b.cfg.rootfs, b.cfg.ociRootfs)
	b.cfg.hostID = hostID
	return err
}

func (b *bench) close() {
	if b.legacy != nil {
		b.legacy.Close()
	}
}

// contenders, in the order of the table.
func (b *bench) contenders() []*contender {
	cfg := b.cfg
	missing := func(c *contender, tool string) *contender {
		if _, ok := b.bins[tool]; !ok {
			c.unavailable = tool + " is not installed"
		}
		return c
	}
	oci := func(c *contender, tool string) *contender {
		missing(c, tool)
		if c.unavailable == "" && b.ociErr != "" {
			c.unavailable = b.ociErr
		}
		if c.unavailable == "" && c.legacyCgroups && b.legacy == nil {
			c.unavailable = b.legacyErr
		}
		return c
	}
	podman := func(runtime string) func(string) []string {
		return func(id string) []string { return b.podmanArgs(runtime, id, false, "/bin/true") }
	}
	return []*contender{
		{key: "exec", name: "Go exec /bin/true (no isolation)", argv: func(string) []string { return []string{"/bin/true"} }},
		{key: "hutch", name: "hutch run --rm", argv: func(string) []string {
			return []string{cfg.hutch, "run", "--rm", "--", "/bin/true"}
		}},
		{key: "hutch-cli", name: "hutch ps -q (CLI start, no sandbox)", argv: func(string) []string {
			return []string{cfg.hutch, "ps", "-q"}
		}},
		missing(&contender{key: "bwrap", name: "bwrap --unshare-all", argv: func(string) []string {
			return []string{b.bins["bwrap"], "--unshare-all", "--ro-bind", cfg.rootfs, "/", "--proc", "/proc",
				"--dev", "/dev", "--die-with-parent", "/bin/true"}
		}}, "bwrap"),
		oci(&contender{key: "runc", name: "runc run", argv: func(id string) []string {
			return []string{b.bins["runc"], "run", "--bundle", cfg.bundle, id}
		}}, "runc"),
		oci(&contender{key: "crun", name: "crun run (no cgroup2 mount)", legacyCgroups: true, argv: func(id string) []string {
			return []string{b.bins["crun"], "run", "--bundle", cfg.bundle, id}
		}}, "crun"),
		oci(&contender{key: "podman-runc", name: "podman run --runtime=runc", argv: podman("runc")}, "podman"),
		oci(&contender{key: "podman-crun", name: "podman run --runtime=crun (no cgroup2)", legacyCgroups: true, argv: podman("crun")}, "podman"),
	}
}

// podmanArgs is podman's command line: a one-shot container from the same
// read-only rootfs under a private overlay (":O"), with Hutch's limits and a
// user namespace, and what this host needs (see bench/README.md).
func (b *bench) podmanArgs(runtime, id string, detach bool, cmd ...string) []string {
	hostID := strconv.Itoa(b.cfg.hostID)
	mode := "--rm"
	if detach {
		mode = "-d"
	}
	args := []string{b.bins["podman"], "--runtime=" + runtime, "--cgroup-manager=cgroupfs", "--events-backend=none",
		"run", mode, "--name=" + id, "--network=none", "--cgroupns=private", "--log-driver=none",
		"--ulimit=nofile=1024:1024", "--ulimit=nproc=4096:4096",
		"--memory=512m", "--memory-swap=512m", "--cpus=1", "--pids-limit=512",
		"--uidmap=0:" + hostID + ":65536", "--gidmap=0:" + hostID + ":65536",
		"--rootfs", b.cfg.ociRootfs + ":O"}
	return append(args, cmd...)
}

// idleSandbox is one running idle sandbox: the root of its process tree
// (including any monitor of its own), its init and how to remove it.
type idleSandbox struct {
	root, init int
	remove     func()
}

// idleKind is one way of starting an idle sandbox.
type idleKind struct {
	key, name string
	legacy    bool // start and remove in the namespace without cgroup2
	start     func(id string) (idleSandbox, error)
}

// idleMemory measures the host memory of idle sandboxes (sleep infinity)
// of each runtime: one alone, then each of four running side by side, which
// share their binaries' pages.
func (b *bench) idleMemory() {
	fmt.Println("Host memory of idle sandboxes running `sleep infinity` (summed over each sandbox's processes):")
	want := func(key string) bool { return b.cfg.only == nil || b.cfg.only[key] }
	var kinds []idleKind
	if want("hutch") {
		kinds = append(kinds, idleKind{key: "hutch", name: "hutch run -d", start: b.idleHutch})
	}
	if b.ociErr == "" {
		if want("runc") && b.bins["runc"] != "" {
			kinds = append(kinds, idleKind{key: "runc", name: "runc run -d", start: b.idleOCI("runc")})
		}
		if want("crun") && b.bins["crun"] != "" && b.legacy != nil {
			kinds = append(kinds, idleKind{key: "crun", name: "crun run -d (no cgroup2 mount)", legacy: true, start: b.idleOCI("crun")})
		}
		if want("podman-runc") && b.bins["podman"] != "" {
			kinds = append(kinds, idleKind{key: "podman", name: "podman run -d --runtime=runc", start: b.idlePodman})
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "sandbox\trunning\tprocesses\tPSS KiB\tprivate dirty KiB\tRSS KiB\twhich\tlimits read back from the kernel\t")
	for _, k := range kinds {
		for _, n := range []int{1, 4} {
			if b.ctx.Err() != nil {
				break
			}
			label := "alone"
			if n > 1 {
				label = fmt.Sprintf("each of %d", n)
			}
			m, err := b.idleRun(k, n)
			if err != nil {
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\tfailed: %s\t\n", k.name, label, harness.OneLine(err.Error()))
				break
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", k.name, label, m.Procs, m.PssKiB, m.DirtyKiB, m.RssKiB, strings.Join(m.Names, " + "), m.Limits)
		}
	}
	tw.Flush()
	fmt.Println("PSS divides each shared page among the processes mapping it, so it depends on what else runs from the same")
	fmt.Println("files (binaries, libc): see 'alone' against 'each of 4'. Private dirty pages can never be shared.")
}

// settle gives just-started sandboxes a moment to finish starting.
const settle = 500 * time.Millisecond

// idleRun starts n idle sandboxes of one kind and returns the average
// memory of one, with the limits and process names of the first.
func (b *bench) idleRun(k idleKind, n int) (treeMemory, error) {
	in := func(f func()) { f() }
	if k.legacy {
		in = b.legacy.Do
	}
	var sbs []idleSandbox
	defer func() {
		in(func() {
			for _, s := range sbs {
				s.remove()
			}
		})
	}()
	var err error
	in(func() {
		for i := 0; i < n && err == nil; i++ {
			var s idleSandbox
			if s, err = k.start(b.uniqueID(fmt.Sprintf("idle%d", i))); err == nil {
				sbs = append(sbs, s)
			}
		}
	})
	if err != nil {
		return treeMemory{}, err
	}
	time.Sleep(settle)
	var avg treeMemory
	for i, s := range sbs {
		m, err := measureTree(s.root)
		if err != nil {
			return treeMemory{}, err
		}
		if i == 0 {
			avg.Procs, avg.Names, avg.Limits = m.Procs, m.Names, limitsOf(s.init)
		}
		avg.PssKiB += m.PssKiB
		avg.RssKiB += m.RssKiB
		avg.DirtyKiB += m.DirtyKiB
	}
	avg.PssKiB /= int64(n)
	avg.RssKiB /= int64(n)
	avg.DirtyKiB /= int64(n)
	return avg, nil
}

// idleHutch starts `hutch run -d -- sleep infinity` and finds its init's host
// pid with `hutch ps --json`.
func (b *bench) idleHutch(string) (idleSandbox, error) {
	out, err := b.output(b.cfg.hutch, "run", "-d", "--", "sleep", "infinity")
	if err != nil {
		return idleSandbox{}, err
	}
	id := strings.TrimSpace(string(out))
	s := idleSandbox{remove: func() { b.output(b.cfg.hutch, "rm", id) }}
	var list []struct {
		ID  string
		Pid int
	}
	if err := b.outputJSON(&list, b.cfg.hutch, "ps", "--json"); err != nil {
		s.remove()
		return idleSandbox{}, err
	}
	for _, e := range list {
		if e.ID == id && e.Pid != 0 {
			s.root, s.init = e.Pid, e.Pid
			return s, nil
		}
	}
	s.remove()
	return idleSandbox{}, fmt.Errorf("sandbox %s is not running according to hutch ps --json", id)
}

// idleOCI starts a detached runc or crun container from bundle-idle.
func (b *bench) idleOCI(tool string) func(string) (idleSandbox, error) {
	bin := b.bins[tool]
	return func(id string) (idleSandbox, error) {
		// runc/crun -d hand their stdio to the container: /dev/null, not
		// anything the harness would wait on.
		if _, err := b.run.run([]string{bin, "run", "-d", "--bundle", b.cfg.bundleIdle, id}); err != nil {
			return idleSandbox{}, err
		}
		s := idleSandbox{remove: func() { b.output(bin, "delete", "-f", id) }}
		var st struct{ Pid int }
		if err := b.outputJSON(&st, bin, "state", id); err != nil {
			s.remove()
			return idleSandbox{}, err
		}
		// No monitor: the container's init is the whole sandbox.
		s.root, s.init = st.Pid, st.Pid
		return s, nil
	}
}

// idlePodman starts a detached podman container with the timed run's flags.
func (b *bench) idlePodman(id string) (idleSandbox, error) {
	if _, err := b.output(b.podmanArgs("runc", id, true, "/bin/sleep", "infinity")...); err != nil {
		return idleSandbox{}, err
	}
	s := idleSandbox{remove: func() { b.output(b.bins["podman"], "rm", "-f", "-t", "0", id) }}
	out, err := b.output(b.bins["podman"], "inspect", "--format", "{{.State.ConmonPid}} {{.State.Pid}}", id)
	if err == nil {
		_, err = fmt.Sscan(string(out), &s.root, &s.init)
	}
	if err != nil {
		s.remove()
		return idleSandbox{}, fmt.Errorf("podman inspect %s: %w", id, err)
	}
	// conmon, the container's monitor, is the root: the init is its child.
	return s, nil
}

func (b *bench) hutchIDs() ([]string, error) {
	out, err := b.output(b.cfg.hutch, "ps", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// cleanup removes whatever the bench left behind and reports it.
func (b *bench) cleanup(report bool) {
	say := func(format string, a ...any) {
		if report {
			fmt.Printf(format+"\n", a...)
		}
	}
	var notes []string
	if ids, err := b.hutchIDs(); err == nil {
		var left []string
		for _, id := range ids {
			if !b.hutchBefore[id] {
				left = append(left, id)
			}
		}
		if len(left) > 0 {
			notes = append(notes, fmt.Sprintf("hutch: %d sandboxes left in hutch ps (%s); removing", len(left), strings.Join(left, " ")))
			b.output(append([]string{b.cfg.hutch, "rm"}, left...)...)
		}
	}
	harness.RemoveLeftoverOCI(b.legacy, idPrefix, func(args ...string) ([]byte, error) {
		bin := b.bins[args[0]]
		if bin == "" {
			return nil, errors.New(args[0] + " is not installed")
		}
		return b.output(append([]string{bin}, args[1:]...)...)
	}, func(tool string, ids []string) {
		notes = append(notes, fmt.Sprintf("%s: %d containers left (%s); deleted", tool, len(ids), strings.Join(ids, " ")))
	})
	if bin := b.bins["podman"]; bin != "" {
		// In the namespace without cgroup2, so that podman can also call
		// crun for containers made with --runtime=crun.
		do := func(f func()) { f() }
		if b.legacy != nil {
			do = b.legacy.Do
		}
		do(func() {
			if out, err := b.output(bin, "ps", "-a", "-q", "--filter", "name=^"+idPrefix); err == nil {
				if left := strings.Fields(string(out)); len(left) > 0 {
					notes = append(notes, fmt.Sprintf("podman: %d containers left; removing", len(left)))
					b.output(append([]string{bin, "rm", "-f", "-t", "0"}, left...)...)
				}
			}
		})
	}
	for _, c := range cgroupDirs() {
		if !b.cgroupsBefore[c] {
			// Hutch's are not necessarily ours: every Hutch on this host
			// (a test run, say) makes its sandboxes' cgroups there too.
			notes = append(notes, "cgroup appeared during the bench and is still there: "+c)
		}
	}
	if len(notes) == 0 {
		say("Leftovers: none (hutch ps, runc/crun list, podman ps -a, cgroups all clean)")
		return
	}
	say("Leftovers found after the runs:")
	for _, n := range notes {
		say("  %s", n)
	}
}

// cgroupDirs lists the cgroups Hutch (under /hutch), runc and crun (named
// after the container) have in the hierarchies that hold their limits.
func cgroupDirs() []string {
	var out []string
	for _, h := range []string{"memory", "pids", "cpu", "unified"} {
		root := filepath.Join("/sys/fs/cgroup", h)
		if ents, err := os.ReadDir(filepath.Join(root, "hutch")); err == nil {
			for _, e := range ents {
				if e.IsDir() {
					out = append(out, filepath.Join(root, "hutch", e.Name()))
				}
			}
		}
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), idPrefix) {
				out = append(out, filepath.Join(root, e.Name()))
			}
		}
	}
	return out
}
