// Package resolver is the DNS resolver Hutch runs for sandboxes: every
// sandbox's DNS traffic is redirected to it, it answers only the names the
// sandbox's egress policy (internal/network/policy) allows, and it reports
// the addresses each allowed name resolved to, so the firewall can let the
// sandbox connect to them.
//
// It is a forwarder, not a recursive resolver: allowed queries go to the
// host's own resolvers (or the configured upstream servers). It never
// forwards a name the policy refuses, so a sandbox cannot use DNS itself
// as a channel out (to an attacker's name server) for names it may not
// reach.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/hutch-sandbox/hutch/internal/network/policy"
)

const (
	// upstreamTimeout bounds each exchange with an upstream server, per
	// transport, and forwardTimeout a forwarded query, whatever the
	// number of servers tried: a stub resolver in a sandbox retries after
	// about 5 s, so an answer that takes longer is of no use to it, and
	// a query whose servers never answer holds its slot (below) no
	// longer than that.
	upstreamTimeout = 2 * time.Second
	forwardTimeout  = 4 * time.Second

	// minTTL and maxTTL bound how long the addresses of an answer are
	// reported valid: a very short TTL would let the firewall close
	// before the sandbox has connected, a very long one keep addresses
	// open long after the name has moved.
	minTTL = 30 * time.Second
	maxTTL = time.Hour

	// ednsSize is the UDP payload size advertised to upstream servers and
	// the largest UDP answer sent to sandboxes: 1232 bytes never fragments
	// (DNS flag day 2020); larger answers go over TCP.
	ednsSize = 1232

	// Forwarded queries in flight. Forwarding is the only slow work (up
	// to forwardTimeout per query); answers decided locally take
	// microseconds and are not limited. Each sandbox may have
	// maxForwardsReserved in flight whatever the others have; past those,
	// sandboxes share maxForwardsShared, each up to maxForwardsPerClient;
	// never more than maxForwards in all. A query in flight costs a
	// goroutine and its buffers, about 11 KiB (8 KiB of stack, 3 KiB of
	// heap, measured): maxForwards is 90 MiB. With a single pool (1024,
	// 64 each), 17 sandboxes asking for names that never answer filled it
	// and failed another sandbox's lookups (review R8); now another
	// sandbox's lookups fail only once 896 sandboxes hold their reserved
	// queries all at once.
	maxForwards          = 8192
	maxForwardsShared    = 1024
	maxForwardsPerClient = 64
	maxForwardsReserved  = 8

	// TCP connections open, shared as forwarded queries are: each holds
	// a goroutine and a socket for up to the idle timeout (8 s). Stub
	// resolvers use TCP only for answers too big for UDP, a connection
	// each.
	maxConns          = 4096
	maxConnsShared    = 1024
	maxConnsPerClient = 64
	maxConnsReserved  = 4

	// anyTTL is the TTL of the RFC 8482 answer to ANY queries.
	anyTTL = 3600

	// maxAnswerAddrs bounds the addresses of one answer: the firewall
	// opens to each (and keeps a bounded number per sandbox, evicting
	// the oldest: one answer of thousands of records over TCP would take
	// all of them), so the ones past it are left out of the answer too.
	maxAnswerAddrs = 128
)

// Options configure a Resolver.
type Options struct {
	// ResolvConf is where the host's nameservers are read from when
	// Upstream is empty; default /etc/resolv.conf.
	ResolvConf string
	// Upstream are the servers queries are forwarded to, "ip:port", tried
	// in order. Empty means the nameservers of the host's
	// /etc/resolv.conf (port 53).
	Upstream []string
	// Policy returns the egress policy of the sandbox at a source address;
	// ok false means the address is no sandbox's: its queries are
	// answered REFUSED. It is called for every query, from many
	// goroutines at once. Required.
	Policy func(client netip.Addr) (p *policy.Egress, ok bool)
	// OnAnswer is called for every answer with IPv4 addresses given for an
	// allowed name, before the answer is sent, so that the firewall lets
	// the sandbox connect to them by the time it knows them. name is the
	// name the client asked for and the policy judged (lower case, without
	// the trailing dot), also when the addresses are at the end of a CNAME
	// chain; addrs are the addresses of the name and its chain in the
	// answer, at most 128 (maxAnswerAddrs: the answer leaves out the
	// rest); ttl is how long they are valid: the smallest TTL of their
	// records, at least 30 s and at most 1 h (answers are given with no
	// TTL above it, so clients forget the addresses no later than the
	// firewall). The answer waits for OnAnswer to return; it is called
	// from many goroutines at once. Optional.
	OnAnswer func(client netip.Addr, name string, addrs []netip.Addr, ttl time.Duration)
	// Logger receives the resolver's logs; nil discards them.
	Logger *slog.Logger
}

