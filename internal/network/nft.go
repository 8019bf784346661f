package network

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/network/policy"
)

// The firewall is one nftables table, "inet hutch", written through netlink
// (google/nftables) in atomic batches:
//
//	chain conncap     (filter, prerouting hook, after conntrack and before
//	                  NAT): packets from sandbox links go to their
//	                  sandbox's cap chain through the "caps" verdict map,
//	                  so that every new flow of a sandbox is counted,
//	                  whether it is forwarded or redirected to the host;
//	                  new TCP flows get the timeouts of sandbox-tcp.
//	ct timeout sandbox-tcp  conntrack's timeouts for sandboxes' TCP
//	                  flows: none once closed (closedTimeout).
//	chain egressout   (filter, output hook, after conntrack): the egress
//	                  proxy's connections (socket mark EgressMark) get
//	                  sandbox-tcp's timeouts.
//	chain forward     (filter, forward hook): packets from sandbox links
//	                  go to their sandbox's chain through the "dispatch"
//	                  verdict map; nothing may start a connection into a
//	                  sandbox; IPv6 from sandboxes is dropped.
//	chain input       (filter, input hook): a sandbox reaches the host only
//	                  at the resolver's and the proxy's ports; those ports
//	                  are closed to everyone else.
//	chain prerouting  (nat): DNS from sandboxes goes to Hutch's resolver;
//	                  TCP 80/443 of sandboxes with domain rules ("proxied"
//	                  set) goes to the egress proxy.
//	chain postrouting (nat): sandboxes' traffic leaving the host is
//	                  masqueraded.
//	chain cap-<id>    one per sandbox: packets not from its own address are
//	                  dropped; then its cap on flows tracked at once (ct
//	                  count), whose count lives in its rule.
//	chain sbx-<id>    one per sandbox: its egress policy.
//	set res-<id>      one per sandbox: addresses its allowed names resolved
//	                  to, each for the answer's TTL; at most maxResolved
//	                  (resolved.go).
const tableName = "hutch"

// linkPrefix starts the name of every sandbox's host-side link.
const linkPrefix = "hv"

// Handwritten expressions: google/nftables is the netlink encoding only;
// these helpers are the few rule shapes Hutch uses.

// ifname pads an interface name as the kernel compares it; a name without
// the padding compares as a prefix ("hv" matches "hv*").
func ifname(name string, exact bool) []byte {
	if !exact {
		return []byte(name)
	}
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func iifname(name string, exact bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name, exact)},
	}
}

func oifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name, false)},
	}
}

func notIifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(name, false)},
	}
}

func nfproto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func dport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

// addrIn matches the IPv4 source (src) or destination address in prefix.
func addrIn(p netip.Prefix, src bool) []expr.Any {
	off := uint32(16)
	if src {
		off = 12
	}
	mask := netipMask(p.Bits())
	net := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net[:]},
	}
}

func netipMask(bits int) []byte {
	m := make([]byte, 4)
	binary.BigEndian.PutUint32(m, ^uint32(0)<<(32-bits))
	if bits == 0 {
		binary.BigEndian.PutUint32(m, 0)
	}
	return m
}

func daddrInSet(s *nftables.Set) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID},
	}
}

func ctState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, bits), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func verdict(k expr.VerdictKind) *expr.Verdict { return &expr.Verdict{Kind: k} }

func rule(t *nftables.Table, c *nftables.Chain, parts ...[]expr.Any) *nftables.Rule {
	var exprs []expr.Any
	for _, p := range parts {
		exprs = append(exprs, p...)
	}
	return &nftables.Rule{Table: t, Chain: c, Exprs: exprs}
}

func one(e expr.Any) []expr.Any { return []expr.Any{e} }

// tables are the objects of the base table, for building batches.
type tables struct {
	t                       *nftables.Table
	forward, input, conncap *nftables.Chain
	prerouting              *nftables.Chain
	dispatch, caps, proxied *nftables.Set
}

