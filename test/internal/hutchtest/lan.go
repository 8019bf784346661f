package hutchtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// LANPrefix is the network a LAN's hosts are numbered in: host i is
// 10.99.0.<i>/24. It lives only inside the namespaces NewLAN makes; the
// test's own namespace gets no address or route to it.
const LANPrefix = "10.99.0."

// LAN is a small network of hosts, each a network namespace of its own,
// for a cluster's nodes and the services they use: a "switch" namespace
// holding a bridge, and one veth pair from it to each host. A host can be
// cut off the switch (Partition) and joined again (Heal). NewLAN makes
// one; everything is torn down when the test ends.
type LAN struct {
	// Hosts are the hosts, Hosts[i-1] being host i.
	Hosts []*Host

	sw *NetNS
	h  *netlink.Handle // bound to sw
}

// Host is one host of a LAN: a network namespace with its loopback up and
// an interface eth0 on the LAN, addressed LANPrefix+<Index>/24. Its
// NetNS runs commands there (Command, Wrap) and dials from there
// (DialContext).
type Host struct {
	*NetNS
	// Index is the host's number on its LAN, from 1.
	Index int
	// IP is the host's address, LANPrefix+<Index>.
	IP string

	lan  *LAN
	port string // the switch side of the host's veth pair
}

// NewLAN makes a LAN of n hosts (n at most 250). It needs root.
func NewLAN(t testing.TB, n int) *LAN {
	t.Helper()
	if n < 1 || n > 250 {
		t.Fatalf("NewLAN: %d hosts: want 1 to 250", n)
	}
	lan := &LAN{sw: NewNetNS(t)}
	h, err := netlink.NewHandleAt(lan.sw.h)
	if err != nil {
		t.Fatalf("netlink in the switch namespace: %v", err)
	}
	t.Cleanup(h.Close)
	lan.h = h
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		t.Fatalf("bridge: %v", err)
	}
	if err := h.LinkSetUp(br); err != nil {
		t.Fatalf("bridge up: %v", err)
	}
	for i := 1; i <= n; i++ {
		host := &Host{NetNS: NewNetNS(t), Index: i, IP: fmt.Sprintf("%s%d", LANPrefix, i), lan: lan, port: fmt.Sprintf("h%d", i)}
		if err := lan.join(host, br); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		lan.Hosts = append(lan.Hosts, host)
	}
	return lan
}

// join makes host's veth pair, its switch side on the bridge and its
// other side, eth0, addressed and up in the host.
func (lan *LAN) join(host *Host, br netlink.Link) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: host.port, MasterIndex: br.Attrs().Index},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(host.h)),
	}
	if err := lan.h.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth pair: %w", err)
	}
	if err := lan.h.LinkSetUp(veth); err != nil {
		return fmt.Errorf("switch port up: %w", err)
	}
	hh, err := netlink.NewHandleAt(host.h)
	if err != nil {
		return fmt.Errorf("netlink in the host: %w", err)
	}
	defer hh.Close()
	eth, err := hh.LinkByName("eth0")
	if err != nil {
		return err
	}
	addr, err := netlink.ParseAddr(host.IP + "/24")
	if err != nil {
		return err
	}
	if err := hh.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := hh.LinkSetUp(eth); err != nil {
		return fmt.Errorf("eth0 up: %w", err)
	}
	return nil
}

// Host is host i (from 1).
func (lan *LAN) Host(i int) *Host { return lan.Hosts[i-1] }

// Partition cuts the host off the LAN: the switch side of its veth pair
// goes down, so nothing passes either way (the host keeps its address and
// can still reach itself).
func (h *Host) Partition() error {
	l, err := h.lan.h.LinkByName(h.port)
	if err != nil {
		return err
	}
	return h.lan.h.LinkSetDown(l)
}

// Heal joins a partitioned host to the LAN again.
func (h *Host) Heal() error {
	l, err := h.lan.h.LinkByName(h.port)
	if err != nil {
		return err
	}
	return h.lan.h.LinkSetUp(l)
}

// Addr is host:port of the host's address.
func (h *Host) Addr(port int) string { return net.JoinHostPort(h.IP, fmt.Sprint(port)) }

// Client is an HTTP client whose connections are dialled from the host:
// it reaches what the host reaches, partitioned or not.
func (h *Host) Client() *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return h.DialContext(ctx, network, addr)
		},
		// Every dial costs a thread (NetNS.Do): keep connections.
		MaxIdleConnsPerHost: 16,
	}}
}
