package network

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/network/policy"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// The tests build their own world out of network namespaces, and never
// send a packet anywhere else:
//
//	host      where the Manager runs (a fresh namespace, not the real host):
//	          203.0.113.254/24 on "inet0", default route to the internet;
//	          a fake API on :3000 and the resolver's and proxy's ports.
//	internet  the other end of inet0: 203.0.113.1, and the addresses tests
//	          expect to reach or to be refused — 203.0.113.10 (a public
//	          server), 198.51.100.7 (another), 169.254.169.254 (cloud
//	          metadata), 10.99.0.1 (a private host) — each with TCP echo
//	          servers on ports 80 and 8080 that first say who connected.
//	sandboxes namespaces of `sleep` processes, attached by the Manager.
type world struct {
	t        *testing.T
	host     netns.NsHandle
	internet netns.NsHandle
	m        *Manager
}

// inNS runs f on a thread in ns.
func inNS(t *testing.T, ns netns.NsHandle, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		// The thread is left in ns and dies with the goroutine: never
		// returned to the pool in the wrong namespace.
		if err := netns.Set(ns); err != nil {
			t.Errorf("setns: %v", err)
			return
		}
		f()
	}()
	<-done
}

var internetAddrs = []string{"203.0.113.10", "198.51.100.7", "169.254.169.254", "10.99.0.1"}

func newWorld(t *testing.T) *world { t.Helper(); return newWorldWith(t, Options{}) }

// newWorldWith builds the world with a manager made from opts.
func newWorldWith(t *testing.T, opts Options) *world {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
	w := &world{t: t}
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if w.internet, err = netns.New(); err != nil {
			return
		}
		w.host, err = netns.New()
	}()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.host.Close(); w.internet.Close() })

	inNS(t, w.host, func() {
		lo, _ := netlink.LinkByName("lo")
		netlink.LinkSetUp(lo)
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "inet0"}, PeerName: "up0", PeerNamespace: netlink.NsFd(w.internet)}
		if err := netlink.LinkAdd(veth); err != nil {
			t.Fatal(err)
		}
		l, _ := netlink.LinkByName("inet0")
		netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(netip.MustParseAddr("203.0.113.254"), 24)})
		netlink.LinkSetUp(l)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP("203.0.113.1")}); err != nil {
			t.Fatal(err)
		}
	})
	inNS(t, w.internet, func() {
		lo, _ := netlink.LinkByName("lo")
		netlink.LinkSetUp(lo)
		l, err := netlink.LinkByName("up0")
		if err != nil {
			t.Fatal(err)
		}
		netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(netip.MustParseAddr("203.0.113.1"), 24)})
		for _, a := range internetAddrs {
			netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipnet(netip.MustParseAddr(a), 32)})
		}
		netlink.LinkSetUp(l)
		// Replies to the host's (masqueraded) address are on link.
		for _, a := range internetAddrs {
			for _, port := range []string{"80", "8080"} {
				ln, err := net.Listen("tcp", a+":"+port)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ln.Close() })
				go echoServer(ln)
			}
		}
	})
	inNS(t, w.host, func() {
		// What a sandbox must never reach on the host: its API port.
		for _, addr := range []string{"0.0.0.0:3000", "0.0.0.0:15353", "0.0.0.0:15380"} {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go echoServer(ln)
		}
		udp, err := net.ListenPacket("udp", "0.0.0.0:15353")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { udp.Close() })
		go func() { // a "resolver" that says who asked
			buf := make([]byte, 512)
			for {
				n, from, err := udp.ReadFrom(buf)
				if err != nil {
					return
				}
				udp.WriteTo([]byte("dns:"+from.(*net.UDPAddr).IP.String()+":"+string(buf[:n])), from)
			}
		}()
		w.m, err = New(opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.m.Start(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	})
	return w
}

// echoServer greets each connection with "hello <client address>\n" and
// echoes what it reads.
func echoServer(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "hello %s\n", c.RemoteAddr().(*net.TCPAddr).IP)
			io.Copy(c, c)
		}()
	}
}

