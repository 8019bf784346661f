// Package network gives sandboxes their own network and enforces their
// egress policy in the kernel: a veth pair from each sandbox's network
// namespace to the host, numbered from a private range (a /31 per
// sandbox: the host's end, the sandbox's end), routed and masqueraded by
// the host, and an nftables table (see nft.go) that confines each sandbox
// to what its policy (internal/network/policy) allows. Domain rules are
// enforced by two services the caller runs with this package's Policy,
// Resolved and Answered: a DNS resolver (internal/network/resolver) every
// sandbox's DNS is redirected to, and a transparent proxy
// (internal/network/egress) for TCP 80/443 of sandboxes with domain rules.
//
// Everything is set up and torn down through netlink (vishvananda/netlink,
// google/nftables), never by running ip or nft. The kernel is the state:
// a sandbox's host link carries the sandbox's id as its alias, so a
// restarted server finds every link again, and a sandbox's links vanish
// with its network namespace when it dies.
package network

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	mnl "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/network/policy"
)

// Options configure a Manager.
type Options struct {
	// Prefix is the range sandbox links are numbered from, a /31 each;
	// default 10.200.0.0/16. It must be private (sandboxes never reach
	// private ranges, each other included).
	Prefix netip.Prefix
	// ResolverPort and ProxyPort are the host ports the resolver and the
	// egress proxy listen on (on every address; the firewall closes them to
	// all but sandboxes). Defaults 15353 and 15380.
	ResolverPort, ProxyPort uint16
	// MaxConns caps the flows (conntrack entries) each sandbox holds at
	// once, of every protocol and wherever they go, the host's resolver and
	// egress proxy included; new ones past it are dropped. 0 means 1024.
	MaxConns uint32
	// RateBits caps each sandbox's bandwidth in each direction, in bits per
	// second; 0 means 1 Gbit/s.
	RateBits uint64
	// OnUpdate is called with a sandbox's address after its policy changed
	// (the egress proxy re-judges its connections).
	OnUpdate func(sandbox netip.Addr)
	Logger   *slog.Logger
}

// Manager runs the networks of a host's sandboxes. Safe for concurrent use.
type Manager struct {
	prefix                  netip.Prefix
	resolverPort, proxyPort uint16
	maxConns                uint32
	maxResolved             int // addresses open by lookups, per sandbox
	rate                    uint64
	onUpdate                func(netip.Addr)
	logger                  *slog.Logger
	owner                   net.Listener // held while this manager owns the namespace's sandbox networks
	// ns is the network namespace the manager was made in, and h a netlink
	// handle bound to it: every host-side call goes there, from whatever
	// thread (goroutines move between threads; a namespace is a thread's).
	ns netns.NsHandle
	h  *netlink.Handle

	mu    sync.Mutex
	nets  map[string]*sandboxNet     // by sandbox id
	addrs map[netip.Addr]*sandboxNet // by the sandbox's own address
	slots map[int]bool
	// nextSlot is where the search for a free slot starts.
	nextSlot int
}

// sandboxNet is one sandbox's network.
type sandboxNet struct {
	id      string
	slot    int
	link    string     // host-side link name
	host    netip.Addr // host end: the sandbox's gateway and resolver
	addr    netip.Addr // sandbox end
	policy  *policy.Egress
	proxied bool // in the proxied set
	// resolved are the addresses names an allowOut domain rule allows
	// resolved to, as the res-<id> set holds them (guarded by the
	// manager's mu). resMu is held from a change of resolved to the end
	// of the batch that makes it in the kernel, so the batches of a
	// sandbox reach the kernel in the order of its changes.
	resolved *resolvedSet
	resMu    sync.Mutex
}

