// Package e2e drives the real hutch binary end to end: it builds
// cmd/hutch once, points it at a private data directory and the machine's
// template store, and checks what a user would see.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	hutchBin  string // the built binary
	dataDir   string // HUTCH_DATA_DIR for every command
	templates string // HUTCH_TEMPLATES
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: these tests need root (namespaces, cgroups, mounts)")
		return 1
	}
	tmp, err := os.MkdirTemp("", "hutch-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Not beside the data dir: the runtime executes sandboxes' init through a
	// read-only overlay of the binary's directory, whose layers must not nest.
	hutchBin = filepath.Join(tmp, "bin", "hutch")
	build := exec.Command("go", "build", "-o", hutchBin, "../../cmd/hutch")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build hutch: %v\n%s", err, out)
		return 1
	}
	dataDir = filepath.Join(tmp, "data")
	templates = os.Getenv("HUTCH_TEMPLATES")
	if templates == "" {
		templates = "/var/lib/hutch/templates"
	}
	if _, err := os.Stat(filepath.Join(templates, "base", "template.json")); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the base template is missing in %s: run ./scripts/setup.sh\n", templates)
		return 1
	}
	code := m.Run()
	// Whatever a failed test left behind must not outlive the run.
	if out, err := exec.Command(hutchBin, "--data-dir", dataDir, "--templates", templates, "ps", "-q").Output(); err == nil {
		for _, id := range strings.Fields(string(out)) {
			exec.Command(hutchBin, "--data-dir", dataDir, "--templates", templates, "rm", id).Run()
		}
	}
	return code
}

// result is what a hutch command did.
type result struct {
	Stdout, Stderr string
	Code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
}

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
	return runCmd(t, cmd)
}

// runCmd runs a prepared hutch command and collects what it did.
func runCmd(t testing.TB, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("hutch %v: %v", cmd.Args[1:], err)
	}
	return r
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