// sandbox starts a process in a fresh network namespace and attaches it.
func (w *world) sandbox(id string, p *policy.Egress) (pid int, addr Addr) {
	w.t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var err error
	inNS(w.t, w.host, func() {
		addr, err = w.m.Attach(context.Background(), id, cmd.Process.Pid, p)
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return cmd.Process.Pid, addr
}

// inSandbox runs f on a thread in the network namespace of the sandbox of pid.
func (w *world) inSandbox(pid int, f func()) {
	w.t.Helper()
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		w.t.Fatal(err)
	}
	defer ns.Close()
	inNS(w.t, ns, f)
}

// dial connects from inside the sandbox of pid and reads the greeting;
// "" means the connection could not be made in a short time.
func (w *world) dial(pid int, addr string) (greeting string, conn net.Conn) {
	return w.dialTimeout(pid, addr, 3*time.Second)
}

func (w *world) dialTimeout(pid int, addr string, timeout time.Duration) (greeting string, conn net.Conn) {
	w.t.Helper()
	w.inSandbox(pid, func() {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			c.Close()
			return
		}
		c.SetReadDeadline(time.Time{})
		greeting, conn = strings.TrimSpace(line), c
	})
	return greeting, conn
}

// reaches reports whether a connection from the sandbox gets a greeting.
func (w *world) reaches(pid int, addr string) bool {
	g, c := w.dial(pid, addr)
	if c != nil {
		c.Close()
	}
	return g != ""
}

// refused reports whether a connection from the sandbox fails. Dropped
// packets show as a timeout: a short one keeps the tests quick, and a
// slow machine can only make a refusal look likelier, never a reach.
func (w *world) refused(pid int, addr string) bool {
	g, c := w.dialTimeout(pid, addr, 300*time.Millisecond)
	if c != nil {
		c.Close()
	}
	return g == ""
}