// New returns a manager for the calling thread's network namespace (the
// only one there: a second is refused); call Start before attaching
// sandboxes.
func New(opts Options) (*Manager, error) {
	if !opts.Prefix.IsValid() {
		opts.Prefix = netip.MustParsePrefix("10.200.0.0/16")
	}
	if !opts.Prefix.Addr().Is4() || opts.Prefix.Bits() > 30 || !opts.Prefix.Addr().IsPrivate() {
		return nil, fmt.Errorf("network prefix %s: want a private IPv4 range of /30 or more", opts.Prefix)
	}
	if opts.ResolverPort == 0 {
		opts.ResolverPort = 15353
	}
	if opts.ProxyPort == 0 {
		opts.ProxyPort = 15380
	}
	if opts.MaxConns == 0 {
		opts.MaxConns = 1024
	}
	if opts.RateBits == 0 {
		opts.RateBits = 1_000_000_000
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// One manager per network namespace: a second would rewrite the first's
	// firewall and take its links. An abstract unix socket is per network
	// namespace and goes with the process, also on kill -9.
	owner, err := net.Listen("unix", "@hutch-network")
	if err != nil {
		return nil, fmt.Errorf("another hutch serve manages sandbox networks in this network namespace (%w)", err)
	}
	ns, err := netns.Get()
	if err != nil {
		owner.Close()
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		owner.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return &Manager{ns: ns, h: h, owner: owner,
		prefix: opts.Prefix.Masked(), resolverPort: opts.ResolverPort, proxyPort: opts.ProxyPort,
		maxConns: opts.MaxConns, maxResolved: maxResolved, rate: opts.RateBits, onUpdate: opts.OnUpdate, logger: logger,
		nets: map[string]*sandboxNet{}, addrs: map[netip.Addr]*sandboxNet{}, slots: map[int]bool{},
	}, nil
}

// Live is a sandbox that runs, for Start: its id and policy.
type Live struct {
	ID     string
	Policy *policy.Egress
}

// Start enables IPv4 forwarding, finds the links of the sandboxes that run
// (after a restart), removes every other sandbox link, and writes the
// whole firewall for them in one atomic batch, replacing the one a
// previous server left (which kept confining sandboxes meanwhile).
func (m *Manager) Start(ctx context.Context, live []Live) error {
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable IPv4 forwarding: %w", err)
	}
	want := map[string]*policy.Egress{}
	for _, l := range live {
		want[l.ID] = l.Policy
	}
	links, err := m.h.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range links {
		attrs := l.Attrs()
		if !strings.HasPrefix(attrs.Name, linkPrefix) {
			continue
		}
		slot, err := strconv.ParseInt(strings.TrimPrefix(attrs.Name, linkPrefix), 16, 32)
		p, ok := want[attrs.Alias]
		if err != nil || !ok {
			m.logger.Info("removing the link of no running sandbox", "link", attrs.Name, "sandbox", attrs.Alias)
			m.h.LinkDel(l)
			continue
		}
		sb := m.newNet(attrs.Alias, int(slot), p)
		m.nets[sb.id] = sb
		m.addrs[sb.addr] = sb
		m.slots[sb.slot] = true
	}
	c, err := m.nft()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	nets := slices.SortedFunc(maps.Values(m.nets), func(a, b *sandboxNet) int { return cmp.Compare(a.id, b.id) })
	// One batch when it fits, so that the previous server's firewall is
	// replaced at once; past maxBatchRules the sandboxes follow in batches
	// of their own, since the kernel refuses a batch of ~100,000 rules
	// (ENOBUFS, EMSGSIZE: review 6 made a restart fail for good with rule
	// sets the API had accepted). Until its batch lands a sandbox's link
	// is cut off, not open: the base chains drop what no sandbox chain
	// takes.
	tb := m.replaceTable(c)
	var batch []*sandboxNet
	cost, first := 0, true
	for _, sb := range nets {
		n := batchCost(sb.policy)
		if cost > 0 && cost+n > maxBatchRules {
			if err := m.flushStart(c, tb, batch, first); err != nil {
				return err
			}
			batch, cost, first = nil, 0, false
		}
		if err := m.addSandbox(c, tb, sb, true); err != nil {
			return err
		}
		batch, cost = append(batch, sb), cost+n
	}
	return m.flushStart(c, tb, batch, first)
}

// maxBatchRules is about the most firewall rules Start writes in one
// netlink batch: well under what the kernel refuses, a few thousand
// sandboxes of usual policies.
const maxBatchRules = 20000

// batchCost is about the rules a sandbox of policy p adds to a batch:
// its chains' fixed ones and one per rule of its policy.
func batchCost(p *policy.Egress) int { return 16 + len(p.Allow) + len(p.Deny) }

// flushStart writes one of Start's batches, batch's sandboxes queued on c
// (with the table's replacement when first). When it fails, the batch's
// sandboxes are written one at a time and any whose own firewall cannot
// be written loses its link (it keeps running, with loopback only) and
// is logged: one sandbox's rules must not keep the server from starting
// for every other. Only a failure of the base table is Start's error.
// Its caller holds m.mu.
func (m *Manager) flushStart(c *nftables.Conn, tb *tables, batch []*sandboxNet, first bool) error {
	err := c.Flush()
	if err != nil && first {
		// The table alone, then each sandbox.
		*tb = *m.replaceTable(c)
		if err := c.Flush(); err != nil {
			return fmt.Errorf("write the firewall: %w", err)
		}
	}
	if err != nil {
		m.logger.Warn("writing the firewall of sandboxes in one batch failed; writing each alone", "sandboxes", len(batch), "err", err)
		ok := batch[:0:0]
		for _, sb := range batch {
			// A connection of its own: a sandbox that fails before its
			// flush must leave nothing queued for the next.
			one, err := m.nft()
			if err == nil {
				err = m.addSandbox(one, tb, sb, true)
			}
			if err == nil {
				err = one.Flush()
			}
			if err != nil {
				m.logger.Error("a sandbox's firewall could not be written: it loses its network", "sandbox", sb.id, "err", err)
				m.dropLocked(sb)
				continue
			}
			ok = append(ok, sb)
		}
		batch = ok
	}
	for _, sb := range batch {
		sb.proxied = sb.policy.Internet && sb.policy.HasDomains()
	}
	return nil
}

// replaceTable queues the deletion of the previous server's table and the
// base of a new one on c: flushed together, the replacement is atomic.
// Deleting a table that is not there fails the batch, so only when there
// is one.
func (m *Manager) replaceTable(c *nftables.Conn) *tables {
	if tbl, err := c.ListTableOfFamily(tableName, nftables.TableFamilyINet); err == nil && tbl != nil {
		c.DelTable(tbl)
	}
	return m.addBase(c)
}

// dropLocked removes a sandbox's link and forgets its network; m.mu is
// held.
func (m *Manager) dropLocked(sb *sandboxNet) {
	if l, err := m.h.LinkByName(sb.link); err == nil {
		m.h.LinkDel(l)
	}
	delete(m.nets, sb.id)
	delete(m.addrs, sb.addr)
	delete(m.slots, sb.slot)
}

// newNet numbers a sandbox's link from its slot.
func (m *Manager) newNet(id string, slot int, p *policy.Egress) *sandboxNet {
	base := m.prefix.Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	host := n + uint32(2*slot)
	ip := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return &sandboxNet{id: id, slot: slot, link: fmt.Sprintf("%s%x", linkPrefix, slot),
		host: ip(host), addr: ip(host + 1), policy: p, resolved: newResolvedSet(m.maxResolved)}
}

// Addr is a sandbox's place on the network.
type Addr struct {
	// Sandbox is the sandbox's own address; Gateway the host's end, which is
	// also its DNS server.
	Sandbox, Gateway netip.Addr
}

// Attach gives the sandbox whose init runs as pid (in its own network
// namespace) a link to the host and its policy. It undoes itself on error.
func (m *Manager) Attach(ctx context.Context, id string, pid int, p *policy.Egress) (_ Addr, retErr error) {
	m.mu.Lock()
	if _, ok := m.nets[id]; ok {
		m.mu.Unlock()
		return Addr{}, fmt.Errorf("sandbox %s already has a network", id)
	}
	// Next fit, not first fit: an address is reused as late as possible.
	slot := -1
	n := 1 << (32 - m.prefix.Bits() - 1)
	for i := 0; i < n; i++ {
		if c := (m.nextSlot + i) % n; !m.slots[c] {
			slot = c
			break
		}
	}
	if slot < 0 {
		m.mu.Unlock()
		return Addr{}, fmt.Errorf("no free address in %s", m.prefix)
	}
	m.slots[slot] = true
	m.nextSlot = slot + 1
	sb := m.newNet(id, slot, p)
	m.mu.Unlock()
	defer func() {
		if retErr != nil {
			if l, err := m.h.LinkByName(sb.link); err == nil {
				m.h.LinkDel(l)
			}
			m.mu.Lock()
			delete(m.slots, slot)
			m.mu.Unlock()
		}
	}()

	if err := m.plumb(sb, pid); err != nil {
		return Addr{}, err
	}
	c, err := m.nft()
	if err != nil {
		return Addr{}, fmt.Errorf("nftables: %w", err)
	}
	if err := m.addSandbox(c, m.existing(), sb, true); err != nil {
		return Addr{}, err
	}
	if err := c.Flush(); err != nil {
		return Addr{}, fmt.Errorf("firewall of sandbox %s: %w", id, err)
	}
	sb.proxied = p.Internet && p.HasDomains()
	m.mu.Lock()
	m.nets[id] = sb
	m.addrs[sb.addr] = sb
	m.mu.Unlock()
	return Addr{Sandbox: sb.addr, Gateway: sb.host}, nil
}

// plumb makes the veth pair: the host end named for the slot and aliased
// with the sandbox id, the other end "eth0" inside the sandbox's network
// namespace, addressed, up, with a default route to the host and a
// bandwidth cap on both ends.
func (m *Manager) plumb(sb *sandboxNet, pid int) error {
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: sb.link, Alias: sb.id, MTU: 1500, TxQLen: 1000},
		PeerName:  "eth0", PeerNamespace: netlink.NsPid(pid),
	}
	if err := m.h.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth for sandbox %s: %w", sb.id, err)
	}
	host, err := m.h.LinkByName(sb.link)
	if err != nil {
		return err
	}
	if err := m.h.LinkSetAlias(host, sb.id); err != nil {
		return fmt.Errorf("alias %s: %w", sb.link, err)
	}
	if err := m.h.AddrAdd(host, &netlink.Addr{IPNet: ipnet(sb.host, 31)}); err != nil {
		return fmt.Errorf("address of %s: %w", sb.link, err)
	}
	if err := m.h.LinkSetUp(host); err != nil {
		return err
	}
	if err := m.shape(*m.h, host); err != nil {
		return err
	}

	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("network namespace of sandbox %s: %w", sb.id, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in sandbox %s: %w", sb.id, err)
	}
	defer h.Close()
	peer, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0 of sandbox %s: %w", sb.id, err)
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: ipnet(sb.addr, 31)}); err != nil {
		return fmt.Errorf("address of sandbox %s: %w", sb.id, err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return err
	}
	if lo, err := h.LinkByName("lo"); err == nil {
		h.LinkSetUp(lo)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: sb.host.AsSlice()}); err != nil {
		return fmt.Errorf("default route of sandbox %s: %w", sb.id, err)
	}
	return m.shape(*h, peer)
}

