package repo

import (
	"os/exec"
	"path"
	"strings"
	"testing"
)

// TestTestHelpersStayInTests: the test helpers (internal/testenv,
// test/internal/hutchtest, envdtest, servertest, runtimetest: a package
// named test* or *test) are imported by tests only, never by a package
// that a program (cmd/hutch, the benchmarks) or the SDK builds on.
func TestTestHelpersStayInTests(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/hutch-sandbox/hutch/"
	helper := func(pkg string) bool {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			return false
		}
		name := path.Base(rel)
		return strings.HasPrefix(rel, "test/") || strings.HasPrefix(name, "test") || strings.HasSuffix(name, "test")
	}
	helpers := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		if helper(pkg) {
			helpers++
			continue
		}
		for _, dep := range strings.Fields(deps) {
			if helper(dep) {
				t.Errorf("%s imports the test helper %s", pkg, dep)
			}
		}
	}
	if helpers < 5 {
		t.Errorf("found only %d test packages", helpers)
	}
}
