package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// Capabilities implements runtime.Runtime.
//
// A sandbox's init runs in a session of its own, not tied to the life of
// whoever made it, so its processes and their memory outlive `hutch serve`
// (though not the host). Freezing needs a cgroup freezer (freeze.go). The
// native backend does not implement runtime.Checkpointer: saving processes
// would take CRIU, which it does not drive yet; the reason says so, and
// also what this host's CRIU would allow, found out once per Runtime.
func (rt *Runtime) Capabilities(ctx context.Context) runtime.Capabilities {
	return runtime.Capabilities{
		KeepsMemoryAcrossRestart: true,
		LayerAfterExit:           true,
		Freeze:                   hostFreezer(),
		Checkpoint: runtime.Feature{
			Reason: "the native backend cannot checkpoint sandboxes yet (it would need CRIU): " + rt.criuStatus(ctx),
		},
	}
}

// hostFreezer reports whether sandboxes made now get a freezer, and which.
func hostFreezer() runtime.Feature {
	// The paths the sandboxes' parent cgroup has (or will have) in every
	// hierarchy, computed as for a sandbox.
	m, err := newManager(&cgroups.Cgroup{Path: cgroupParent, Resources: &cgroups.Resources{SkipDevices: true}}, nil)
	if err != nil {
		return runtime.Feature{Reason: "cannot read the cgroup hierarchies: " + err.Error()}
	}
	paths := m.GetPaths()
	if dir := paths[""]; dir != "" && v2FreezeSupported(dir) {
		where := "cgroup v2 freezer (cgroup.freeze)"
		if !cgroups.IsCgroup2UnifiedMode() {
			where += " in the unified hierarchy of a hybrid host"
		}
		return runtime.Feature{Available: true, Reason: where}
	}
	if paths["freezer"] != "" {
		return runtime.Feature{Available: true, Reason: "cgroup v1 freezer (freezer.state)"}
	}
	return runtime.Feature{Reason: noFreezer}
}

// v2FreezeSupported tells whether a cgroup v2 hierarchy has cgroup.freeze,
// which only non-root cgroups carry: dir (the sandboxes' parent) if it
// exists yet, else any cgroup beside it. With none to look at, the kernel's
// version decides (5.2 added it).
func v2FreezeSupported(dir string) bool {
	if exists(filepath.Join(dir, "cgroup.freeze")) {
		return true
	}
	if ents, err := os.ReadDir(filepath.Dir(dir)); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				return exists(filepath.Join(filepath.Dir(dir), e.Name(), "cgroup.freeze"))
			}
		}
	}
	return kernelAtLeast(5, 2)
}

// kernelAtLeast reports whether the running kernel's version is at least
// major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	ma, mi, ok := kernelVersion(unix.ByteSliceToString(u.Release[:]))
	return ok && (ma > major || ma == major && mi >= minor)
}

// kernelVersion reads the major and minor numbers of a kernel release
// ("6.18.44-fc-v669", "5.2rc1").
func kernelVersion(release string) (major, minor int, ok bool) {
	ma, rest, ok := strings.Cut(release, ".")
	if !ok {
		return 0, 0, false
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		rest = rest[:end]
	}
	major, err1 := strconv.Atoi(ma)
	minor, err2 := strconv.Atoi(rest)
	return major, minor, err1 == nil && err2 == nil
}

// criuStatus is what criuCheck says of this host's CRIU, asked once (or
// again after a call cut short by its context).
func (rt *Runtime) criuStatus(ctx context.Context) string {
	rt.criuMu.Lock()
	defer rt.criuMu.Unlock()
	if rt.criuReport != "" {
		return rt.criuReport
	}
	report := criuCheck(ctx, rt.criu)
	if ctx.Err() == nil {
		rt.criuReport = report
	}
	return report
}

// criuCheckTimeout bounds `criu check`, which probes the kernel's features
// one by one.
const criuCheckTimeout = 20 * time.Second

// criuCheck says whether CRIU (the program bin, looked up in PATH) could
// checkpoint processes on this host: whether it is installed, its version,
// and whether `criu check`, its own test of the kernel, passes. Distribution
// packages often lag the kernel (Debian 12's criu 3.17 fails on Linux 6.x
// kernels), so only the check's verdict counts, never the version alone.
func criuCheck(ctx context.Context, bin string) string {
	path, err := exec.LookPath(bin)
	if err != nil {
		return bin + " is not installed (not found in PATH)"
	}
	ctx, cancel := context.WithTimeout(ctx, criuCheckTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s --version failed: %v%s", path, err, excerpt(out))
	}
	version := "criu (version unknown)"
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version:"); ok {
			version = "criu " + strings.TrimSpace(v)
			break
		}
	}
	out, err = exec.CommandContext(ctx, path, "check").CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return fmt.Sprintf("%s: criu check did not finish: %v", version, ctx.Err())
	case errors.As(err, &exit):
		return fmt.Sprintf("%s fails its own check of this kernel (criu check: %v)%s", version, err, excerpt(out))
	case err != nil:
		return fmt.Sprintf("%s: criu check: %v", version, err)
	}
	return version + " passes criu check"
}

// excerpt picks what explains a failed command from its output: its last
// three error messages (criu reports a failure from the cause up to its
// own summary), else its last line, shortened.
func excerpt(out []byte) string {
	var errs []string
	last := ""
	for _, line := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
		l := strings.TrimSpace(line)
		if l == "" {
			continue
		}
		last = l
		// "Error (criu/cr-check.c:1223): Kernel doesn't support ..."
		if msg, ok := strings.CutPrefix(l, "Error "); ok {
			if _, after, found := strings.Cut(msg, "): "); found && strings.HasPrefix(msg, "(") {
				msg = after
			}
			errs = append(errs, msg)
		}
	}
	pick := last
	if len(errs) > 0 {
		pick = strings.Join(errs[max(0, len(errs)-3):], "; ")
	}
	if pick == "" {
		return ""
	}
	const limit = 300
	if len(pick) > limit {
		pick = pick[:limit] + "…"
	}
	return ": " + pick
}