// shape caps what a link sends (a token bucket): on the host end that is
// the sandbox's download, on its own end its upload. The sandbox cannot
// lift its cap: it has no CAP_NET_ADMIN.
func (m *Manager) shape(h netlink.Handle, l netlink.Link) error {
	bytesPerSec := m.rate / 8
	burst := uint32(max(bytesPerSec/250, 16<<10)) // ~4 ms at the rate
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: l.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       bytesPerSec,
		Limit:      uint32(min(bytesPerSec/10, 64<<20)), // ~100 ms of queue
		// The kernel takes the bucket as the time to send it, in ticks,
		// as tc computes it; a byte count here made it 8× too large.
		Buffer: netlink.Xmittime(bytesPerSec, burst),
	}
	if err := h.QdiscAdd(q); err != nil {
		return fmt.Errorf("bandwidth cap on %s: %w", l.Attrs().Name, err)
	}
	return nil
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// conntrackByID matches the flows listed, by their conntrack ids.
type conntrackByID struct{ ids []*netlink.ConntrackFlow }

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (f *conntrackByID) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	for _, g := range f.ids {
		if flow.Forward.SrcIP.Equal(g.Forward.SrcIP) && flow.Forward.DstIP.Equal(g.Forward.DstIP) &&
			flow.Forward.SrcPort == g.Forward.SrcPort && flow.Forward.DstPort == g.Forward.DstPort && flow.Forward.Protocol == g.Forward.Protocol {
			return true
		}
	}
	return false
}