func mustPolicy(t *testing.T, internet bool, allow, deny []string) *policy.Egress {
	t.Helper()
	p, err := policy.Parse(internet, allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultPolicy(t *testing.T) {
	w := newWorld(t)
	pid, addr := w.sandbox("iopen", mustPolicy(t, true, nil, nil))
	neighbour, naddr := w.sandbox("ineighbour", mustPolicy(t, true, nil, nil))

	// The public internet, seen from it through the host's masquerade.
	if g, c := w.dial(pid, "203.0.113.10:80"); g != "hello 203.0.113.254" {
		t.Errorf("public server: greeting %q, want it to see the host's address", g)
	} else {
		c.Close()
	}
	for _, blocked := range []string{
		"169.254.169.254:80", // cloud metadata
		"10.99.0.1:80",       // a private host
		net.JoinHostPort(addr.Gateway.String(), "3000"), // the host's API port
		"203.0.113.254:3000",                            // the host by its other address
		net.JoinHostPort(naddr.Sandbox.String(), "80"),  // a neighbour
	} {
		if !w.refused(pid, blocked) {
			t.Errorf("the sandbox reached %s", blocked)
		}
	}
	if !w.refused(neighbour, net.JoinHostPort(addr.Sandbox.String(), "80")) {
		t.Error("a neighbour reached the sandbox")
	}
	// DNS to anywhere lands at the host's resolver, which sees who asked.
	ns, _ := netns.GetFromPid(pid)
	defer ns.Close()
	var answer string
	inNS(t, ns, func() {
		c, err := net.Dial("udp", "198.51.100.53:53")
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		c.Write([]byte("q"))
		buf := make([]byte, 100)
		n, _ := c.Read(buf)
		answer = string(buf[:n])
	})
	if want := "dns:" + addr.Sandbox.String() + ":q"; answer != want {
		t.Errorf("DNS answer %q, want %q (redirected to the resolver)", answer, want)
	}
}

func TestNoInternetAndAllowList(t *testing.T) {
	w := newWorld(t)
	none, _ := w.sandbox("inone", mustPolicy(t, false, nil, nil))
	if !w.refused(none, "203.0.113.10:80") {
		t.Error("a sandbox without internet reached a public server")
	}
	list, addr := w.sandbox("ilist", mustPolicy(t, true, []string{"203.0.113.10", "allowed.test"}, []string{"0.0.0.0/0"}))
	if !w.reaches(list, "203.0.113.10:8080") {
		t.Error("an allowed address was refused")
	}
	if !w.refused(list, "198.51.100.7:8080") {
		t.Error("an address outside the allow list was reached")
	}
	// With a domain rule, the sandbox's web traffic goes to the egress
	// proxy (here the host's fake one on 15380, which greets with the
	// sandbox's own address), wherever it was meant to go.
	if g, c := w.dial(list, "198.51.100.7:80"); g != "hello "+addr.Sandbox.String() {
		t.Errorf("port 80 of a sandbox with domain rules: greeting %q, want the egress proxy's", g)
	} else {
		c.Close()
	}
	// Once an allowed name resolved to it, it is open (the resolver calls
	// Answered before it answers).
	inNS(t, w.host, func() {
		w.m.Answered(addr.Sandbox, "allowed.test", []netip.Addr{netip.MustParseAddr("198.51.100.7")}, time.Minute)
	})
	if !w.reaches(list, "198.51.100.7:8080") {
		t.Error("the address of an allowed name was refused")
	}
	if !w.m.Resolved(addr.Sandbox, netip.MustParseAddr("198.51.100.7")) {
		t.Error("Resolved does not know the answer")
	}
	if p, ok := w.m.Policy(addr.Sandbox); !ok || !p.HasDomains() {
		t.Errorf("Policy(%s) = %v, %v", addr.Sandbox, p, ok)
	}
	// Never private or metadata, even when listed.
	bad, _ := w.sandbox("ibad", mustPolicy(t, true, []string{"169.254.169.254", "10.0.0.0/8"}, nil))
	if !w.refused(bad, "169.254.169.254:80") || !w.refused(bad, "10.99.0.1:80") {
		t.Error("an allow rule opened a range no sandbox may reach")
	}
}

func TestUpdateCutsConnections(t *testing.T) {
	w := newWorld(t)
	pid, _ := w.sandbox("iupdate", mustPolicy(t, true, nil, nil))
	g, c := w.dial(pid, "203.0.113.10:80")
	if g == "" {
		t.Fatal("no connection before the update")
	}
	defer c.Close()
	g2, c2 := w.dial(pid, "198.51.100.7:80")
	if g2 == "" {
		t.Fatal("no second connection before the update")
	}
	defer c2.Close()
	var err error
	inNS(t, w.host, func() {
		err = w.m.Update(context.Background(), "iupdate", mustPolicy(t, true, nil, []string{"203.0.113.0/24"}))
	})
	if err != nil {
		t.Fatal(err)
	}
	// The denied connection is dead; the other still echoes.
	echo := func(c net.Conn) bool {
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return false
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		return err == nil && line == "ping\n"
	}
	if echo(c) {
		t.Error("a connection the new policy denies still works")
	}
	if !echo(c2) {
		t.Error("a connection the new policy allows was cut")
	}
	if !w.refused(pid, "203.0.113.10:80") {
		t.Error("a new connection to a denied range was made")
	}
}

func TestDetachAndRestart(t *testing.T) {
	w := newWorld(t)
	keep, _ := w.sandbox("ikeep", mustPolicy(t, true, nil, []string{"198.51.100.0/24"}))
	gone, _ := w.sandbox("igone", mustPolicy(t, true, nil, nil))
	_ = gone
	inNS(t, w.host, func() {
		// A new server: it knows only "ikeep" runs. One manager per
		// namespace: it is refused while the old one runs.
		if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "another hutch serve") {
			t.Errorf("a second manager in the namespace: %v", err)
		}
		w.m.Close()
		m2, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := m2.Start(context.Background(), []Live{{ID: "ikeep", Policy: mustPolicy(t, true, nil, []string{"198.51.100.0/24"})}}); err != nil {
			t.Fatal(err)
		}
		w.m = m2
		links, _ := netlink.LinkList()
		var names []string
		for _, l := range links {
			if strings.HasPrefix(l.Attrs().Name, linkPrefix) {
				names = append(names, l.Attrs().Alias)
			}
		}
		if len(names) != 1 || names[0] != "ikeep" {
			t.Errorf("sandbox links after the restart: %v, want only ikeep's", names)
		}
	})
	if !w.reaches(keep, "203.0.113.10:80") || !w.refused(keep, "198.51.100.7:80") {
		t.Error("the adopted sandbox's policy is not in force after the restart")
	}
	var err error
	inNS(t, w.host, func() { err = w.m.Detach(context.Background(), "ikeep") })
	if err != nil {
		t.Fatal(err)
	}
	if !w.refused(keep, "203.0.113.10:80") {
		t.Error("a detached sandbox still reaches out")
	}
	inNS(t, w.host, func() {
		if err := w.m.Update(context.Background(), "ikeep", mustPolicy(t, true, nil, nil)); !errors.Is(err, ErrNoNetwork) {
			t.Errorf("Update of a detached sandbox: %v", err)
		}
	})
}

// TestRestartWithManySandboxes: a restarted manager writes the firewall
// of every running sandbox, whatever the API accepted. Each batch's
// acknowledgements must fit the connection's buffer (with the default one,
// ten sandboxes were too many: ENOBUFS), and sandboxes at the API's bounds
// (1,000 allowOut and 1,000 denyOut entries each) need more than one batch:
// written in one, 70 of them fail with ENOBUFS here (45 did in review 6's
// run), and every restart after that failed too.
func TestRestartWithManySandboxes(t *testing.T) {
	cidrs := func(first, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%d.%d.%d.0/24", first, i/256, i%256)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		n    int
		p    func(t *testing.T) *policy.Egress
	}{
		// Rules of every kind, for messages of every kind.
		{"small policies", 60, func(t *testing.T) *policy.Egress {
			return mustPolicy(t, true, []string{"203.0.113.10", "allowed.test"}, []string{"198.51.100.0/24"})
		}},
		{"policies at the API's bounds", 70, func(t *testing.T) *policy.Egress {
			return mustPolicy(t, true, cidrs(20, 1000), cidrs(40, 1000))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			var live []Live
			for i := range tc.n {
				id := fmt.Sprintf("imany%d", i)
				p := tc.p(t)
				w.sandbox(id, p)
				live = append(live, Live{ID: id, Policy: p})
			}
			var err error
			var rules int
			inNS(t, w.host, func() {
				w.m.Close()
				var m2 *Manager
				if m2, err = New(Options{}); err != nil {
					return
				}
				w.m = m2
				if err = m2.Start(context.Background(), live); err != nil {
					return
				}
				// The last sandbox (in the last batch) has all its rules.
				c, cerr := m2.nft()
				if cerr != nil {
					err = cerr
					return
				}
				tbl := &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}
				got, gerr := c.GetRules(tbl, &nftables.Chain{Name: chainName(live[len(live)-1].ID), Table: tbl})
				rules, err = len(got), gerr
			})
			if err != nil {
				t.Fatalf("restart with %d sandboxes: %v", tc.n, err)
			}
			if want := len(live[0].Policy.Allow) + len(live[0].Policy.Deny); rules < want {
				t.Errorf("the last sandbox's chain has %d rules, want at least %d", rules, want)
			}
			if n := len(w.m.nets); n != tc.n {
				t.Errorf("%d sandboxes have a network after the restart, want %d", n, tc.n)
			}
		})
	}
}

