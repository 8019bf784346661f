package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/network"
	"github.com/hutch-sandbox/hutch/internal/network/egress"
	"github.com/hutch-sandbox/hutch/internal/network/policy"
)

// The bench's world, built out of network namespaces as
// internal/network's tests build theirs; no packet ever leaves it:
//
//	host      this process's own namespace (main re-executes the harness
//	          with CLONE_NEWNET, so every thread, and every goroutine's
//	          socket, is in it): the Manager, its nftables table, the
//	          egress proxy on the Manager's proxy port, 203.0.113.254/24
//	          on "inet0" with a default route to the internet.
//	internet  the other end of inet0: 203.0.113.1/24, and a server
//	          process at 203.0.113.10:80 and 203.0.113.11:80 (on its
//	          loopback) that the sandboxes reach through Hutch's NAT or
//	          its egress proxy.
//	sandboxes `sleep` processes in new network namespaces (or native
//	          runtime sandboxes), attached by the Manager.
//	direct    two namespaces joined by one plain veth pair: client
//	          192.0.2.1/24, server 192.0.2.2:80. No Hutch, no qdisc, no
//	          firewall: the floor.
//	routed    client 198.51.100.1/30 — router 198.51.100.2/30 and
//	          198.51.100.5/30 — server 198.51.100.6:80: the same number
//	          of veth hops and IP forwarding as Hutch's NAT path, without
//	          nftables, conntrack, NAT or tbf.
type world struct {
	host     netns.NsHandle
	internet netns.NsHandle

	// mgr is the Manager in use: the bench replaces it (same namespace)
	// to measure with another bandwidth cap. The proxy reads it here.
	mgr     atomic.Pointer[network.Manager]
	proxy   *egress.Proxy
	proxyLn net.Listener
	cancel  context.CancelFunc

	links *linkWatch

	// Other namespaces and servers made, for Close.
	closers []func()
}

// natServer and proxyServer are the bench server in the internet
// namespace, as the NAT and the proxied sandboxes reach it. Two
// addresses, one process: NAT'd connections (from the sandboxes' own TCP
// stacks, masqueraded) and the proxy's (from the host's stack) leave with
// the same source address but unrelated sequence numbers and timestamps.
// To one server address they would reuse each other's 4-tuples while the
// server still holds them in TIME_WAIT (it closes first), and a few
// percent of new connections would take ~10 ms more, measured in the
// proxy rows (see README.md). Each path its own server keeps the rows
// independent of each other.
var (
	natServer   = netip.MustParseAddrPort("203.0.113.10:80")
	proxyServer = netip.MustParseAddrPort("203.0.113.11:80")
)

// benchName is the name the proxied sandbox's policy allows and its
// requests carry in Host.
const benchName = "bench.test"

// inNS runs f on a thread in ns and waits for it. The thread is left in ns
// and ends with the goroutine (locked, never unlocked): it never goes back
// to the runtime's pool in the wrong namespace.
func inNS(ns netns.NsHandle, f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		f()
		errc <- nil
	}()
	return <-errc
}

// newNS makes a fresh network namespace with loopback up.
func newNS() (netns.NsHandle, error) {
	var ns netns.NsHandle
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends in ns
		if ns, err = netns.New(); err != nil {
			return
		}
		if lo, lerr := netlink.LinkByName("lo"); lerr == nil {
			err = netlink.LinkSetUp(lo)
		}
	}()
	<-done
	return ns, err
}

// vethPair joins namespace a (link nameA, address addrA) and namespace b
// (nameB, addrB) with a veth pair, both ends up, with the kernel's
// defaults (MTU 1500, no qdisc: noqueue). Addresses are prefixes
// ("192.0.2.1/24").
func vethPair(a netns.NsHandle, nameA, addrA string, b netns.NsHandle, nameB, addrB string) error {
	ha, err := netlink.NewHandleAt(a)
	if err != nil {
		return err
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(b)
	if err != nil {
		return err
	}
	defer hb.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: nameA}, PeerName: nameB, PeerNamespace: netlink.NsFd(b)}
	if err := ha.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s-%s: %w", nameA, nameB, err)
	}
	for _, end := range []struct {
		h          *netlink.Handle
		name, addr string
	}{{ha, nameA, addrA}, {hb, nameB, addrB}} {
		l, err := end.h.LinkByName(end.name)
		if err != nil {
			return err
		}
		p := netip.MustParsePrefix(end.addr)
		if err := end.h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}); err != nil {
			return fmt.Errorf("address of %s: %w", end.name, err)
		}
		if err := end.h.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

// defaultRoute gives ns a default route through gw.
func defaultRoute(ns netns.NsHandle, gw string) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return h.RouteAdd(&netlink.Route{Gw: net.ParseIP(gw)})
}

// serveIn starts a server process in ns listening on addrs; it stops
// with the world.
func (w *world) serveIn(ns netns.NsHandle, addrs ...string) error {
	s, err := startServer(ns, addrs...)
	if err != nil {
		return err
	}
	w.closers = append(w.closers, s.stop)
	return nil
}