// A Resolver answers the DNS queries of sandboxes by their egress policy.
// One Resolver may serve any number of sockets at once. Each Serve call
// asks the upstream servers through sockets of its own, a few per server
// whatever the number of queries (see upstream.go), and closes them when
// it returns.
type Resolver struct {
	upstream []string
	policy   func(netip.Addr) (*policy.Egress, bool)
	onAnswer func(netip.Addr, string, []netip.Addr, time.Duration)
	logger   *slog.Logger

	timeout        time.Duration // per upstream exchange
	forwardTimeout time.Duration // per forwarded query
	forwards       *limiter      // forwarded queries in flight
	conns          *limiter      // TCP connections open
}

// New returns a resolver for opts. It reads /etc/resolv.conf when
// opts.Upstream is empty.
func New(opts Options) (*Resolver, error) {
	if opts.Policy == nil {
		return nil, errors.New("resolver: no Policy function")
	}
	upstream := opts.Upstream
	resolvConfPath := opts.ResolvConf
	if resolvConfPath == "" {
		resolvConfPath = "/etc/resolv.conf"
	}
	if len(upstream) == 0 {
		conf, err := dns.ClientConfigFromFile(resolvConfPath)
		if err != nil {
			return nil, fmt.Errorf("resolver: no upstream given and reading the host's: %w", err)
		}
		for _, s := range conf.Servers {
			upstream = append(upstream, net.JoinHostPort(s, "53"))
		}
		if len(upstream) == 0 {
			return nil, fmt.Errorf("resolver: no upstream given and %s names no nameserver", resolvConfPath)
		}
	}
	for _, u := range upstream {
		if ap, err := netip.ParseAddrPort(u); err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("resolver: upstream %q is not an ip:port", u)
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Resolver{
		upstream:       append([]string(nil), upstream...),
		policy:         opts.Policy,
		onAnswer:       opts.OnAnswer,
		logger:         logger,
		timeout:        upstreamTimeout,
		forwardTimeout: forwardTimeout,
		forwards:       newReservingLimiter(maxForwards, maxForwardsShared, maxForwardsPerClient, maxForwardsReserved),
		conns:          newReservingLimiter(maxConns, maxConnsShared, maxConnsPerClient, maxConnsReserved),
	}, nil
}

// Serve answers queries on the UDP and TCP sockets given (either may be
// nil) until ctx ends or one of them fails. It closes both before it
// returns, and returns nil when stopped by ctx.
func (r *Resolver) Serve(ctx context.Context, udp net.PacketConn, tcp net.Listener) error {
	if udp == nil && tcp == nil {
		return errors.New("resolver: no socket to serve")
	}
	// Canceled when Serve returns, which also ends the upstream exchanges
	// of queries still in flight, so shutting down does not wait for them.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ups := r.newUpstreams()
	defer ups.close() // after the servers: no query uses them any more
	h := &handler{r: r, ctx: ctx, ups: ups}
	var servers []*dns.Server
	if udp != nil {
		servers = append(servers, &dns.Server{
			PacketConn:    udp,
			Handler:       h,
			UDPSize:       dns.DefaultMsgSize, // queries with EDNS options may exceed 512 bytes
			MsgAcceptFunc: accept,
		})
	}
	if tcp != nil {
		servers = append(servers, &dns.Server{
			Listener:      &limitListener{Listener: tcp, limit: r.conns},
			Handler:       h,
			MsgAcceptFunc: accept,
		})
	}

	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			errs[i] = run(ctx, srv)
			cancel() // one socket failing stops the other
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// run serves srv until ctx ends. miekg/dns can only shut down a server
// that has started, so run waits for the start before it waits for ctx.
func run(ctx context.Context, srv *dns.Server) error {
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	select {
	case err := <-done:
		closeSockets(srv)
		return err
	case <-started:
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// ShutdownContext stops reading, unblocks the TCP connections
		// and waits for the queries in flight.
		srv.ShutdownContext(context.Background())
		<-done
		return nil
	}
}

// closeSockets closes the sockets of a server that failed to start, as
// Serve promises.
func closeSockets(srv *dns.Server) {
	if srv.PacketConn != nil {
		srv.PacketConn.Close()
	}
	if srv.Listener != nil {
		srv.Listener.Close()
	}
}

// accept is the server's first look at a message, before it is parsed:
// responses are ignored (answering them could start a loop), opcodes other
// than QUERY get NOTIMP, messages that are not one question get FORMERR.
func accept(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	if dh.Bits&qr == 0 && int(dh.Bits>>11)&0xF != dns.OpcodeQuery {
		return dns.MsgRejectNotImplemented // NOTIFY, UPDATE, ... are not a resolver's
	}
	return dns.DefaultMsgAcceptFunc(dh)
}

// handler answers the queries of one Serve call.
type handler struct {
	r   *Resolver
	ctx context.Context
	ups upstreams
}

// ServeDNS answers one query. A panic (in Policy, OnAnswer or here) is
// logged and answered SERVFAIL instead of crashing the host's resolver for
// every sandbox.
func (h *handler) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	wrote := false
	defer func() {
		if v := recover(); v != nil {
			h.r.logger.Error("dns: panic answering a query", "client", w.RemoteAddr().String(), "panic", v, "stack", string(debug.Stack()))
			if !wrote {
				w.WriteMsg(new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
			}
		}
	}()
	tcp := w.RemoteAddr().Network() == "tcp"
	resp := h.r.answer(h.ctx, h.ups, addrOf(w.RemoteAddr()), req)
	if tcp {
		resp.Truncate(dns.MaxMsgSize)
	} else {
		resp.Truncate(udpSize(req))
	}
	wrote = true
	if err := w.WriteMsg(resp); err != nil {
		h.r.logger.Debug("dns: write answer", "client", w.RemoteAddr().String(), "err", err)
	}
}

// answer returns the response to req from client, asking ups if it must.
func (r *Resolver) answer(ctx context.Context, ups upstreams, client netip.Addr, req *dns.Msg) *dns.Msg {
	opt := req.IsEdns0()
	// The accept function has rejected these already; checked again so
	// that answer relies on nothing but its arguments.
	if req.Opcode != dns.OpcodeQuery {
		return reply(req, dns.RcodeNotImplemented, nil)
	}
	if len(req.Question) != 1 {
		return reply(req, dns.RcodeFormatError, nil)
	}
	if opt != nil && opt.Version() != 0 {
		return reply(req, dns.RcodeBadVers, nil) // RFC 6891 §6.1.3
	}
	q := req.Question[0]
	refuse := func(rcode int, ede *dns.EDNS0_EDE, reason string) *dns.Msg {
		r.logger.Debug("dns: query refused", "client", client.String(), "name", q.Name,
			"type", dns.Type(q.Qtype).String(), "reason", reason)
		return reply(req, rcode, ede)
	}

	var p *policy.Egress
	ok := false
	if client.IsValid() {
		p, ok = r.policy(client)
	}
	if !ok || p == nil {
		return refuse(dns.RcodeRefused, edeProhibited, "not a sandbox")
	}
	if q.Qclass != dns.ClassINET || unsupported(q.Qtype) {
		return refuse(dns.RcodeNotImplemented, edeNotSupported, "unsupported class or type")
	}
	if q.Qtype == dns.TypePTR || isReverse(q.Name) {
		// Reverse lookups would tell a sandbox about addresses, the
		// host's network included, that it is not to know of.
		return refuse(dns.RcodeNameError, edeReverse, "reverse lookup")
	}
	if !allowsLookup(p, q.Name) {
		return refuse(dns.RcodeNameError, edeBlocked, "policy")
	}

	switch q.Qtype {
	case dns.TypeAAAA:
		// Sandboxes have IPv4 only: an empty answer makes clients use A
		// at once, where forwarding would only find addresses they cannot
		// reach.
		return reply(req, dns.RcodeSuccess, nil)
	case dns.TypeANY:
		// RFC 8482 §4.2: ANY is answered by a synthesized HINFO. Not
		// NXDOMAIN, which would say that the name has no records of any
		// type (RFC 8020) to the caches that hold on to it.
		resp := reply(req, dns.RcodeSuccess, nil)
		resp.Answer = []dns.RR{&dns.HINFO{
			Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: anyTTL},
			Cpu: "RFC8482",
		}}
		return resp
	}
	return r.forward(ctx, ups, client, req)
}

// forward answers an allowed query with the upstream's answer, and reports
// the addresses in it before the client can use them.
func (r *Resolver) forward(ctx context.Context, ups upstreams, client netip.Addr, req *dns.Msg) *dns.Msg {
	q := req.Question[0]
	if !r.forwards.acquire(client) {
		r.logger.Debug("dns: too many queries in flight", "client", client.String(), "name", q.Name)
		return reply(req, dns.RcodeServerFailure, edeBusy)
	}
	defer r.forwards.release(client)

	ctx, cancel := context.WithTimeout(ctx, r.forwardTimeout)
	defer cancel()
	up, err := r.exchange(ctx, ups, upstreamQuery(req))
	if err != nil {
		r.logger.Debug("dns: no upstream answer", "client", client.String(), "name", q.Name,
			"type", dns.Type(q.Qtype).String(), "err", err)
		return reply(req, dns.RcodeServerFailure, edeUpstream)
	}

	resp := new(dns.Msg).SetReply(req) // the client's ID and question, in its casing
	resp.RecursionAvailable = true
	resp.AuthenticatedData = up.AuthenticatedData
	resp.Rcode = up.Rcode
	resp.Answer, resp.Ns = up.Answer, up.Ns
	for _, rr := range up.Extra {
		if rr.Header().Rrtype != dns.TypeOPT { // EDNS is per hop: ours is added below
			resp.Extra = append(resp.Extra, rr)
		}
	}
	var upEDE []dns.EDNS0 // the upstream's reasons (DNSSEC failures, ...) are the client's too
	if o := up.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if e.Option() == dns.EDNS0EDE {
				upEDE = append(upEDE, e)
			}
		}
	}
	setEDNS(resp, req.IsEdns0(), upEDE...)

	if addrs, ttl := addresses(q.Name, resp.Answer); len(addrs) > 0 {
		if len(addrs) > maxAnswerAddrs {
			addrs = addrs[:maxAnswerAddrs]
			resp.Answer = onlyAddrs(resp.Answer, addrs)
		}
		// The firewall forgets the addresses after ttl: the client must
		// not keep using them, or the chain leading to them, longer.
		secs := uint32(ttl / time.Second)
		for _, rr := range resp.Answer {
			if h := rr.Header(); h.Ttl > secs {
				h.Ttl = secs
			}
		}
		if r.onAnswer != nil {
			r.onAnswer(client, canonical(q.Name), addrs, ttl)
		}
	}
	return resp
}

