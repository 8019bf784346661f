package netpolicy

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// holdPy opens N connections to allowed.test:80 (through the egress
// proxy: the sandbox has a domain rule), sends one kept-alive request on
// each, counts those answered and holds them all open for HOLD seconds.
const holdPy = `import socket, sys, time
n, hold = int(sys.argv[1]), float(sys.argv[2])
conns, ok = [], 0
for i in range(n):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("allowed.test", 80))
        s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        if s.recv(4096).startswith(b"HTTP/1.1 200"):
            ok += 1
    except OSError:
        pass
    conns.append(s)
print("answered", ok, flush=True)
time.sleep(hold)
`

// TestEgressProxyDescriptors: connections through the egress proxy hold
// two of hutch serve's descriptors each, so the proxy's caps come from the
// open-file limit: sandboxes holding as many kept-alive connections as
// they can do not take the descriptors the API needs (review 3: nine
// sandboxes of 1000 connections took all 20 000 and /health went
// unanswered). Here serve has 2000 descriptors: the proxy may hold 250
// connections, 64 per sandbox.
func TestEgressProxyDescriptors(t *testing.T) {
	const nofile, each, total = 2000, 64, 250
	w := newWorldFiles(t, nofile)
	policy := opts{"network": map[string]any{"allowOut": []string{"allowed.test"}, "denyOut": []string{"0.0.0.0/0"}}}
	var ids []string
	for range 5 {
		id := w.create(t, policy)
		w.run(t, id, "cat > /tmp/hold.py <<'EOF'\n"+holdPy+"EOF\n")
		ids = append(ids, id)
	}
	for _, id := range ids {
		w.spawn(t, id, "", "python3 /tmp/hold.py 300 40 > /tmp/hold.out")
	}
	serveFDs := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", w.srv.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	answered := map[string]int{}
	most := 0
	waitFor(t, "every sandbox's connections to be made", 90*time.Second, func() (bool, string) {
		most = max(most, serveFDs())
		for _, id := range ids {
			if _, ok := answered[id]; ok {
				continue
			}
			out := w.run(t, id, "cat /tmp/hold.out").Stdout
			if n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(out), "answered ")); err == nil {
				answered[id] = n
			}
		}
		return len(answered) == len(ids), fmt.Sprint(answered)
	})
	// Held now: the API still answers, and serve has descriptors left.
	resp, err := w.hostClient().Get(fmt.Sprintf("http://127.0.0.1:%d/health", apiPort))
	if err != nil {
		t.Fatalf("/health while the proxy is full: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/health while the proxy is full: %s", resp.Status)
	}
	most = max(most, serveFDs())
	sum := 0
	for id, n := range answered {
		sum += n
		if n > each {
			t.Errorf("sandbox %s had %d connections answered through the proxy, over %d", id, n, each)
		}
	}
	t.Logf("answered %v (%d in all), hutch serve's descriptors at most %d of %d", answered, sum, most, nofile)
	if sum > total || sum < each {
		t.Errorf("%d connections answered in all, want between %d and %d", sum, each, total)
	}
	if most > nofile*3/4 {
		t.Errorf("hutch serve held %d descriptors of %d", most, nofile)
	}
}
