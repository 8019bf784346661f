package netpolicy

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// floodPy sends DNS queries (AAAA, which the resolver answers itself) to
// port 53 of the addresses given, each from a socket of its own, so each is
// a flow of its own: BATCH every 100 ms for SECONDS.
const floodPy = `import socket, struct, sys, time
secs, batch, targets = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
q = struct.pack(">HHHHHH", 4242, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\x00" + struct.pack(">HH", 28, 1)
end, n = time.time() + secs, 0
while time.time() < end:
    for _ in range(batch):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.sendto(q, (targets[n % len(targets)], 53))
        except OSError:
            pass
        s.close()
        n += 1
    time.sleep(0.1)
print("sent", n)
`

// TestConnectionCap: every flow of a sandbox counts against its cap
// (hutch serve --max-conns), the DNS redirected to the host's resolver
// included, for sandboxes with internet and without: a sandbox that opens
// thousands of DNS flows holds no more conntrack entries than the cap,
// while another sandbox still resolves names and connects.
func TestConnectionCap(t *testing.T) {
	const (
		limit = 40
		// slack: flows being set up when the table is read.
		slack = 2
		flood = 12 * time.Second
	)
	w := newWorld(t, "--max-conns", strconv.Itoa(limit))
	open := w.create(t, nil)
	closed := w.create(t, nil) // no internet, once updated: a link, DNS still redirected
	other := w.create(t, nil)
	openAddr, _ := w.sandboxAddr(t, open)
	closedAddr, _ := w.sandboxAddr(t, closed)
	w.update(t, closed, map[string]any{"allowInternetAccess": false})

	targets := fmt.Sprintf("%s %s 192.0.2.1 %s", dnsAddr, otherAddr, webAddr)
	for _, id := range []string{open, closed} {
		w.run(t, id, "cat > /tmp/flood.py <<'EOF'\n"+floodPy+"EOF\n")
		w.spawn(t, id, "", fmt.Sprintf("python3 /tmp/flood.py %d 200 %s", int(flood.Seconds()), targets))
	}

	// The flows each sandbox holds, read from the host's conntrack table
	// while the floods run.
	h, err := netlink.NewHandleAt(w.host)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	held := map[string]int{}
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for end := time.Now().Add(flood + 2*time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			flows, err := h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
			if err != nil {
				readErr = err
				return
			}
			n := map[string]int{}
			for _, f := range flows {
				n[f.Forward.SrcIP.String()]++
			}
			for _, a := range []string{openAddr, closedAddr} {
				held[a] = max(held[a], n[a])
			}
		}
	}()

	// Meanwhile another sandbox resolves and connects.
	time.Sleep(3 * time.Second)
	w.installDNSProbe(t, other)
	w.probeAll(t, other, []probe{
		{name: "lookup", cmd: "getent hosts allowed.test", want: served, marker: webAddr},
		dnsProbe("DNS to any server (udp)", "allowed.test", otherAddr, "udp", "answer "+webAddr),
		dnsProbe("DNS to any server (tcp)", "allowed.test", otherAddr, "tcp", "answer "+webAddr),
		reach("public address", "served-by "+webAddr+":80", "http://"+webAddr+"/"),
		reach("by name", "host allowed.test", "http://allowed.test/"),
	})
	<-done
	if readErr != nil {
		t.Fatalf("conntrack of the host: %v", readErr)
	}

	for _, s := range []struct{ what, addr string }{{"with internet", openAddr}, {"without internet", closedAddr}} {
		n := held[s.addr]
		t.Logf("the sandbox %s (%s) held at most %d flows (cap %d)", s.what, s.addr, n, limit)
		if n > limit+slack {
			t.Errorf("the sandbox %s held %d flows, over its cap of %d", s.what, n, limit)
		}
		// The flood reached the cap: the other sandbox worked while this
		// one was at it.
		if n < limit/2 {
			t.Errorf("the sandbox %s held only %d flows: the flood did not reach the cap of %d", s.what, n, limit)
		}
	}
}