// Update replaces a running sandbox's policy at once: the firewall in one
// batch, then every tracked connection the new policy denies is cut.
func (m *Manager) Update(ctx context.Context, id string, p *policy.Egress) error {
	m.mu.Lock()
	sb, ok := m.nets[id]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %s has no network: %w", id, ErrNoNetwork)
	}
	c, err := m.nft()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := m.rewrite(c, sb, p); err != nil {
		return fmt.Errorf("firewall of sandbox %s: %w", id, err)
	}
	m.mu.Lock()
	sb.proxied = p.Internet && p.HasDomains()
	m.mu.Unlock()
	if m.onUpdate != nil {
		m.onUpdate(sb.addr)
	}
	return m.cut(sb)
}

// rewrite replaces a sandbox's policy chain and resolved addresses in one
// batch, keeping the addresses names p still allows resolved to. On
// error, nothing changed.
func (m *Manager) rewrite(c *nftables.Conn, sb *sandboxNet, p *policy.Egress) error {
	sb.resMu.Lock()
	defer sb.resMu.Unlock()
	now := time.Now()
	m.mu.Lock()
	old, oldResolved := sb.policy, sb.resolved
	sb.policy = p
	sb.resolved = sb.resolved.kept(p, now)
	kept := sb.resolved.writes(now)
	m.mu.Unlock()
	tb := m.existing()
	err := m.addSandbox(c, tb, sb, false)
	if err == nil {
		// The set was emptied in the batch: what names still allowed
		// resolved to goes back in, in the same batch.
		err = writeResolved(c, tb, sb.id, kept, nil)
	}
	if err == nil {
		err = c.Flush()
	}
	if err != nil {
		m.mu.Lock()
		sb.policy, sb.resolved = old, oldResolved
		m.mu.Unlock()
	}
	return err
}