// addBase queues the whole base table: chains, rules, the dispatch and
// caps maps and the proxied set (all empty).
func (m *Manager) addBase(c *nftables.Conn) *tables {
	tb := baseSets(c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}))
	t := tb.t
	accept := nftables.ChainPolicyAccept
	for _, s := range []*nftables.Set{tb.dispatch, tb.caps, tb.proxied} {
		if err := c.AddSet(s, nil); err != nil {
			panic(fmt.Sprintf("network: set %s: %v", s.Name, err)) // only malformed sets fail here
		}
	}

	// Sandboxes' TCP flows leave the table when they close (see
	// closedTimeout), set by the conncap chain's first rule.
	c.AddObj(&nftables.NamedObj{Table: t, Name: tcpTimeoutName, Type: nftables.ObjTypeCtTimeout,
		Obj: &expr.CtTimeout{L3Proto: unix.NFPROTO_IPV4, L4Proto: unix.IPPROTO_TCP, Policy: tcpTimeouts()}})

	// Every packet from a sandbox link passes its cap chain first, before
	// NAT sends DNS and web traffic to the host's resolver and proxy: the
	// cap counts those flows too, and those of sandboxes without internet.
	// Conntrack (priority -200) has made the packet's entry by then; a
	// packet dropped here never confirms it, so it takes no room in the
	// table. A link with no cap chain (being set up or torn down) starts
	// no flow; the packets of its tracked flows still pass (a torn-down
	// sandbox's answer to the proxy's FIN, say), to be judged as before.
	tb.conncap = c.AddChain(&nftables.Chain{Name: "conncap", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 50), Policy: &accept})
	// A timeout policy is attached to an entry conntrack has made and not
	// yet confirmed (the kernel ignores it on others): here, not before
	// conntrack.
	c.AddRule(rule(t, tb.conncap, iifname(linkPrefix, false), nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP),
		one(&expr.Objref{Type: unix.NFT_OBJECT_CT_TIMEOUT, Name: tcpTimeoutName})))
	c.AddRule(rule(t, tb.conncap, iifname(linkPrefix, false), one(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}),
		one(&expr.Lookup{SourceRegister: 1, SetName: tb.caps.Name, SetID: tb.caps.ID, IsDestRegSet: true, DestRegister: 0})))
	c.AddRule(rule(t, tb.conncap, iifname(linkPrefix, false), ctState(expr.CtStateBitNEW), one(verdict(expr.VerdictDrop))))

	// The egress proxy's connections to the internet are the host's, not
	// a sandbox link's, so conncap does not see them: the proxy marks its
	// sockets (EgressMark) and they leave the table as they close too,
	// which bounds them by the proxy's own per-sandbox cap on connections.
	egressOut := c.AddChain(&nftables.Chain{Name: "egressout", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 50), Policy: &accept})
	c.AddRule(rule(t, egressOut, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, EgressMark)},
	}, nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP),
		one(&expr.Objref{Type: unix.NFT_OBJECT_CT_TIMEOUT, Name: tcpTimeoutName})))

	tb.forward = c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 1), Policy: &accept})
	// From a sandbox: IPv6 never; IPv4 to its own chain; a link with no
	// chain (being set up or torn down) gets nothing.
	c.AddRule(rule(t, tb.forward, iifname(linkPrefix, false), nfproto(unix.NFPROTO_IPV6), one(verdict(expr.VerdictDrop))))
	c.AddRule(rule(t, tb.forward, iifname(linkPrefix, false), one(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}),
		one(&expr.Lookup{SourceRegister: 1, SetName: tb.dispatch.Name, SetID: tb.dispatch.ID, IsDestRegSet: true, DestRegister: 0})))
	c.AddRule(rule(t, tb.forward, iifname(linkPrefix, false), one(verdict(expr.VerdictDrop))))
	// To a sandbox: only replies.
	c.AddRule(rule(t, tb.forward, oifname(linkPrefix), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), one(verdict(expr.VerdictAccept))))
	c.AddRule(rule(t, tb.forward, oifname(linkPrefix), one(verdict(expr.VerdictDrop))))

	tb.input = c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 1), Policy: &accept})
	c.AddRule(rule(t, tb.input, iifname(linkPrefix, false), ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), one(verdict(expr.VerdictAccept))))
	for _, svc := range []struct {
		proto byte
		port  uint16
	}{{unix.IPPROTO_UDP, m.resolverPort}, {unix.IPPROTO_TCP, m.resolverPort}, {unix.IPPROTO_TCP, m.proxyPort}} {
		c.AddRule(rule(t, tb.input, iifname(linkPrefix, false), nfproto(unix.NFPROTO_IPV4), l4proto(svc.proto), dport(svc.port), one(verdict(expr.VerdictAccept))))
		// The sandboxes' services are not the world's.
		c.AddRule(rule(t, tb.input, notIifname(linkPrefix), l4proto(svc.proto), dport(svc.port), one(verdict(expr.VerdictDrop))))
	}
	// Nothing else of the host, its API port included, from a sandbox.
	c.AddRule(rule(t, tb.input, iifname(linkPrefix, false), one(verdict(expr.VerdictDrop))))

	tb.prerouting = c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		c.AddRule(rule(t, tb.prerouting, iifname(linkPrefix, false), nfproto(unix.NFPROTO_IPV4), l4proto(proto), dport(53), redirect(m.resolverPort)))
	}
	for _, port := range []uint16{80, 443} {
		c.AddRule(rule(t, tb.prerouting,
			one(&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1}),
			one(&expr.Lookup{SourceRegister: 1, SetName: tb.proxied.Name, SetID: tb.proxied.ID}),
			nfproto(unix.NFPROTO_IPV4), l4proto(unix.IPPROTO_TCP), dport(port), redirect(m.proxyPort)))
	}

	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(rule(t, post, nfproto(unix.NFPROTO_IPV4), addrIn(m.prefix, true), notOifname(linkPrefix), one(&expr.Masq{})))
	return tb
}

func notOifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname(name, false)},
	}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

// existing returns handles on the base table's objects as they are in the
// kernel, for incremental batches.
func (m *Manager) existing() *tables {
	return baseSets(&nftables.Table{Family: nftables.TableFamilyINet, Name: tableName})
}

// baseSets returns the base table t with its sets and maps.
func baseSets(t *nftables.Table) *tables {
	return &tables{
		t:        t,
		dispatch: &nftables.Set{Table: t, Name: "dispatch", IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict},
		caps:     &nftables.Set{Table: t, Name: "caps", IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict},
		proxied:  &nftables.Set{Table: t, Name: "proxied", KeyType: nftables.TypeIFName},
	}
}

// tcpTimeoutName is the conntrack timeout policy of sandboxes' TCP flows.
const tcpTimeoutName = "sandbox-tcp"

// EgressMark is the socket mark (SO_MARK) of the egress proxy's connections
// to the internet, by which the firewall gives them sandboxes' timeouts. A
// host that routes by firewall mark must not use this value for itself.
const EgressMark = 0x68757463 // "hutc"

// MarkEgress is a net.Dialer's Control for the egress proxy: it marks the
// socket with EgressMark (which needs CAP_NET_ADMIN).
func MarkEgress(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, EgressMark)
	}); cerr != nil {
		return cerr
	}
	if err != nil {
		return fmt.Errorf("mark the egress proxy's socket: %w", err)
	}
	return nil
}

// closedTimeout is how long conntrack keeps a sandbox's TCP flow once it
// is closed (TIME_WAIT, CLOSE): not at all. ct count does not count those
// states, the kernel keeps them 120 s and 10 s by default, and never
// evicts them for new flows when the table is full (they are assured): a
// sandbox that opened and closed connections fast held thousands of
// entries against a cap of 40. A short timeout is not enough: entries
// then live as long as that timeout times the rate of closes, and once
// expired they wait for the kernel's garbage collector (up to a minute),
// still in the table (1 s left 14572 entries with a cap of 40). An entry
// whose timeout is 0 is expired the moment its flow closes, and it goes
// while it is still counted: ct count keeps a list of the flows it
// counted and counts each until a lookup (on the sandbox's next new
// flows) finds it closed or gone, and that very lookup removes an expired
// entry. So a sandbox's entries, closed ones included, stay within its
// cap.
//
// What a closed flow loses is conntrack's memory of it: a late packet of
// it (a retransmitted FIN whose last ACK was lost) is judged as new,
// which from the internet means dropped, as it would be after TIME_WAIT
// anyway.
const closedTimeout = 0