// TestLimits: a sandbox's concurrent connections are capped in the kernel,
// and both ends of its link carry a bandwidth cap it cannot lift.
func TestLimits(t *testing.T) {
	const rate = 8_000_000 // bits/s
	w := newWorldWith(t, Options{MaxConns: 3, RateBits: rate})
	pid, _ := w.sandbox("ilimits", mustPolicy(t, true, nil, nil))
	var open []net.Conn
	for i := 0; i < 3; i++ {
		g, c := w.dial(pid, "203.0.113.10:8080")
		if g == "" {
			t.Fatalf("connection %d under the cap refused", i+1)
		}
		open = append(open, c)
	}
	if !w.refused(pid, "198.51.100.7:8080") {
		t.Error("a fourth connection passed a cap of 3")
	}
	for _, c := range open {
		c.Close()
	}

	ns, err := netns.GetFromPid(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	check := func(where string, h *netlink.Handle, link string) {
		l, err := h.LinkByName(link)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		qs, err := h.QdiscList(l)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if tbf, ok := q.(*netlink.Tbf); ok && tbf.Rate == rate/8 {
				return
			}
		}
		t.Errorf("%s: no tbf qdisc of %d bytes/s on %s: %v", where, rate/8, link, qs)
	}
	inNS(t, w.host, func() {
		w.m.mu.Lock()
		link := w.m.nets["ilimits"].link
		w.m.mu.Unlock()
		h, err := netlink.NewHandle()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		check("host end (the sandbox's download)", h, link)
	})
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	check("sandbox end (its upload)", h, "eth0")
}