// Close gives up the namespace's sandbox networks (for another server);
// links and firewall stay, confining the sandboxes meanwhile.
func (m *Manager) Close() error {
	m.h.Close()
	m.ns.Close()
	if m.owner != nil {
		return m.owner.Close()
	}
	return nil
}

// nftBuf bounds the size of a batch (sent in one message) and of the
// acknowledgements the kernel queues for it, all at once when the batch
// ends, about 1 KiB per message of the batch. The defaults (wmem_default
// and rmem_default, 208 KiB) made Start fail with ENOBUFS with ten running
// sandboxes (~25 messages each), and with EMSGSIZE with about forty. A
// bound, not an allocation.
const nftBuf = 64 << 20

// nft returns an nftables connection in the manager's namespace.
func (m *Manager) nft() (*nftables.Conn, error) {
	return nftables.New(nftables.WithNetNSFd(int(m.ns)), nftables.WithSockOptions(func(c *mnl.Conn) error {
		raw, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Control(func(fd uintptr) {
			// FORCE: past rmem_max and wmem_max (needs CAP_NET_ADMIN, as
			// nftables does).
			serr = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, nftBuf),
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, nftBuf))
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("netlink buffers: %w", serr)
		}
		return nil
	}))
}

// Ports are the host ports of the sandboxes' services.
type Ports struct{ Resolver, Proxy uint16 }

// Ports returns where the resolver and the egress proxy must listen.
func (m *Manager) Ports() Ports { return Ports{Resolver: m.resolverPort, Proxy: m.proxyPort} }

// ErrNoNetwork is returned for sandboxes without a network (no internet).
var ErrNoNetwork = errors.New("sandbox has no network")

