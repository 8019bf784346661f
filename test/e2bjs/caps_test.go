package e2bjs

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// createAtOnce sends n create requests with key at once, alternating E2B's
// v1 and v2 paths, and returns each answer's status and body.
func createAtOnce(t *testing.T, s *server, key string, n int) (statuses []int, bodies []string) {
	t.Helper()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for i := range n {
		path := "/sandboxes"
		if i%2 == 1 {
			path = "/v2/sandboxes"
		}
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, s.URL()+path, strings.NewReader(`{"templateID":"base","timeout":300,"secure":true}`))
			req.Header.Set("X-API-KEY", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
				t.Errorf("a 429 with Retry-After %q: the JS SDK would retry a cap that only a kill lifts", resp.Header.Get("Retry-After"))
			}
			mu.Lock()
			statuses = append(statuses, resp.StatusCode)
			bodies = append(bodies, string(b))
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses, bodies
}

// countCaps checks the answers of createAtOnce: want 201s, and 429s in
// E2B's error shape naming the cap for the rest.
func countCaps(t *testing.T, statuses []int, bodies []string, want201 int, limit string) {
	t.Helper()
	created := 0
	for i, status := range statuses {
		switch status {
		case http.StatusCreated:
			created++
		case http.StatusTooManyRequests:
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal([]byte(bodies[i]), &e); err != nil || e.Code != 429 || !strings.Contains(e.Message, limit) {
				t.Errorf("429 body %s: want {\"code\":429,\"message\":…%s…}", bodies[i], limit)
			}
		default:
			t.Errorf("create answered %d %s", status, bodies[i])
		}
	}
	if created != want201 {
		t.Errorf("%d of %d creates at once were accepted, want %d", created, len(statuses), want201)
	}
}

// TestSandboxCaps: `hutch serve --max-sandboxes-per-key` and
// `--max-sandboxes` bound the sandboxes running at once, however many
// creates come together (review A10: 18 creates with one key in 3 s were
// all accepted). Past a cap a create answers E2B's 429, which the official
// SDK raises as RateLimitError; a kill makes room again.
func TestSandboxCaps(t *testing.T) {
	dir := jsPackage(t)
	s := startServe(t, "--warm", "0", "--max-sandboxes-per-key", "3", "--max-sandboxes", "4")

	statuses, bodies := createAtOnce(t, s, hutchtest.TestKey, 10)
	countCaps(t, statuses, bodies, 3, "at most 3 sandboxes")

	keys := exec.Command(s.Bin, "keys", "create", "--name", "other")
	keys.Env = s.Env
	out, err := keys.Output()
	if err != nil {
		t.Fatalf("hutch keys create: %v", err)
	}
	other := strings.TrimSpace(string(out))
	statuses, bodies = createAtOnce(t, s, other, 10)
	countCaps(t, statuses, bodies, 1, "at most 4 sandboxes")

	// The official SDK: RateLimitError, and room again after a kill.
	nodeScript(t, s, dir, `
import assert from 'node:assert/strict'
import { Sandbox, RateLimitError } from 'e2b'
await assert.rejects(Sandbox.create(), (err) => {
  assert.ok(err instanceof RateLimitError, 'not a RateLimitError: ' + err)
  assert.match(err.message, /at most 3 sandboxes/)
  return true
})
const [first] = await Sandbox.list().nextItems()
assert.ok(await Sandbox.kill(first.sandboxId))
const sbx = await Sandbox.create()
assert.equal((await sbx.commands.run('echo made')).stdout, 'made\n')
`)
}
