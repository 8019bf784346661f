// Package hutchtest holds what the end-to-end test packages share: the
// hutch binary built from this checkout, the official JS SDK's packages,
// and the runtime's view of sandboxes (`hutch ps --json`).
package hutchtest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Binary builds cmd/hutch once, on first use, into a temporary directory.
// The zero value is ready; Remove deletes the build.
type Binary struct {
	// ModuleRoot is the path of the module's root from the test package
	// ("../.." for test/<pkg>).
	ModuleRoot string

	once sync.Once
	dir  string
	path string
	out  []byte
	err  error
}

// Path returns the built binary, building it the first time.
func (b *Binary) Path(t *testing.T) string {
	t.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "hutch-test-bin-"); b.err != nil {
			return
		}
		// Sandboxes' uids must reach the binary their init re-executes.
		os.Chmod(b.dir, 0o755)
		b.path = filepath.Join(b.dir, "hutch")
		build := exec.Command("go", "build", "-o", b.path, filepath.Join(b.ModuleRoot, "cmd", "hutch"))
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		b.out, b.err = build.CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("build hutch: %v\n%s", b.err, b.out)
	}
	return b.path
}

// Remove deletes the build, if there is one.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// NPMCI installs the JS packages of dir (test/e2b-js) when node_modules is
// missing or older than package-lock.json.
func NPMCI(t *testing.T, dir string) {
	t.Helper()
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatalf("package-lock.json: %v", err)
	}
	// npm writes node_modules/.package-lock.json when it installs.
	mods, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err == nil && !mods.ModTime().Before(lock.ModTime()) {
		return
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is required to install %s: %v", dir, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm ci in %s failed: %v\n%s", dir, err, out)
	}
	t.Logf("npm ci:\n%s", out)
}

// RuntimeStatus is the part of `hutch ps --json` the tests read.
type RuntimeStatus struct {
	ID     string
	Pid    int
	State  string
	Labels map[string]string
}

// RuntimeSandboxes lists the runtime's sandboxes with `hutch ps --json`,
// run by bin with env (HUTCH_DATA_DIR names the data dir).
func RuntimeSandboxes(t *testing.T, bin string, env []string) []RuntimeStatus {
	t.Helper()
	ps := exec.Command(bin, "ps", "--json")
	ps.Env = env
	out, err := ps.Output()
	if err != nil {
		t.Errorf("hutch ps: %v", err)
		return nil
	}
	var list []RuntimeStatus
	if err := json.Unmarshal(out, &list); err != nil {
		t.Errorf("hutch ps --json: %v\n%s", err, out)
	}
	return list
}
