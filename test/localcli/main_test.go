// Package localcli tests the hutch CLI's local commands end to end, with
// no server: `hutch run`, `exec`, `ps`, `rm`, `keys` and `template` on a
// private data directory and the machine's template store, as a user runs
// them, and the sandboxes they make against escapes and past their
// limits. The binary is cmd/hutch built from this checkout.
package localcli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

var (
	bin       = &hutchtest.Binary{ModuleRoot: "../.."}
	hutchBin  string                   // the built binary
	dataDir   string                   // HUTCH_DATA_DIR for every command
	templates = testenv.TemplatesDir() // HUTCH_TEMPLATES
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// Every test runs sandboxes.
	testenv.RequireRootMain("namespaces, cgroups and mounts")
	defer bin.Remove()
	var err error
	if hutchBin, err = bin.Build(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The binary is not beside the data dir: the runtime executes
	// sandboxes' init through a read-only overlay of the binary's
	// directory, whose layers must not nest.
	tmp, err := os.MkdirTemp("", "hutch-localcli-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dataDir = filepath.Join(tmp, "data")
	if _, err := template.Open(templates).Get("base"); err != nil {
		fmt.Fprintf(os.Stderr, "localcli: the base template is missing in %s: run ./scripts/setup.sh\n", templates)
		return 1
	}
	code := m.Run()
	// Whatever a failed test left behind must not outlive the run.
	if out, err := exec.Command(hutchBin, "--data-dir", dataDir, "--templates", templates, "ps", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			exec.Command(hutchBin, "--data-dir", dataDir, "--templates", templates, "rm", id).Run()
		}
	}
	// runsc (the gvisor runtime) keeps a namespace file mounted in its
	// state dir; the data dir goes only unmounted.
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dataDir+"/") {
				syscall.Unmount(f[4], syscall.MNT_DETACH)
			}
		}
	}
	return code
}

// result is what a hutch command did.
type result = hutchtest.Result

// hutchCmd returns an unstarted hutch command using the test's data dir.
func hutchCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, hutchBin, args...)
	cmd.Env = append(os.Environ(), "HUTCH_DATA_DIR="+dataDir, "HUTCH_TEMPLATES="+templates)
	return cmd
}

// hutch runs a hutch command to completion (at most two minutes).
func hutch(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := hutchCmd(ctx, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	return hutchtest.Run(t, cmd)
}

// sh runs script with /bin/sh in a fresh sandbox that is removed afterwards,
// as the template's default user unless flags say otherwise.
func sh(t testing.TB, script string, flags ...string) result {
	t.Helper()
	args := append([]string{"run", "--rm"}, flags...)
	args = append(args, "--", "/bin/sh", "-c", script)
	return hutch(t, "", args...)
}

// sandboxDirs lists the sandbox directories in the data dir.
func sandboxDirs(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dataDir, "sandboxes"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