// upstreamQuery returns the query sent upstream for req: the question in
// the client's casing (so 0x20 randomization still works end to end),
// recursion desired, and EDNS of its own; the client's EDNS options
// (cookies, client subnet, padding) are for this hop only. Each exchange
// gives it an ID of its own.
func upstreamQuery(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.RecursionDesired = true
	m.CheckingDisabled = req.CheckingDisabled
	m.AuthenticatedData = req.AuthenticatedData
	m.Question = []dns.Question{req.Question[0]}
	do := false
	if opt := req.IsEdns0(); opt != nil {
		do = opt.Do()
	}
	m.SetEdns0(ednsSize, do)
	return m
}

// upstreams are the upstream servers of one Serve call, in r.upstream's
// order, with their sockets (see upstream.go).
type upstreams []*upstream

// newUpstreams returns the upstream servers; sockets open as queries
// need them.
func (r *Resolver) newUpstreams() upstreams {
	ups := make(upstreams, len(r.upstream))
	for i, addr := range r.upstream {
		ups[i] = newUpstream(addr, r.logger)
	}
	return ups
}

// close closes every socket of ups.
func (ups upstreams) close() {
	for _, u := range ups {
		u.close()
	}
}

// exchange sends m to each upstream server in turn until one answers.
func (r *Resolver) exchange(ctx context.Context, ups upstreams, m *dns.Msg) (*dns.Msg, error) {
	var errs []error
	for _, u := range ups {
		resp, err := r.exchangeWith(ctx, m, u)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", u.addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// exchangeWith asks one server: over UDP, then over TCP when the answer
// did not fit.
func (r *Resolver) exchangeWith(ctx context.Context, m *dns.Msg, u *upstream) (*dns.Msg, error) {
	resp, err := r.exchangeOver(ctx, "udp", m, u)
	if err == nil && resp.Truncated {
		resp, err = r.exchangeOver(ctx, "tcp", m, u)
	}
	if err != nil {
		return nil, err
	}
	if err := check(m, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// exchangeOver makes one exchange over network, within r.timeout.
func (r *Resolver) exchangeOver(ctx context.Context, network string, m *dns.Msg, u *upstream) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return u.exchange(ctx, network, m)
}

// check reports whether resp is an answer to m the client can be given.
// A server that fails (SERVFAIL, REFUSED) is an error too, so that the
// next one is tried.
func check(m, resp *dns.Msg) error {
	switch {
	case !resp.Response || resp.Opcode != dns.OpcodeQuery:
		return errors.New("not a response to a query")
	case resp.Truncated:
		return errors.New("truncated over TCP")
	case len(resp.Question) != 1 || !sameQuestion(resp.Question[0], m.Question[0]):
		return errors.New("response to another question")
	case resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused || resp.Rcode > 0xF:
		return fmt.Errorf("server answered %s", dns.RcodeToString[resp.Rcode])
	}
	return nil
}

// sameQuestion reports whether a and b ask the same, names compared
// without regard to case.
func sameQuestion(a, b dns.Question) bool {
	return a.Qtype == b.Qtype && a.Qclass == b.Qclass && strings.EqualFold(a.Name, b.Name)
}

// addresses returns the IPv4 addresses answer gives for name, following
// CNAMEs from it, and their smallest TTL bounded to [minTTL, maxTTL].
// Records for names outside the chain are no answer to the question and
// are left out.
func addresses(name string, answer []dns.RR) ([]netip.Addr, time.Duration) {
	targets := map[string][]string{} // CNAME owner to targets
	for _, rr := range answer {
		if c, ok := rr.(*dns.CNAME); ok {
			owner := strings.ToLower(c.Hdr.Name)
			targets[owner] = append(targets[owner], strings.ToLower(c.Target))
		}
	}
	// Each name is visited once, so CNAME loops end.
	chain := map[string]bool{}
	todo := []string{strings.ToLower(name)}
	for len(todo) > 0 {
		n := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if !chain[n] {
			chain[n] = true
			todo = append(todo, targets[n]...)
		}
	}

	var addrs []netip.Addr
	seen := map[netip.Addr]bool{}
	var ttl uint32
	for _, rr := range answer {
		a, ok := rr.(*dns.A)
		if !ok || !chain[strings.ToLower(a.Hdr.Name)] {
			continue
		}
		addr, ok := netip.AddrFromSlice(a.A.To4())
		if !ok {
			continue
		}
		if len(addrs) == 0 || a.Hdr.Ttl < ttl {
			ttl = a.Hdr.Ttl
		}
		if !seen[addr] {
			seen[addr] = true
			addrs = append(addrs, addr)
		}
	}
	return addrs, min(max(time.Duration(ttl)*time.Second, minTTL), maxTTL)
}

// onlyAddrs returns answer without the A records of addresses other than
// addrs.
func onlyAddrs(answer []dns.RR, addrs []netip.Addr) []dns.RR {
	keep := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		keep[a] = true
	}
	var out []dns.RR
	for _, rr := range answer {
		if a, ok := rr.(*dns.A); ok {
			if addr, ok := netip.AddrFromSlice(a.A.To4()); !ok || !keep[addr] {
				continue
			}
		}
		out = append(out, rr)
	}
	return out
}

// allowsLookup reports whether p lets a sandbox look name up. Names with
// escaped characters (a dot or a byte that is no hostname's inside a
// label: "a\.example.com.") are refused whatever the rules say: rules
// compare the text of names, and as text "a\.example.com" would match
// "*.example.com" though it is a name under com.
func allowsLookup(p *policy.Egress, name string) bool {
	return !strings.ContainsRune(name, '\\') && p.AllowsLookup(name)
}

// isReverse reports whether name is in the reverse-mapping trees.
func isReverse(name string) bool {
	n := canonical(name)
	for _, zone := range []string{"in-addr.arpa", "ip6.arpa"} {
		if n == zone || strings.HasSuffix(n, "."+zone) {
			return true
		}
	}
	return false
}

// unsupported reports whether qtype asks for more than records of a name:
// zone transfers and the meta types a resolver does not forward.
func unsupported(qtype uint16) bool {
	switch qtype {
	case dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB,
		dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY:
		return true
	}
	return false
}

// canonical returns name as policy rules spell names: lower case, without
// the trailing dot.
func canonical(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// Extended DNS Errors (RFC 8914) telling a sandbox's user why a query
// failed, where a bare rcode would look like a network fault.
var (
	edeBlocked      = &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: "blocked by the sandbox's network policy"}
	edeReverse      = &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeBlocked, ExtraText: "reverse lookups are not served to sandboxes"}
	edeProhibited   = &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeProhibited, ExtraText: "not a sandbox"}
	edeNotSupported = &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeNotSupported}
	edeUpstream     = &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeNetworkError, ExtraText: "no upstream server answered"}
	edeBusy         = &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeOther, ExtraText: "too many queries in flight"}
)

