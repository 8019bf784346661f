// Package soak_test is the bounded smoke of Hutch's long runs (issue 23):
// the harness of bench/soak.sh (bench/soak), built from this checkout and
// run as that script runs it, against a `hutch serve` with networking it
// starts in a network namespace of the test's own: 150 sandboxes churned
// over 10 s (create, command, file written and read back, kill), then 20
// SDK clients for 15 s, each with no failed operation and nothing left behind
// in any class the harness checks. A third run plants one leak of several
// classes after its sandboxes are killed and must fail naming each: checks
// that cannot see a leak would pass whatever the server did.
//
// Cost: 90 s on the two busy CPUs of the benches (two builds, ~170
// sandboxes in the runs, their warm-ups and settling; 131 s with runs of
// 20 s each, before they were shortened).
package soak_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) {
	testenv.RequireRootMain("hutch serve runs sandboxes: namespaces, cgroups and mounts")
	code := m.Run()
	hutchBin.Remove()
	os.Exit(code)
}

// report is what the harness writes with -json (the fields checked).
type report struct {
	Sandboxes int     `json:"sandboxes"`
	TotalOps  int     `json:"total_ops"`
	Errors    int     `json:"errors"`
	ErrorRate float64 `json:"error_rate"`
	Ops       []struct {
		Name   string   `json:"name"`
		OK     int      `json:"ok"`
		Errors int      `json:"errors"`
		First  []string `json:"first_errors"`
	} `json:"ops"`
	Leaks []struct {
		Class string   `json:"class"`
		Count int      `json:"count"`
		Items []string `json:"items"`
	} `json:"leaks"`
	LeaksTotal int      `json:"leaks_total"`
	Unchecked  []string `json:"unchecked"`
}

// classes are the leak classes the issue names (and the harness's own
// additions), each of which the report must carry.
var classes = []string{"sandboxes", "database records", "processes", "mounts", "loop devices", "cgroups",
	"veth links", "addresses", "nftables", "conntrack entries", "uid ranges", "files", "serve fds", "serve goroutines"}

// harness builds bench/soak.
func harness(t *testing.T) string {
	out := filepath.Join(t.TempDir(), "soak")
	build := exec.Command("go", "build", "-o", out, "../../bench/soak")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bench/soak: %v\n%s", err, b)
	}
	return out
}

// soak runs the harness in ns with args, and returns its report, its
// output and whether it exited 0.
func soak(t *testing.T, ns *hutchtest.NetNS, bin, hutch string, args ...string) (report, string, bool) {
	t.Helper()
	// Under /var/tmp: sandboxes' uids must reach their data directory
	// (t.TempDir's parents are closed to them).
	root, err := os.MkdirTemp("/var/tmp", "hutch-test-soak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	js := filepath.Join(t.TempDir(), "report.json")
	cmd := ns.Command(bin, append([]string{"-hutch", hutch, "-root", root, "-json", js}, args...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("soak: %v\n%s", err, out)
	}
	var r report
	b, rerr := os.ReadFile(js)
	if rerr != nil {
		t.Fatalf("no report (%v); soak said:\n%s", rerr, out)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, b)
	}
	return r, string(out), err == nil
}

// clean fails t unless the run had no failure and left nothing behind in
// any class.
func clean(t *testing.T, r report, out string, ok bool, sandboxes int, ops ...string) {
	t.Helper()
	if !ok || r.Errors != 0 || r.ErrorRate != 0 || r.LeaksTotal != 0 || len(r.Unchecked) != 0 {
		t.Errorf("the run failed or left something behind:\n%s", out)
	}
	if r.Sandboxes < sandboxes {
		t.Errorf("%d sandboxes made, want at least %d", r.Sandboxes, sandboxes)
	}
	done := map[string]int{}
	for _, o := range r.Ops {
		done[o.Name] = o.OK
		if o.Errors != 0 {
			t.Errorf("%s: %d failed: %v", o.Name, o.Errors, o.First)
		}
	}
	for _, name := range ops {
		if done[name] == 0 {
			t.Errorf("no %q succeeded (ops %v)", name, done)
		}
	}
	seen := map[string]bool{}
	for _, l := range r.Leaks {
		seen[l.Class] = true
		if l.Count != 0 {
			t.Errorf("%s: %d left behind: %v", l.Class, l.Count, l.Items)
		}
	}
	for _, c := range classes {
		if !seen[c] {
			t.Errorf("the report has no class %q", c)
		}
	}
}

func TestSoak(t *testing.T) {
	hutch := hutchBin.Path(t)
	bin := harness(t)
	ns := hutchtest.NewNetNS(t)
	cycle := []string{"create", "command", "file write", "file read", "kill"}

	t.Run("churn", func(t *testing.T) {
		r, out, ok := soak(t, ns, bin, hutch, "-n", "150", "-duration", "10s", "-warmup", "4", "churn")
		clean(t, r, out, ok, 150, cycle...)
		if r.Sandboxes != 150 {
			t.Errorf("%d sandboxes churned, want 150", r.Sandboxes)
		}
	})
	t.Run("clients", func(t *testing.T) {
		r, out, ok := soak(t, ns, bin, hutch, "-clients", "20", "-duration", "15s", "-ramp", "2s", "-warmup", "4", "clients")
		clean(t, r, out, ok, 20, append(cycle, "command (long-lived)", "file write (long-lived)", "file read (long-lived)")...)
	})
	t.Run("planted leaks are found", func(t *testing.T) {
		r, out, ok := soak(t, ns, bin, hutch, "-n", "5", "-duration", "1s", "-warmup", "2", "-settle", "3s", "-plant", "churn")
		if ok {
			t.Errorf("the run with planted leaks passed:\n%s", out)
		}
		if r.Errors != 0 {
			t.Errorf("%d operations failed:\n%s", r.Errors, out)
		}
		counts := map[string]int{}
		for _, l := range r.Leaks {
			counts[l.Class] = l.Count
		}
		// What the harness plants (bench/soak/plant.go), one of each.
		for _, c := range []string{"files", "mounts", "cgroups", "processes", "veth links", "addresses", "nftables", "uid ranges"} {
			if counts[c] == 0 {
				t.Errorf("planted %s not found: %v", c, counts)
			}
		}
		if !strings.Contains(out, "LEAK cgroups: ") {
			t.Errorf("the output names no leaked cgroup:\n%s", out)
		}
	})
}