// tcpTimeouts returns the timeout policy of sandboxes' TCP flows, in
// seconds: the kernel's defaults (net.netfilter.nf_conntrack_tcp_timeout_*)
// but for the closed states. The other closing states (FIN_WAIT,
// CLOSE_WAIT, LAST_ACK) are counted, and a half-closed stream may go on
// for long in them. Every state is given: google/nftables fills the
// missing ones from defaults of its own, which are not the kernel's
// (and writes the ones given into them).
func tcpTimeouts() expr.CtStatePolicyTimeout {
	return expr.CtStatePolicyTimeout{
		expr.CtStateTCPSYNSENT:     120,
		expr.CtStateTCPSYNRECV:     60,
		expr.CtStateTCPESTABLISHED: 432000,
		expr.CtStateTCPFINWAIT:     120,
		expr.CtStateTCPCLOSEWAIT:   60,
		expr.CtStateTCPLASTACK:     30,
		expr.CtStateTCPTIMEWAIT:    closedTimeout,
		expr.CtStateTCPCLOSE:       closedTimeout,
		expr.CtStateTCPSYNSENT2:    120,
		expr.CtStateTCPRETRANS:     300,
		expr.CtStateTCPUNACK:       300,
	}
}

func capChainName(id string) string { return "cap-" + id }
func chainName(id string) string    { return "sbx-" + id }
func resolvedName(id string) string { return "res-" + id }

// addSandbox queues a sandbox's chains, its resolved-addresses set and its
// dispatch and caps entries. With fresh false they exist already: the
// policy chain and the set are emptied first (a policy update), and the
// cap chain is left as it is, with the flows it counts. The whole change
// is one batch, so no packet ever sees half a policy.
func (m *Manager) addSandbox(c *nftables.Conn, tb *tables, sb *sandboxNet, fresh bool) error {
	t := tb.t
	ch := &nftables.Chain{Name: chainName(sb.id), Table: t}
	res := &nftables.Set{Table: t, Name: resolvedName(sb.id), KeyType: nftables.TypeIPAddr, HasTimeout: true, Size: resolvedSetSize}
	if fresh {
		// ct count over N: a new flow past the cap is dropped. The count
		// is this rule's own (one rule per sandbox); a flow leaves it when
		// conntrack forgets the flow (TCP already once it is closed).
		capCh := c.AddChain(&nftables.Chain{Name: capChainName(sb.id), Table: t})
		// Only the sandbox's own address. A sandbox cannot send from
		// another today (raw sockets and IP_TRANSPARENT need capabilities
		// it lacks), so this is defence in depth: a spoofed packet would
		// leave unmasqueraded, reach the host's services as another
		// sandbox, or escape this count.
		own := sb.addr.As4()
		c.AddRule(rule(t, capCh, nfproto(unix.NFPROTO_IPV4),
			[]expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: own[:]},
			}, one(verdict(expr.VerdictDrop))))
		c.AddRule(rule(t, capCh, ctState(expr.CtStateBitNEW), one(&expr.Connlimit{Count: m.maxConns, Flags: expr.NFT_CONNLIMIT_F_INV}), one(verdict(expr.VerdictDrop))))
		// A final verdict: a jump that returns would go on to the
		// conncap chain's drop of new flows.
		c.AddRule(rule(t, capCh, one(verdict(expr.VerdictAccept))))
		if err := c.SetAddElements(tb.caps, []nftables.SetElement{{
			Key: ifname(sb.link, true), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: capCh.Name},
		}}); err != nil {
			return err
		}
		c.AddChain(ch)
		if err := c.AddSet(res, nil); err != nil {
			return err
		}
	} else {
		c.FlushChain(ch)
		c.FlushSet(res) // names allowed before may not be now
	}
	p := sb.policy
	c.AddRule(rule(t, ch, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), one(verdict(expr.VerdictAccept))))
	for _, bl := range policy.AlwaysBlockedPrefixes() {
		c.AddRule(rule(t, ch, addrIn(bl, false), one(verdict(expr.VerdictDrop))))
	}
	if !p.Internet {
		c.AddRule(rule(t, ch, one(verdict(expr.VerdictDrop))))
	} else {
		for _, r := range p.Allow {
			if r.Prefix.IsValid() {
				c.AddRule(rule(t, ch, addrIn(r.Prefix, false), one(verdict(expr.VerdictAccept))))
			}
		}
		c.AddRule(rule(t, ch, daddrInSet(res), one(verdict(expr.VerdictAccept))))
		for _, r := range p.Deny {
			if r.Prefix.IsValid() {
				c.AddRule(rule(t, ch, addrIn(r.Prefix, false), one(verdict(expr.VerdictDrop))))
			}
		}
		// A final verdict either way: a jump that returns would go on to
		// the forward chain's drop of sandbox traffic.
		if p.DeniesAll() {
			c.AddRule(rule(t, ch, one(verdict(expr.VerdictDrop))))
		} else {
			c.AddRule(rule(t, ch, one(verdict(expr.VerdictAccept))))
		}
	}
	if fresh {
		if err := c.SetAddElements(tb.dispatch, []nftables.SetElement{{
			Key: ifname(sb.link, true), VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name},
		}}); err != nil {
			return err
		}
	}
	el := []nftables.SetElement{{Key: ifname(sb.link, true)}}
	if p.Internet && p.HasDomains() {
		return c.SetAddElements(tb.proxied, el)
	}
	if !fresh {
		// Deleting an absent element fails the batch: only when it was in.
		if sb.proxied {
			return c.SetDeleteElements(tb.proxied, el)
		}
	}
	return nil
}

