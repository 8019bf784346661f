package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// TestLimitTCPMemory: the sandbox's sockets are host sockets (runsc
// --network=host in the sandbox's namespace), whose buffers cgroup v1
// charges only under memory.kmem.tcp.limit_in_bytes: a sandbox that
// queues data on loopback connections nobody reads stops at a quarter of
// its memory limit, as a native one does (test/localcli TestLimitTCPMemory),
// instead of holding any amount of the host's tcp_mem (review 23, F3: 634
// MB of buffers from a 512 MiB sandbox, 46 MB charged). The hog stops by
// itself at 128 MiB, twice the sandbox's whole limit.
func TestLimitTCPMemory(t *testing.T) {
	requireRunsc(t)
	if !cgroupV1Memory() {
		t.Skip("cgroup v2 charges socket buffers with the rest of a sandbox's memory")
	}
	const hog = `
import socket, time
ln = socket.socket(); ln.bind(("127.0.0.1", 0)); ln.listen(512)
port = ln.getsockname()[1]
conns, total = [], 0
chunk = b"x" * 65536
for i in range(200):
    c = socket.create_connection(("127.0.0.1", port)); s, _ = ln.accept()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    c.setblocking(False)
    conns.append((c, s))
    deadline = time.time() + 2
    while time.time() < deadline:
        try:
            total += c.send(chunk)
        except BlockingIOError:
            break
    if total > 128 << 20:
        break
print("queued_mib", total >> 20, flush=True)
`
	rt := testRuntime(t)
	ctx := t.Context()
	const memory = 64 << 20
	var out bytes.Buffer
	sbx, err := rt.Create(ctx, runtime.Spec{
		Template:  "base",
		Resources: runtime.Resources{MemoryBytes: memory},
		Process:   runtime.Process{Args: []string{"python3", "-c", hog}, Stdout: &out, Stderr: &out},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Delete(context.Background())
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	st, err := sbx.Wait(wctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %+v: %s", st, out.String())
	if st.Code == 137 || st.OOMKilled {
		return // killed at the limit: bounded
	}
	var mib int64
	if _, err := fmt.Sscanf(strings.TrimSpace(out.String()), "queued_mib %d", &mib); err != nil {
		t.Fatalf("the hog's output: %q", out.String())
	}
	if bound := native.TCPMemory(memory)>>20 + 4; mib > bound { // a page or so of slack per connection
		t.Errorf("a 64 MiB sandbox queued %d MiB in TCP buffers, over its quarter (%d MiB)", mib, bound)
	}
}