// cut deletes the conntrack entries of a sandbox's connections its policy
// now denies; their next packet is judged as new, and dropped.
func (m *Manager) cut(sb *sandboxNet) error {
	flows, err := m.h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	filter := &conntrackByID{}
	for _, f := range flows {
		src, ok1 := netip.AddrFromSlice(f.Forward.SrcIP)
		dst, ok2 := netip.AddrFromSlice(f.Forward.DstIP)
		if !ok1 || !ok2 || src.Unmap() != sb.addr {
			continue
		}
		dst = dst.Unmap()
		// Flows redirected to the resolver or the egress proxy answer from
		// the host's end: the proxy re-judges its own connections.
		if rsrc, ok := netip.AddrFromSlice(f.Reverse.SrcIP); dst == sb.host || (ok && rsrc.Unmap() == sb.host) {
			continue
		}
		m.mu.Lock()
		allowed := sb.policy.Addr(dst, sb.resolvedLocked(dst, time.Now())) == policy.Allow
		m.mu.Unlock()
		if !allowed {
			filter.ids = append(filter.ids, f)
		}
	}
	if len(filter.ids) == 0 {
		return nil
	}
	if _, err := m.h.ConntrackDeleteFilters(netlink.ConntrackTable, netlink.FAMILY_V4, filter); err != nil {
		return fmt.Errorf("cut connections of sandbox %s: %w", sb.id, err)
	}
	return nil
}

// forget deletes every conntrack entry to or from a, in one dump of the
// table (a dump per filter cost 126 ms per removal on a host tracking
// 10000 flows).
func (m *Manager) forget(a netip.Addr) error {
	var filters []netlink.CustomConntrackFilter
	for _, t := range []netlink.ConntrackFilterType{netlink.ConntrackOrigSrcIP, netlink.ConntrackReplyDstIP, netlink.ConntrackOrigDstIP} {
		f := &netlink.ConntrackFilter{}
		if err := f.AddIP(t, a.AsSlice()); err != nil {
			return err
		}
		filters = append(filters, f)
	}
	_, err := m.h.ConntrackDeleteFilters(netlink.ConntrackTable, netlink.FAMILY_V4, filters...)
	return err
}

// Detach removes a sandbox's firewall entries and link (the link also goes
// by itself when the sandbox's namespace dies). Detaching a sandbox without
// a network does nothing.
func (m *Manager) Detach(ctx context.Context, id string) error {
	m.mu.Lock()
	sb, ok := m.nets[id]
	if ok {
		delete(m.nets, id)
		delete(m.addrs, sb.addr)
	}
	m.mu.Unlock()
	if !ok {
		return nil
	}
	c, err := m.nft()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	delSandbox(c, m.existing(), sb)
	ferr := c.Flush()
	// Nothing of the sandbox may outlive it: its tracked connections (a
	// peer still sending would otherwise reach the next sandbox at this
	// address as "established") and the egress proxy's.
	if err := m.forget(sb.addr); err != nil {
		m.logger.Warn("conntrack of a removed sandbox", "sandbox", id, "err", err)
	}
	if m.onUpdate != nil {
		m.onUpdate(sb.addr)
	}
	// Deleting a veth waits for the kernel to unregister it (~20 ms): not
	// on the caller's time. The slot is free again only once the link is
	// gone, so a new sandbox never meets its name.
	go func() {
		if l, err := m.h.LinkByName(sb.link); err == nil {
			m.h.LinkDel(l)
		}
		m.mu.Lock()
		delete(m.slots, sb.slot)
		m.mu.Unlock()
	}()
	if ferr != nil {
		return fmt.Errorf("firewall of sandbox %s: %w", id, ferr)
	}
	return nil
}

// Policy returns the policy of the sandbox at a source address (for the
// resolver and the proxy).
func (m *Manager) Policy(client netip.Addr) (*policy.Egress, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, ok := m.addrs[client.Unmap()]
	if !ok {
		return nil, false
	}
	return sb.policy, true
}

// Resolved reports whether dst answered one of the client's lookups of an
// allowed name, and is still within the answer's TTL.
func (m *Manager) Resolved(client, dst netip.Addr) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, ok := m.addrs[client.Unmap()]
	if !ok {
		return false
	}
	return sb.resolvedLocked(dst.Unmap(), time.Now())
}

