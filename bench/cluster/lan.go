package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// lanPrefix is the network the LAN's hosts are numbered in: host i is
// lanPrefix+<i>/24, and the switch's own address is lanPrefix+"254". It
// exists only in the namespaces the LAN is made of.
const lanPrefix = "10.98.0."

// switchIP is the address of the bridge in the switch namespace: where
// the harness's client sends its requests from.
const switchIP = lanPrefix + "254"

// lan is a small network of hosts on one machine, each a network
// namespace of its own, for the cluster's nodes: a bridge in a "switch"
// namespace and a veth pair from it to each host. The harness itself runs
// in the switch namespace (bench/cluster.sh gives it one of its own), so
// its client reaches every host with ordinary dials: no thread changes
// namespace per connection, nothing of that in the timings.
type lan struct {
	hosts []*host
	sw    netns.NsHandle
	h     *netlink.Handle // bound to sw
	br    netlink.Link
}

// host is one host of a lan: a network namespace with its loopback up
// and eth0 addressed lanPrefix+<idx>/24.
type host struct {
	idx  int
	ip   string
	ns   netns.NsHandle
	port string // the switch side of the host's veth pair
}

// newLAN makes a bridge (named bridge) in the switch namespace sw, with
// switchIP when addr is set, and n hosts on it (at most 250). The caller
// keeps sw; close removes what newLAN made.
func newLAN(sw netns.NsHandle, bridge string, n int, addr bool) (_ *lan, retErr error) {
	if n < 1 || n > 250 {
		return nil, fmt.Errorf("a LAN of %d hosts: want 1 to 250", n)
	}
	h, err := netlink.NewHandleAt(sw)
	if err != nil {
		return nil, fmt.Errorf("netlink in the switch namespace: %w", err)
	}
	l := &lan{sw: sw, h: h}
	defer func() {
		if retErr != nil {
			l.close()
		}
	}()
	if err := upLoopback(h); err != nil {
		return nil, fmt.Errorf("the switch's loopback: %w", err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: bridge}}
	if err := h.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("bridge %s: %w", bridge, err)
	}
	l.br = br
	if addr {
		a, err := netlink.ParseAddr(switchIP + "/24")
		if err != nil {
			return nil, err
		}
		if err := h.AddrAdd(br, a); err != nil {
			return nil, fmt.Errorf("bridge address: %w", err)
		}
	}
	if err := h.LinkSetUp(br); err != nil {
		return nil, fmt.Errorf("bridge up: %w", err)
	}
	for i := 1; i <= n; i++ {
		hs := &host{idx: i, ip: fmt.Sprintf("%s%d", lanPrefix, i), ns: netns.None(), port: fmt.Sprintf("%sp%d", bridge, i)}
		l.hosts = append(l.hosts, hs)
		if err := l.join(hs); err != nil {
			return nil, fmt.Errorf("host %d: %w", i, err)
		}
	}
	return l, nil
}

// join makes host's namespace and its veth pair, the switch side on the
// bridge and eth0, addressed and up, in the host.
func (l *lan) join(hs *host) error {
	ns, err := newNetNS()
	if err != nil {
		return err
	}
	hs.ns = ns
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hs.port, MasterIndex: l.br.Attrs().Index},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	if err := l.h.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth pair: %w", err)
	}
	if err := l.h.LinkSetUp(veth); err != nil {
		return fmt.Errorf("switch port up: %w", err)
	}
	hh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in the host: %w", err)
	}
	defer hh.Close()
	if err := upLoopback(hh); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	eth, err := hh.LinkByName("eth0")
	if err != nil {
		return err
	}
	a, err := netlink.ParseAddr(hs.ip + "/24")
	if err != nil {
		return err
	}
	if err := hh.AddrAdd(eth, a); err != nil {
		return fmt.Errorf("address %s: %w", a, err)
	}
	if err := hh.LinkSetUp(eth); err != nil {
		return fmt.Errorf("eth0 up: %w", err)
	}
	return nil
}

// close removes the switch ports (each takes its host's eth0 with it)
// and the bridge, and closes the hosts' namespaces: the kernel frees
// each once no process runs in it.
func (l *lan) close() error {
	var errs []error
	for _, hs := range l.hosts {
		if p, err := l.h.LinkByName(hs.port); err == nil {
			if err := l.h.LinkDel(p); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", hs.port, err))
			}
		}
		if hs.ns.IsOpen() {
			hs.ns.Close()
		}
	}
	if l.br != nil {
		if err := l.h.LinkDel(l.br); err != nil {
			errs = append(errs, fmt.Errorf("remove bridge: %w", err))
		}
	}
	l.h.Close()
	return errors.Join(errs...)
}

// path names the host's namespace for nsenter --net, while this process
// holds it open.
func (hs *host) path() string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(hs.ns)) }

// wrap is the argv prefix that runs a command in the host's namespace.
// nsenter execs the command in place: its pid is the command's.
func (hs *host) wrap() []string { return []string{"nsenter", "--net=" + hs.path(), "--"} }

// addr is host:port of the host's address.
func (hs *host) addr(port int) string { return net.JoinHostPort(hs.ip, fmt.Sprint(port)) }

// newNetNS makes a network namespace and returns a handle to it. The
// thread that made it is left in it and ends with its goroutine (locked,
// never unlocked), so that no goroutine of this process runs in it after.
func newNetNS() (netns.NsHandle, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	c := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.New()
		c <- result{h, err}
	}()
	r := <-c
	if r.err != nil {
		return netns.None(), fmt.Errorf("new network namespace: %w", r.err)
	}
	return r.h, nil
}

// doInNetNS runs f on a thread in namespace ns; the thread ends with it.
func doInNetNS(ns netns.NsHandle, f func() error) error {
	c := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			c <- fmt.Errorf("setns: %w", err)
			return
		}
		c <- f()
	}()
	return <-c
}

func upLoopback(h *netlink.Handle) error {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	return h.LinkSetUp(lo)
}

// portNames are the names of the links on the bridge, sorted.
func (l *lan) portNames() []string {
	links, err := l.h.LinkList()
	if err != nil {
		return nil
	}
	var names []string
	for _, k := range links {
		if k.Attrs().MasterIndex == l.br.Attrs().Index {
			names = append(names, k.Attrs().Name)
		}
	}
	slices.Sort(names)
	return names
}