// TestIsHostAddr: the egress proxy's check for the host's own addresses.
func TestIsHostAddr(t *testing.T) {
	w := newWorld(t)
	pid, addr := w.sandbox("ihostaddr", mustPolicy(t, true, nil, nil))
	_ = pid
	inNS(t, w.host, func() {
		for a, want := range map[string]bool{
			"203.0.113.254":       true, // the host's address on its uplink
			addr.Gateway.String(): true, // its end of a sandbox link
			"127.0.0.1":           true,
			"0.0.0.0":             true,
			"203.0.113.10":        false, // out there
			"198.51.100.7":        false,
			addr.Sandbox.String(): false, // the sandbox's end
		} {
			if got := IsHostAddr(netip.MustParseAddr(a)); got != want {
				t.Errorf("IsHostAddr(%s) = %v, want %v", a, got, want)
			}
		}
	})
}

// dnsFlows sends one UDP query to server:53 from each of n sockets of its
// own (n flows) in the sandbox of pid, and returns how many were answered.
func (w *world) dnsFlows(pid int, server string, n int) int {
	w.t.Helper()
	answered := 0
	w.inSandbox(pid, func() {
		var conns []net.Conn
		for i := 0; i < n; i++ {
			c, err := net.Dial("udp", net.JoinHostPort(server, "53"))
			if err != nil {
				w.t.Error(err)
				return
			}
			defer c.Close()
			c.Write([]byte("q"))
			conns = append(conns, c)
		}
		buf := make([]byte, 100)
		deadline := time.Now().Add(500 * time.Millisecond)
		for _, c := range conns {
			c.SetReadDeadline(deadline)
			if _, err := c.Read(buf); err == nil {
				answered++
			}
		}
	})
	return answered
}

// TestCapCountsEveryFlow: the cap counts every flow from a sandbox's link,
// forwarded or redirected to the host's resolver, with internet and
// without, and each sandbox's count is its own.
func TestCapCountsEveryFlow(t *testing.T) {
	const limit = 3
	w := newWorldWith(t, Options{MaxConns: limit})
	open, _ := w.sandbox("icapopen", mustPolicy(t, true, nil, nil))
	none, _ := w.sandbox("icapnone", mustPolicy(t, false, nil, nil))
	neighbour, _ := w.sandbox("icapneighbour", mustPolicy(t, true, nil, nil))

	// DNS flows (to any address, redirected to the resolver) take the
	// whole cap; the rest are dropped, other connections too.
	if got := w.dnsFlows(open, "198.51.100.53", 10); got != limit {
		t.Errorf("sandbox with internet: %d of 10 DNS flows answered, want the cap, %d", got, limit)
	}
	if !w.refused(open, "203.0.113.10:8080") {
		t.Error("a connection passed a cap the sandbox's DNS flows had taken")
	}
	if got := w.dnsFlows(none, "198.51.100.53", 10); got != limit {
		t.Errorf("sandbox without internet: %d of 10 DNS flows answered, want the cap, %d", got, limit)
	}
	// A neighbour's cap is its own.
	if got := w.dnsFlows(neighbour, "198.51.100.53", 2); got != 2 {
		t.Errorf("a neighbour: %d of 2 DNS flows answered", got)
	}
	if !w.reaches(neighbour, "203.0.113.10:8080") {
		t.Error("a neighbour could not connect")
	}
}

// TestCapCountsClosedFlows: a sandbox that opens and closes connections
// as fast as it can holds no more conntrack entries than its cap, the
// closed ones included (ct count does not count them: they leave the
// table as they close), however its connections end. Before, each stayed
// for 120 s (TIME_WAIT) or 10 s (CLOSE): thousands against a cap of 20.
func TestCapCountsClosedFlows(t *testing.T) {
	const (
		limit = 20
		// slack: flows being set up when the count is read.
		slack = 4
		churn = 2 * time.Second
	)
	tests := []struct {
		name string
		end  func(c *net.TCPConn)
	}{
		{"closed after the greeting (TIME_WAIT)", func(c *net.TCPConn) {
			c.SetReadDeadline(time.Now().Add(time.Second))
			c.Read(make([]byte, 100))
			c.Close()
		}},
		{"closed at once, the greeting unread (CLOSE)", func(c *net.TCPConn) { c.Close() }},
		{"reset (CLOSE)", func(c *net.TCPConn) { c.SetLinger(0); c.Close() }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A world each: the host's count is then the sandbox's.
			w := newWorldWith(t, Options{MaxConns: limit})
			pid, _ := w.sandbox(fmt.Sprintf("ichurn%d", i), mustPolicy(t, true, nil, nil))
			ns, err := netns.GetFromPid(pid)
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Close()
			var cycles atomic.Int64
			end := time.Now().Add(churn)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					inNS(t, ns, func() {
						for time.Now().Before(end) {
							c, err := net.DialTimeout("tcp", "203.0.113.10:8080", 100*time.Millisecond)
							if err != nil {
								continue // past the cap
							}
							tt.end(c.(*net.TCPConn))
							cycles.Add(1)
						}
					})
				})
			}
			held := 0
			inNS(t, w.host, func() {
				for time.Now().Before(end) {
					b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
					if err != nil {
						t.Error(err)
						return
					}
					n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
					held = max(held, n)
					time.Sleep(5 * time.Millisecond)
				}
			})
			wg.Wait()
			t.Logf("%d connections opened and closed in %v; at most %d entries in the table (cap %d)", cycles.Load(), churn, held, limit)
			if held > limit+slack {
				t.Errorf("the sandbox held %d entries, over its cap of %d", held, limit)
			}
			if cycles.Load() < 10*limit {
				t.Errorf("only %d connections: the churn did not happen", cycles.Load())
			}
		})
	}
}

