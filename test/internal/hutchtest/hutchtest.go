// Package hutchtest is the toolbox of the end-to-end suites under test/:
// the hutch binary built from this checkout (Binary), a real `hutch
// serve` (Server), running a command and reading what it did (Run), the
// suites' JS packages (JSPackage) and node (NodeScript, NodeTests), the
// runtime's view of sandboxes (`hutch ps --json`), and for cluster mode a
// LAN of network namespaces (NewLAN), an external etcd on it
// (StartEtcdExternal) and `hutch serve --cluster` nodes (NewCluster). What every test package shares, the suites and
// internal/... alike (the rule for root, the template store), is package
// internal/testenv.
package hutchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor"
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

// Path returns the built binary, building it the first time; it fails
// the test when the build fails.
func (b *Binary) Path(t *testing.T) string {
	t.Helper()
	path, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// Build is Path for a TestMain, which has no test to fail.
func (b *Binary) Build() (string, error) {
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "hutch-test-bin-"); b.err != nil {
			return
		}
		// Sandboxes' uids must reach the binary their init re-executes.
		os.Chmod(b.dir, 0o755)
		b.path = filepath.Join(b.dir, "hutch")
		// Both binaries with one build stamp, as scripts/setup.sh
		// installs them: sandboxes run hutch-sandbox, found beside hutch.
		// (The stamp need not differ from build to build: the pair is
		// only ever used from its own directory.)
		for _, cmd := range []string{"hutch", "hutch-sandbox"} {
			build := exec.Command("go", "build", "-tags", "hutch_build_hutchtest", "-o", filepath.Join(b.dir, cmd), filepath.Join(b.ModuleRoot, "cmd", cmd))
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b.out, b.err = build.CombinedOutput(); b.err != nil {
				return
			}
		}
	})
	if b.err != nil {
		return "", fmt.Errorf("build hutch: %v\n%s", b.err, b.out)
	}
	return b.path, nil
}

// Remove deletes the build, if there is one.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// JSPackage returns the JS package (package.json, package-lock.json)
// at rel, a path under test/ such as E2BJS, made absolute, with its
// packages installed (NPMCI). Test packages are test/<name>, their
// working directory when they run, so test/ is "..".
func JSPackage(t *testing.T, rel string) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", rel))
	if err != nil {
		t.Fatal(err)
	}
	NPMCI(t, dir)
	return dir
}

// E2BJS is the JS package holding the official E2B JS SDK (pinned): the
// e2bjs suite's, which the netpolicy and mcp suites use too.
const E2BJS = "e2bjs/js"

// NPMCI installs the JS packages of dir when node_modules is missing or
// older than package-lock.json.
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
	ID         string
	TemplateID string // the template build
	Pid        int
	State      string
	Labels     map[string]string
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

// RequireRunsc fails the test when gVisor's runsc, which
// scripts/setup.sh builds and installs, is missing: the gvisor runtime's
// tests run wherever the rest do.
func RequireRunsc(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(gvisor.DefaultRunsc); err != nil {
		t.Fatalf("runsc: %v (run ./scripts/setup.sh)", err)
	}
}

// Main is a test package's TestMain for suites that build the binary:
// it runs the tests, removes the builds and exits with the tests' code.
func Main(m *testing.M, builds ...*Binary) {
	code := m.Run()
	for _, b := range builds {
		b.Remove()
	}
	os.Exit(code)
}