// reply returns a response to req with rcode and no records, carrying ede
// when the client speaks EDNS.
func reply(req *dns.Msg, rcode int, ede *dns.EDNS0_EDE) *dns.Msg {
	resp := new(dns.Msg).SetRcode(req, rcode)
	resp.RecursionAvailable = true
	var opts []dns.EDNS0
	if ede != nil {
		opts = append(opts, ede)
	}
	setEDNS(resp, req.IsEdns0(), opts...)
	return resp
}

// setEDNS adds an OPT record with opts to resp if the request had one
// (reqOPT); without, the client does not speak EDNS and must get none
// (RFC 6891 §7).
func setEDNS(resp *dns.Msg, reqOPT *dns.OPT, opts ...dns.EDNS0) {
	if reqOPT == nil {
		return
	}
	o := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}, Option: opts}
	o.SetUDPSize(ednsSize)
	if reqOPT.Do() {
		o.SetDo()
	}
	resp.Extra = append(resp.Extra, o)
}

// udpSize returns the largest UDP response req's sender takes from us.
func udpSize(req *dns.Msg) int {
	if opt := req.IsEdns0(); opt != nil {
		return min(max(int(opt.UDPSize()), dns.MinMsgSize), ednsSize)
	}
	return dns.MinMsgSize
}

// addrOf returns the IP address of a socket address, IPv4 unmapped, or
// the zero Addr.
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr().Unmap()
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