// TestCapRules: every sandbox with a link, with internet or without, has a
// cap chain (ct state new, ct count over the cap: drop) the caps map leads
// to; a policy update keeps it, a detach removes it.
func TestCapRules(t *testing.T) {
	const limit = 7
	w := newWorldWith(t, Options{MaxConns: limit})
	w.sandbox("irulesopen", mustPolicy(t, true, nil, nil))
	w.sandbox("irulesnone", mustPolicy(t, false, nil, nil))
	w.sandbox("irulesdomains", mustPolicy(t, true, []string{"allowed.test"}, []string{"0.0.0.0/0"}))
	ids := []string{"irulesopen", "irulesnone", "irulesdomains"}

	check := func(when string, want []string) {
		t.Helper()
		inNS(t, w.host, func() {
			c, err := nftables.New()
			if err != nil {
				t.Fatal(err)
			}
			tb := w.m.existing()
			els, err := c.GetSetElements(tb.caps)
			if err != nil {
				t.Fatal(err)
			}
			// google/nftables does not decode verdicts: Val holds the
			// verdict's attributes, the chain's name among them.
			jumps := map[string]bool{}
			for _, el := range els {
				for _, id := range ids {
					if bytes.Contains(el.Val, []byte(capChainName(id)+"\x00")) {
						jumps[capChainName(id)] = true
					}
				}
			}
			if len(els) != len(want) {
				t.Errorf("%s: %d elements in the caps map, want %d", when, len(els), len(want))
			}
			for _, id := range ids {
				wanted := slices.Contains(want, id)
				if jumps[capChainName(id)] != wanted {
					t.Errorf("%s: caps map leads to %s: %v, want %v", when, capChainName(id), jumps[capChainName(id)], wanted)
				}
				_, err := c.ListChain(tb.t, capChainName(id))
				if !wanted {
					if err == nil {
						t.Errorf("%s: chain %s is left", when, capChainName(id))
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: chain %s: %v", when, capChainName(id), err)
					continue
				}
				rules, err := c.GetRules(tb.t, &nftables.Chain{Name: capChainName(id), Table: tb.t})
				if err != nil {
					t.Fatal(err)
				}
				var capped bool
				for _, r := range rules {
					for _, e := range r.Exprs {
						if cl, ok := e.(*expr.Connlimit); ok && cl.Count == limit && cl.Flags == expr.NFT_CONNLIMIT_F_INV {
							capped = true
						}
					}
				}
				if !capped {
					t.Errorf("%s: chain %s has no ct count over %d", when, capChainName(id), limit)
				}
			}
		})
	}
	check("attached", ids)
	inNS(t, w.host, func() {
		if err := w.m.Update(context.Background(), "irulesopen", mustPolicy(t, false, nil, nil)); err != nil {
			t.Fatal(err)
		}
	})
	check("after an update", ids)
	inNS(t, w.host, func() {
		for _, id := range ids[1:] {
			if err := w.m.Detach(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
	})
	check("after detaching two", ids[:1])
}

// TestSpoofedSourcesDropped: only packets from a sandbox's own address
// pass, so none leaves unmasqueraded, reaches the host's services as
// another sandbox, or escapes the sandbox's count. Sandboxes cannot spoof
// today (they lack the capabilities); the test's sender, real root in the
// sandbox's network namespace, can, with IP_TRANSPARENT.
func TestSpoofedSourcesDropped(t *testing.T) {
	w := newWorld(t)
	pid, addr := w.sandbox("ispoof", mustPolicy(t, true, nil, nil))
	_, other := w.sandbox("ispoofother", mustPolicy(t, true, nil, nil))
	// A UDP server on the internet that records who sent what.
	got := make(chan string, 64)
	inNS(t, w.internet, func() {
		pc, err := net.ListenPacket("udp4", "203.0.113.10:9999")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 512)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				got <- string(buf[:n]) + " from " + from.(*net.UDPAddr).IP.String()
			}
		}()
	})
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	// send sends msg from src (any address, through IP_TRANSPARENT) to dst.
	send := func(src, dst, msg string) {
		inNS(t, ns, func() {
			lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1) })
				return serr
			}}
			pc, err := lc.ListenPacket(context.Background(), "udp4", net.JoinHostPort(src, "0"))
			if err != nil {
				t.Errorf("bind %s: %v", src, err)
				return
			}
			defer pc.Close()
			d, _ := net.ResolveUDPAddr("udp4", dst)
			if _, err := pc.WriteTo([]byte(msg), d); err != nil {
				t.Errorf("send from %s: %v", src, err)
			}
		})
	}
	for _, src := range []string{"203.0.113.77", other.Sandbox.String(), "10.200.255.1"} {
		send(src, "203.0.113.10:9999", "spoofed-"+src)
	}
	send(addr.Sandbox.String(), "203.0.113.10:9999", "genuine")
	// The genuine packet arrives (masqueraded); none of the others, before
	// or after it.
	timeout := time.After(2 * time.Second)
	var seen []string