// resolvedLocked reports whether an allowed name's valid answer holds a.
func (sb *sandboxNet) resolvedLocked(a netip.Addr, now time.Time) bool {
	return sb.resolved.has(a, now)
}

// Answered records the addresses a name resolved to for a sandbox and,
// when an allowOut domain rule allows the name, opens the firewall to them
// for ttl. The resolver calls it before it answers, so the sandbox's first
// packet already passes. Answers for names no rule mentions open nothing:
// the address rules judge those addresses (a lookup must never open what
// denyOut denies).
//
// A sandbox has at most maxResolved addresses open so; past that, the new
// answer's addresses take the places of those added longest ago, which
// are closed (see maxResolved).
func (m *Manager) Answered(client netip.Addr, name string, addrs []netip.Addr, ttl time.Duration) {
	m.mu.Lock()
	sb, ok := m.addrs[client.Unmap()]
	m.mu.Unlock()
	if !ok {
		return
	}
	var v4 []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			v4 = append(v4, a)
		}
	}
	if len(v4) == 0 {
		return
	}
	sb.resMu.Lock()
	defer sb.resMu.Unlock()
	m.mu.Lock()
	if m.addrs[sb.addr] != sb || sb.policy.Name(name) != policy.Allow {
		m.mu.Unlock() // detached meanwhile, or not a name a rule allows
		return
	}
	now := time.Now()
	writes, evicted := sb.resolved.add(name, v4, now.Add(ttl), now)
	m.mu.Unlock()
	c, err := m.nft()
	if err == nil {
		if err = writeResolved(c, m.existing(), sb.id, writes, evicted); err == nil {
			err = c.Flush()
		}
	}
	if err != nil {
		m.logger.Warn("open the firewall to resolved addresses", "sandbox", sb.id, "name", name, "err", err)
		m.resyncResolved(sb)
	}
}

// resyncResolved writes a sandbox's res-<id> set afresh from what the
// manager holds, after a batch that changed it failed: the kernel then
// holds nothing the manager does not count. Called with sb.resMu held.
func (m *Manager) resyncResolved(sb *sandboxNet) {
	m.mu.Lock()
	attached := m.addrs[sb.addr] == sb
	writes := sb.resolved.writes(time.Now())
	m.mu.Unlock()
	if !attached {
		return
	}
	c, err := m.nft()
	if err == nil {
		tb := m.existing()
		c.FlushSet(&nftables.Set{Table: tb.t, Name: resolvedName(sb.id)})
		if err = writeResolved(c, tb, sb.id, writes, nil); err == nil {
			err = c.Flush()
		}
	}
	if err != nil {
		m.logger.Warn("rewrite the resolved addresses", "sandbox", sb.id, "err", err)
	}
}

// IsHostAddr reports whether a is one of the host's own addresses (in the
// calling thread's network namespace). The egress proxy dials from the
// host, past the sandboxes' forward chain: it must refuse these itself.
// It asks the kernel's routing ("ip route get"): a local route means the
// host's own address, at a cost that does not grow with the number of
// addresses (listing them did: 0.37 ms per connection with 200 sandboxes).
func IsHostAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsUnspecified() {
		return true
	}
	routes, err := netlink.RouteGet(a.AsSlice())
	if err != nil || len(routes) == 0 {
		return true // unknown: refuse
	}
	return routes[0].Type == unix.RTN_LOCAL
}

// DialEgress is the egress proxy's dialer: it connects from the host,
// where the sandboxes' forward chain does not apply, so it refuses the
// host's own addresses itself (the policy refuses every other range no
// sandbox may reach), and marks its sockets (MarkEgress) for the
// sandboxes' connection timeouts. Its address check lists the host's
// addresses through netlink on every connection.
func DialEgress(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	if IsHostAddr(ap.Addr()) {
		return nil, fmt.Errorf("egress proxy: %s is the host's own address", ap.Addr())
	}
	d := net.Dialer{Timeout: 10 * time.Second, Control: MarkEgress}
	return d.DialContext(ctx, network, addr)
}
