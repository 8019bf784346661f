package e2bpy

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestCapRefusalIsNotRetried: past `--max-sandboxes-per-key` a create
// raises RateLimitException at once. The Python SDK retries a 429 three
// times unless Should-Retry says no (the JS SDK only with a Retry-After):
// the server must say no, since only a kill lifts the cap. The SDK goes
// through a proxy here that counts the creates it sends.
func TestCapRefusalIsNotRetried(t *testing.T) {
	python := venv(t)
	s := hutchtest.StartServe(t, hutchBin.Path(t), "--warm", "0", "--max-sandboxes-per-key", "1")
	target, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	var creates atomic.Int32
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.TrimPrefix(r.URL.Path, "/v2") == "/sandboxes" {
			creates.Add(1)
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	cmd := exec.Command(python, "-c", `
from e2b import Sandbox, RateLimitException
first = Sandbox.create(timeout=60)
try:
    Sandbox.create(timeout=60)
    raise SystemExit("a second sandbox past a cap of 1")
except RateLimitException as e:
    assert "at most 1 sandboxes" in str(e), e
first.kill()
assert Sandbox.create(timeout=60).kill()
`)
	cmd.Env = hutchtest.CleanEnv("E2B_API_URL="+proxy.URL, "E2B_SANDBOX_URL="+s.URL(), "E2B_API_KEY="+hutchtest.TestKey)
	if r := hutchtest.Run(t, cmd); r.Code != 0 {
		t.Fatalf("python: %v", r)
	}
	if got := creates.Load(); got != 3 {
		t.Errorf("the SDK sent %d creates for 3 calls: the refused one was retried", got)
	}
}