// delSandbox queues the removal of everything of one sandbox.
func delSandbox(c *nftables.Conn, tb *tables, sb *sandboxNet) {
	el := []nftables.SetElement{{Key: ifname(sb.link, true)}}
	c.SetDeleteElements(tb.dispatch, el)
	c.SetDeleteElements(tb.caps, el)
	if sb.proxied {
		c.SetDeleteElements(tb.proxied, el)
	}
	for _, name := range []string{chainName(sb.id), capChainName(sb.id)} {
		ch := &nftables.Chain{Name: name, Table: tb.t}
		c.FlushChain(ch)
		c.DelChain(ch)
	}
	c.DelSet(&nftables.Set{Table: tb.t, Name: resolvedName(sb.id)})
}

// writeResolved queues the changes of a sandbox's res-<id> set (see
// resolvedSet.add): the evicted addresses go first, each written then
// deleted (deleting an element the kernel does not hold, or holds
// expired, would fail the batch), then the addresses written, each for
// its timeout.
func writeResolved(c *nftables.Conn, tb *tables, id string, writes []resolvedWrite, evicted []netip.Addr) error {
	res := &nftables.Set{Table: tb.t, Name: resolvedName(id), KeyType: nftables.TypeIPAddr, HasTimeout: true}
	if len(evicted) > 0 {
		var els []nftables.SetElement
		for _, a := range evicted {
			b := a.As4()
			els = append(els, nftables.SetElement{Key: b[:], Timeout: evictTimeout})
		}
		if err := c.SetAddElements(res, els); err != nil {
			return err
		}
		for i := range els {
			els[i].Timeout = 0
		}
		if err := c.SetDeleteElements(res, els); err != nil {
			return err
		}
	}
	var els []nftables.SetElement
	for _, w := range writes {
		if !w.addr.Is4() || w.timeout <= 0 {
			continue
		}
		b := w.addr.As4()
		els = append(els, nftables.SetElement{Key: b[:], Timeout: w.timeout})
	}
	if len(els) == 0 {
		return nil
	}
	return c.SetAddElements(res, els)
}
