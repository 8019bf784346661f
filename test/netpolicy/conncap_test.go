package netpolicy

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
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

// churnPy opens TCP connections to HOST:PORT and closes them at once (FIN),
// or resets them (HOW "reset"), as fast as it can for SECONDS, and prints
// how many it made.
const churnPy = `import socket, struct, sys, time
secs, host, port, how = float(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
end, n, failed = time.time() + secs, 0, 0
while time.time() < end:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(0.2)
    if how == "reset":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    try:
        s.connect((host, port))
        n += 1
    except OSError:
        failed += 1
    s.close()
print(how, "connected", n, "failed", failed)
`

// TestConnectionCap: every flow of a sandbox counts against its cap
// (hutch serve --max-conns), the DNS redirected to the host's resolver
// included, for sandboxes with internet and without, and so do its closed
// TCP connections: a sandbox that opens thousands of DNS flows, or opens
// and closes thousands of connections, holds no more conntrack entries
// than the cap, while another sandbox still resolves names and connects.
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
	churn := w.create(t, nil)
	other := w.create(t, nil)
	openAddr, _ := w.sandboxAddr(t, open)
	closedAddr, _ := w.sandboxAddr(t, closed)
	churnAddr, _ := w.sandboxAddr(t, churn)
	w.update(t, closed, map[string]any{"allowInternetAccess": false})

	targets := fmt.Sprintf("%s %s 192.0.2.1 %s", dnsAddr, otherAddr, webAddr)
	for _, id := range []string{open, closed} {
		w.run(t, id, "cat > /tmp/flood.py <<'EOF'\n"+floodPy+"EOF\n")
		w.spawn(t, id, "", fmt.Sprintf("python3 /tmp/flood.py %d 200 %s", int(flood.Seconds()), targets))
	}
	// Connections closed and reset: ct count does not count them.
	w.run(t, churn, "cat > /tmp/churn.py <<'EOF'\n"+churnPy+"EOF\n")
	for _, how := range []string{"close", "reset"} {
		w.spawn(t, churn, "", fmt.Sprintf("python3 /tmp/churn.py %d %s 80 %s > /tmp/churn-%s.out", int(flood.Seconds()), webAddr, how, how))
	}

	// The flows each sandbox holds, read from the host's conntrack table
	// while the floods run.
	h, err := netlink.NewHandleAt(w.host)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// And the size of the whole table, expired entries the dumps below
	// would remove included. The file shows the namespace it was opened in.
	var count *os.File
	if err := hutchtest.NetNSOf(w.host).Do(func() (err error) {
		count, err = os.Open("/proc/sys/net/netfilter/nf_conntrack_count")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer count.Close()
	held := map[string]int{}
	total := 0
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		for end := time.Now().Add(flood + 2*time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			buf := make([]byte, 32)
			k, err := count.ReadAt(buf, 0)
			if k == 0 {
				readErr = err
				return
			}
			c, _ := strconv.Atoi(strings.TrimSpace(string(buf[:k])))
			total = max(total, c)
			flows, err := h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
			if err != nil {
				readErr = err
				return
			}
			n := map[string]int{}
			for _, f := range flows {
				n[f.Forward.SrcIP.String()]++
			}
			for _, a := range []string{openAddr, closedAddr, churnAddr} {
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

	// A closed connection's entry goes as it closes: the churning
	// sandbox's entries are those being opened at the time.
	churned := 0
	for _, how := range []string{"close", "reset"} {
		out := w.run(t, churn, "cat /tmp/churn-"+how+".out").Stdout
		var n, failed int
		if _, err := fmt.Sscanf(out, how+" connected %d failed %d", &n, &failed); err != nil {
			t.Fatalf("churn.py %s: %q: %v", how, out, err)
		}
		churned += n
	}
	n := held[churnAddr]
	t.Logf("the sandbox closing connections (%s) made %d and held at most %d flows (cap %d)", churnAddr, churned, n, limit)
	if n > limit+slack {
		t.Errorf("the sandbox closing connections held %d flows, over its cap of %d", n, limit)
	}
	if churned < 20*limit {
		t.Errorf("the sandbox made only %d connections: the churn did not happen", churned)
	}
	// The whole table: the three sandboxes' caps, and the host's own
	// flows (the API's connections, the resolver's sockets, the other
	// sandbox's probes), far fewer than hostFlows.
	const hostFlows = 100
	t.Logf("the host's table held at most %d entries", total)
	if total > 3*(limit+slack)+hostFlows {
		t.Errorf("the host's table held %d entries, over three caps of %d and %d of the host's own", total, limit, hostFlows)
	}
}

// lookupsPy asks SERVER:53, from one socket, for the addresses of names
// never asked before (under exfil.test, which the test zone answers), 50
// at a time, for SECONDS, and prints how many it sent and got answered.
const lookupsPy = `import os, socket, struct, sys, time
secs, server = float(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((server, 53))
s.settimeout(0.05)
tag = os.urandom(4).hex().encode()
end, sent, answered = time.time() + secs, 0, 0
while time.time() < end:
    for _ in range(50):
        label = b"q%d-%s" % (sent, tag)
        s.send(struct.pack(">HHHHHH", sent & 0xFFFF, 0x0100, 1, 0, 0, 0) + bytes([len(label)]) + label + b"\x05exfil\x04test\x00" + struct.pack(">HH", 1, 1))
        sent += 1
    try:
        while True:
            s.recv(2048)
            answered += 1
    except OSError:
        pass
print("sent", sent, "answered", answered)
`

// TestResolverUpstreamFlows: the queries the resolver forwards upstream
// for sandboxes share a few sockets, so the conntrack entries of the
// host's own flows to the upstream stay a handful however many queries a
// sandbox makes. Before, each forwarded query was a socket of its own and
// an entry for 30 s: one sandbox's single flow made thousands.
func TestResolverUpstreamFlows(t *testing.T) {
	const (
		// maxFlows: the resolver's UDP sockets to one upstream, twice
		// over while they are replaced (internal/network/resolver:
		// udpSockets); the test zone's answers all fit in UDP.
		maxFlows = 8
		lookups  = 8 * time.Second
	)
	w := newWorld(t)
	id := w.create(t, nil)
	w.run(t, id, "cat > /tmp/lookups.py <<'EOF'\n"+lookupsPy+"EOF\n")
	w.spawn(t, id, "", fmt.Sprintf("python3 /tmp/lookups.py %d %s > /tmp/lookups.out", int(lookups.Seconds()), dnsAddr))

	h, err := netlink.NewHandleAt(w.host)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	held := 0
	for end := time.Now().Add(lookups + time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
		if err != nil {
			t.Fatalf("conntrack of the host: %v", err)
		}
		n := 0
		for _, f := range flows {
			if f.Forward.DstIP.String() == dnsAddr && f.Forward.DstPort == 53 {
				n++
			}
		}
		held = max(held, n)
	}
	out := strings.TrimSpace(w.run(t, id, "cat /tmp/lookups.out").Stdout)
	forwarded := w.dns.askedUnder("exfil.test")
	t.Logf("the sandbox: %s; the upstream was asked %d names; the host held at most %d flows to it", out, forwarded, held)
	if held > maxFlows {
		t.Errorf("the host held %d flows to the upstream, want at most %d", held, maxFlows)
	}
	if forwarded < 1000 {
		t.Errorf("only %d names forwarded: the lookups did not happen", forwarded)
	}
}