// newWorld builds the host and the internet, the Manager (bandwidth cap
// rate, 0 for Hutch's default) and the egress proxy.
func newWorld(rate uint64) (*world, error) {
	w := &world{}
	var err error
	if w.host, err = netns.Get(); err != nil {
		return nil, err
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		netlink.LinkSetUp(lo)
	}
	if w.internet, err = newNS(); err != nil {
		return nil, fmt.Errorf("internet namespace: %w", err)
	}
	w.closers = append(w.closers, func() { w.internet.Close() })
	if err := vethPair(w.host, "inet0", "203.0.113.254/24", w.internet, "up0", "203.0.113.1/24"); err != nil {
		return nil, err
	}
	if err := defaultRoute(w.host, "203.0.113.1"); err != nil {
		return nil, fmt.Errorf("host's default route: %w", err)
	}
	hi, err := netlink.NewHandleAt(w.internet)
	if err != nil {
		return nil, err
	}
	lo, err := hi.LinkByName("lo")
	for _, a := range []netip.AddrPort{natServer, proxyServer} {
		if err == nil {
			err = hi.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(32, 32)}})
		}
	}
	hi.Close()
	if err != nil {
		return nil, fmt.Errorf("server address: %w", err)
	}
	if err := w.serveIn(w.internet, natServer.String(), proxyServer.String()); err != nil {
		return nil, err
	}
	if w.links, err = watchLinks(); err != nil {
		return nil, err
	}
	w.closers = append(w.closers, w.links.close)

	// The proxy as `hutch serve` makes it (cmd/hutch/netserve.go): policy
	// and DNS answers from the Manager, its dialer, Recheck on updates.
	w.proxy = egress.New(egress.Options{
		Policy:   func(a netip.Addr) (*policy.Egress, bool) { return w.mgr.Load().Policy(a) },
		Resolved: func(client, dst netip.Addr) bool { return w.mgr.Load().Resolved(client, dst) },
		Dial:     network.DialEgress,
	})
	if err := w.startManager(rate); err != nil {
		return nil, err
	}
	if w.proxyLn, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", w.mgr.Load().Ports().Proxy)); err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	var ctx context.Context
	ctx, w.cancel = context.WithCancel(context.Background())
	go w.proxy.Serve(ctx, w.proxyLn)
	return w, nil
}

// startManager replaces the Manager with a new one with bandwidth cap
// rate (bits/s per direction, 0: Hutch's default), as a restarted `hutch
// serve` with another setting would: Start removes the links of the
// sandboxes the old one had and rewrites the table.
func (w *world) startManager(rate uint64) error {
	if old := w.mgr.Load(); old != nil {
		old.Close()
	}
	m, err := network.New(network.Options{
		RateBits: rate,
		OnUpdate: func(sandbox netip.Addr) { w.proxy.Recheck(sandbox) },
	})
	if err != nil {
		return err
	}
	if err := m.Start(context.Background(), nil); err != nil {
		return fmt.Errorf("network manager: %w", err)
	}
	w.mgr.Store(m)
	return nil
}

// Close ends the servers, the proxy and the Manager; the namespaces go
// with the process.
func (w *world) Close() {
	if w.cancel != nil {
		w.cancel()
	}
	if m := w.mgr.Load(); m != nil {
		m.Close()
	}
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// standIn is a sandbox stand-in: `sleep` in a new network namespace, as
// internal/network's tests make them.
type standIn struct {
	id  string
	cmd *exec.Cmd
}

// startStandIn starts one; netNS false leaves it in the host's namespace
// (the reference row).
func startStandIn(id string, netNS bool) (*standIn, error) {
	cmd := exec.Command("sleep", "3600")
	if netNS {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &standIn{id: id, cmd: cmd}, nil
}

// pid is the stand-in's process, whose namespace Attach gets.
func (s *standIn) pid() int { return s.cmd.Process.Pid }

// stop kills and reaps it; its namespace, and whatever link is still in
// it, goes with it.
func (s *standIn) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// netNS opens the stand-in's network namespace.
func (s *standIn) netNS() (netns.NsHandle, error) { return netns.GetFromPid(s.pid()) }

// linkWatch reports when links of the host namespace are deleted
// (RTM_DELLINK), by name: Detach leaves the deletion of a sandbox's link
// to a goroutine of the Manager, so this is how the bench sees it end.
type linkWatch struct {
	done chan struct{}

	mu      sync.Mutex
	waiters map[string]chan time.Time
}

// watchLinks subscribes to the host namespace's link updates.
func watchLinks() (*linkWatch, error) {
	lw := &linkWatch{done: make(chan struct{}), waiters: map[string]chan time.Time{}}
	ch := make(chan netlink.LinkUpdate, 256)
	if err := netlink.LinkSubscribeWithOptions(ch, lw.done, netlink.LinkSubscribeOptions{
		// Every link added or changed is an event too: a large buffer, so
		// that a burst never overflows it (the subscription would end).
		ReceiveBufferSize: 8 << 20,
		ErrorCallback: func(err error) {
			select {
			case <-lw.done: // closing: the socket's end, not an error
			default:
				fmt.Fprintf(os.Stderr, "bench-network: link updates: %v (Detach's link deletion is no longer timed)\n", err)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("subscribe to link updates: %w", err)
	}
	go func() {
		for u := range ch {
			if u.Header.Type != unix.RTM_DELLINK {
				continue
			}
			now := time.Now()
			lw.mu.Lock()
			if c, ok := lw.waiters[u.Attrs().Name]; ok {
				c <- now // buffered, one per wait
				delete(lw.waiters, u.Attrs().Name)
			}
			lw.mu.Unlock()
		}
	}()
	return lw, nil
}

// expect returns a channel that gets the time the link name is deleted;
// call it before the deletion can start.
func (lw *linkWatch) expect(name string) <-chan time.Time {
	c := make(chan time.Time, 1)
	lw.mu.Lock()
	lw.waiters[name] = c
	lw.mu.Unlock()
	return c
}

// close ends the subscription.
func (lw *linkWatch) close() { close(lw.done) }

// hostLink returns the name of the host-side link of sandbox id: the
// Manager aliases it with the id.
func hostLink(id string) (string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return "", err
	}
	for _, l := range links {
		if l.Attrs().Alias == id {
			return l.Attrs().Name, nil
		}
	}
	return "", fmt.Errorf("no host link for sandbox %s", id)
}
