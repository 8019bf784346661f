package envdapi_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNothingLinksTheDaemon: the lifecycle, the edge, the E2B adapter and
// the Go SDK (which programs import) talk to envd through this contract,
// never by linking the daemon (internal/envd and below).
func TestNothingLinksTheDaemon(t *testing.T) {
	const mod = "github.com/hutch-sandbox/hutch/"
	for _, pkg := range []string{"internal/sandbox", "internal/server", "internal/e2bapi", "sdk", "internal/envdapi"} {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == mod+"internal/envd" || strings.HasPrefix(dep, mod+"internal/envd/") {
				t.Errorf("%s links the daemon: %s", pkg, dep)
			}
		}
	}
}