wait:
	for {
		select {
		case m := <-got:
			seen = append(seen, m)
			if strings.HasPrefix(m, "genuine") {
				break wait
			}
		case <-timeout:
			break wait
		}
	}
	time.Sleep(200 * time.Millisecond)
	for len(got) > 0 {
		seen = append(seen, <-got)
	}
	if !slices.Contains(seen, "genuine from 203.0.113.254") {
		t.Errorf("the sandbox's own packet did not arrive masqueraded: %q", seen)
	}
	for _, m := range seen {
		if strings.HasPrefix(m, "spoofed") {
			t.Errorf("a spoofed packet left the host: %q", m)
		}
	}
}

// TestMarkedEgressFlowsLeaveTheTable: the egress proxy's connections to
// the internet are the host's own flows, which no sandbox's cap counts;
// marked with EgressMark, they leave the conntrack table within seconds of
// closing (conntrack's cleanup), instead of two minutes in TIME_WAIT.
func TestMarkedEgressFlowsLeaveTheTable(t *testing.T) {
	w := newWorld(t)
	churn := func(dst string, control func(string, string, syscall.RawConn) error) {
		inNS(t, w.host, func() {
			d := net.Dialer{Timeout: 10 * time.Second, Control: control}
			for range 200 {
				c, err := d.Dial("tcp", dst)
				if err != nil {
					t.Error(err)
					return
				}
				c.SetReadDeadline(time.Now().Add(time.Second))
				c.Read(make([]byte, 64)) // the greeting
				c.Close()
			}
		})
	}
	// Marked to one server; the control, unmarked, to another.
	churn("203.0.113.10:8080", MarkEgress)
	churn("198.51.100.7:8080", nil)
	entries := func() (marked, unmarked int) {
		inNS(t, w.host, func() {
			flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range flows {
				switch f.Forward.DstIP.String() {
				case "203.0.113.10":
					marked++
				case "198.51.100.7":
					unmarked++
				}
			}
		})
		return marked, unmarked
	}
	var marked, unmarked int
	// Within seconds as a rule; on a loaded machine one flow whose last
	// segment was late has shown up past 15 s (CI, twice): the bound
	// says "not TIME_WAIT's two minutes", with room for that.
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if marked, unmarked = entries(); marked == 0 {
			break
		}
	}
	t.Logf("entries left: %d marked, %d unmarked", marked, unmarked)
	if marked > 0 {
		t.Errorf("200 marked connections, closed, still hold %d entries", marked)
	}
	if unmarked < 150 {
		t.Errorf("200 unmarked connections hold only %d entries: the test proves nothing", unmarked)
	}
}
