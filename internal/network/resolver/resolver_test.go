package resolver

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/hutch-sandbox/hutch/internal/network/policy"

	"github.com/hutch-sandbox/hutch/internal/syncbuf"
)

// Everything here runs on 127.0.0.1: a test upstream serving the zone
// below, the resolver in front of it, and miekg/dns clients.

var zone = func() map[string][]dns.RR {
	recs := []string{
		"example.test. 300 IN A 203.0.113.10",
		"example.test. 300 IN AAAA 2001:db8::10",
		"www.example.test. 10 IN A 203.0.113.11",
		"long.example.test. 86400 IN A 203.0.113.12",
		"cdn.example.test. 600 IN CNAME edge.cdn.test.",
		"edge.cdn.test. 120 IN A 203.0.113.20",
		`txt.example.test. 300 IN TXT "hello"`,
		"mx.example.test. 300 IN MX 10 mail.example.test.",
		"api.good.test. 300 IN A 203.0.113.30",
		"good.test. 300 IN A 203.0.113.31",
		"bad.test. 300 IN A 203.0.113.40",
		"x.bad.test. 300 IN A 203.0.113.41",
		"other.test. 300 IN A 203.0.113.50",
		"10.113.0.203.in-addr.arpa. 300 IN PTR example.test.",
	}
	// big.test has more addresses than fit in 1232 bytes: over UDP the
	// answer is truncated and has to be fetched again over TCP.
	for i := 1; i <= 100; i++ {
		recs = append(recs, fmt.Sprintf("big.test. 60 IN A 198.51.100.%d", i))
	}
	// huge.test has more addresses than one answer may open.
	for i := range 300 {
		recs = append(recs, fmt.Sprintf("huge.test. 60 IN A 198.18.%d.%d", i/256, i%256))
	}
	z := map[string][]dns.RR{}
	for _, s := range recs {
		rr, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		z[rr.Header().Name] = append(z[rr.Header().Name], rr)
	}
	return z
}()

var soa, _ = dns.NewRR("test. 300 IN SOA ns.test. admin.test. 1 3600 600 86400 300")

// A testUpstream is an upstream DNS server serving zone over UDP and TCP
// on one port, and counting the queries it gets.
type testUpstream struct {
	addr string

	mu      sync.Mutex
	queries []upQuery
	rcode   int           // answer every query with this rcode, if not 0
	hold    chan struct{} // if not nil, wait for it to be closed before answering
}

type upQuery struct {
	name, net string
	qtype     uint16
}

func startUpstream(t *testing.T) *testUpstream {
	t.Helper()
	u := &testUpstream{}
	pc, ln := listenPair(t)
	u.addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: ln, Handler: u}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	return u
}

func (u *testUpstream) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	q := req.Question[0]
	u.mu.Lock()
	u.queries = append(u.queries, upQuery{canonical(q.Name), w.RemoteAddr().Network(), q.Qtype})
	rcode, hold := u.rcode, u.hold
	u.mu.Unlock()
	if hold != nil {
		<-hold
	}
	if strings.HasSuffix(strings.ToLower(q.Name), ".never.test.") {
		return // a name whose servers never answer
	}

	resp := new(dns.Msg).SetReply(req)
	resp.RecursionAvailable = true
	if rcode != 0 {
		resp.Rcode = rcode
		w.WriteMsg(resp)
		return
	}
	name := strings.ToLower(q.Name)
	if name == "filtered.example.test." {
		resp.Rcode = dns.RcodeNameError
		resp.SetEdns0(ednsSize, false)
		opt := resp.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeFiltered})
		w.WriteMsg(resp)
		return
	}
	if _, ok := zone[name]; !ok {
		resp.Rcode = dns.RcodeNameError
	}
	for hops := 0; hops < 8; hops++ {
		var next string
		for _, rr := range zone[name] {
			if rr.Header().Rrtype == q.Qtype {
				resp.Answer = append(resp.Answer, dns.Copy(rr))
			} else if c, ok := rr.(*dns.CNAME); ok {
				resp.Answer = append(resp.Answer, dns.Copy(rr))
				next = c.Target
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	if len(resp.Answer) == 0 {
		resp.Ns = []dns.RR{soa}
	}
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		resp.SetEdns0(opt.UDPSize(), false)
		size = int(opt.UDPSize())
	}
	if w.RemoteAddr().Network() == "udp" {
		resp.Truncate(size)
	} else {
		resp.Truncate(dns.MaxMsgSize)
	}
	w.WriteMsg(resp)
}

// count returns how many queries for name the upstream got, over net
// ("" for either).
func (u *testUpstream) count(name, net string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, q := range u.queries {
		if q.name == canonical(name) && (net == "" || q.net == net) {
			n++
		}
	}
	return n
}

// fail makes the upstream answer every query with rcode.
func (u *testUpstream) fail(rcode int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.rcode = rcode
}

// holdUntil makes the upstream wait for release to be closed before it
// answers.
func (u *testUpstream) holdUntil(release chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.hold = release
}

func (u *testUpstream) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.queries = nil
}

// listenPair listens on UDP and TCP on the same port of 127.0.0.1.
func listenPair(t *testing.T) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			continue // the port is taken over TCP: try another
		}
		return pc, ln
	}
	t.Fatal("no port free over both UDP and TCP")
	return nil, nil
}

// A sandboxes is the Policy of the tests: the sandbox at 127.0.0.1 has
// the policy set last; nil makes 127.0.0.1 no sandbox. With loopback,
// every address of 127.0.0.0/8 is a sandbox of that policy.
type sandboxes struct {
	mu       sync.Mutex
	p        *policy.Egress
	loopback bool
}

func (s *sandboxes) set(p *policy.Egress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p = p
}

func (s *sandboxes) policy(client netip.Addr) (*policy.Egress, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if client != netip.MustParseAddr("127.0.0.1") && !(s.loopback && client.IsLoopback()) {
		return nil, false
	}
	return s.p, s.p != nil
}

// answerCall is one call of OnAnswer.
type answerCall struct {
	Client string
	Name   string
	Addrs  []string
	TTL    time.Duration
}

// answerLog records the calls of OnAnswer. Each call sleeps first: had
// the resolver sent its answer before the call, the client would see the
// answer before the call is recorded.
type answerLog struct {
	mu    sync.Mutex
	calls []answerCall
}

func (l *answerLog) onAnswer(client netip.Addr, name string, addrs []netip.Addr, ttl time.Duration) {
	time.Sleep(20 * time.Millisecond)
	c := answerCall{Client: client.String(), Name: name, TTL: ttl}
	for _, a := range addrs {
		c.Addrs = append(c.Addrs, a.String())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

func (l *answerLog) take() []answerCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

// testResolver is a Resolver serving on 127.0.0.1.
type testResolver struct {
	*Resolver
	addr      string
	sandboxes *sandboxes
	answers   *answerLog
	logs      *syncbuf.Buffer
}

// startResolver starts a resolver forwarding to upstream; configure, if
// not nil, changes it before it serves.
func startResolver(t *testing.T, upstream []string, configure func(*Resolver)) *testResolver {
	t.Helper()
	tr := &testResolver{sandboxes: &sandboxes{}, answers: &answerLog{}, logs: &syncbuf.Buffer{}}
	r, err := New(Options{
		Upstream: upstream,
		Policy:   tr.sandboxes.policy,
		OnAnswer: tr.answers.onAnswer,
		Logger:   slog.New(slog.NewTextHandler(tr.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(r)
	}
	tr.Resolver = r
	pc, ln := listenPair(t)
	tr.addr = pc.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its context ended")
		}
		if t.Failed() {
			t.Logf("resolver logs:\n%s", tr.logs)
		}
	})
	return tr
}

func query(name string, qtype uint16, edns bool) *dns.Msg {
	m := new(dns.Msg).SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(ednsSize, false)
	}
	return m
}

func exchange(t *testing.T, addr, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	resp, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", network, m.Question[0].String(), err)
	}
	return resp
}

// rrs returns records as text, fields separated by one space.
func rrs(records []dns.RR) []string {
	var s []string
	for _, rr := range records {
		s = append(s, strings.Join(strings.Fields(rr.String()), " "))
	}
	return s
}

// ede returns the info code of the first Extended DNS Error of m, or -1.
func ede(m *dns.Msg) int {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				return int(e.InfoCode)
			}
		}
	}
	return -1
}

func mustPolicy(internet bool, allowOut, denyOut []string) *policy.Egress {
	p, err := policy.Parse(internet, allowOut, denyOut)
	if err != nil {
		panic(err)
	}
	return p
}

func TestResolve(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, nil)

	var (
		open       = mustPolicy(true, nil, nil)
		denyList   = mustPolicy(true, nil, []string{"bad.test", "*.bad.test"})
		allowList  = mustPolicy(true, []string{"example.test"}, []string{"0.0.0.0/0"})
		wildAllow  = mustPolicy(true, []string{"*.good.test", "cdn.example.test"}, []string{"0.0.0.0/0"})
		underAllow = mustPolicy(true, []string{"*.example.test"}, []string{"0.0.0.0/0"})
		noInternet = mustPolicy(false, []string{"example.test"}, nil)
	)
	const (
		none    = -1 // no EDE
		blocked = int(dns.ExtendedErrorCodeBlocked)
	)
	call := func(name string, ttl time.Duration, addrs ...string) []answerCall {
		return []answerCall{{Client: "127.0.0.1", Name: name, Addrs: addrs, TTL: ttl}}
	}
	tests := []struct {
		name     string
		policy   *policy.Egress // nil: 127.0.0.1 is no sandbox
		network  string         // "udp" if empty
		qname    string
		qtype    uint16
		noEDNS   bool
		rcode    int
		answer   []string
		ede      int
		upstream int // queries the upstream gets
		calls    []answerCall
	}{
		{
			name: "open: A", policy: open, qname: "example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"example.test. 300 IN A 203.0.113.10"}, ede: none, upstream: 1,
			calls: call("example.test", 300*time.Second, "203.0.113.10"),
		},
		{
			name: "open: the client's casing kept, the policy's name reported", policy: open, qname: "ExAmple.TEST.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"example.test. 300 IN A 203.0.113.10"}, ede: none, upstream: 1,
			calls: call("example.test", 300*time.Second, "203.0.113.10"),
		},
		{
			name: "open: CNAME chain reported under the question's name", policy: open, qname: "cdn.example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, ede: none, upstream: 1,
			answer: []string{"cdn.example.test. 120 IN CNAME edge.cdn.test.", "edge.cdn.test. 120 IN A 203.0.113.20"},
			calls:  call("cdn.example.test", 120*time.Second, "203.0.113.20"),
		},
		{
			name: "open: short TTL kept, the firewall's raised to 30 s", policy: open, qname: "www.example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"www.example.test. 10 IN A 203.0.113.11"}, ede: none, upstream: 1,
			calls: call("www.example.test", 30*time.Second, "203.0.113.11"),
		},
		{
			name: "open: long TTL capped at 1 h", policy: open, qname: "long.example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"long.example.test. 3600 IN A 203.0.113.12"}, ede: none, upstream: 1,
			calls: call("long.example.test", time.Hour, "203.0.113.12"),
		},
		{
			name: "open: TXT forwarded", policy: open, qname: "txt.example.test.", qtype: dns.TypeTXT,
			rcode: dns.RcodeSuccess, answer: []string{`txt.example.test. 300 IN TXT "hello"`}, ede: none, upstream: 1,
		},
		{
			name: "open: MX forwarded", policy: open, qname: "mx.example.test.", qtype: dns.TypeMX,
			rcode: dns.RcodeSuccess, answer: []string{"mx.example.test. 300 IN MX 10 mail.example.test."}, ede: none, upstream: 1,
		},
		{
			name: "open: CNAME query forwarded, its target's address not reported", policy: open, qname: "cdn.example.test.", qtype: dns.TypeCNAME,
			rcode: dns.RcodeSuccess, answer: []string{"cdn.example.test. 600 IN CNAME edge.cdn.test."}, ede: none, upstream: 1,
		},
		{
			name: "open: the upstream's NXDOMAIN", policy: open, qname: "nope.example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: none, upstream: 1,
		},
		{
			name: "open: the upstream's EDE passed on", policy: open, qname: "filtered.example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: int(dns.ExtendedErrorCodeFiltered), upstream: 1,
		},
		{
			name: "open: AAAA answered empty, not forwarded", policy: open, qname: "example.test.", qtype: dns.TypeAAAA,
			rcode: dns.RcodeSuccess, ede: none, upstream: 0,
		},
		{
			name: "open: ANY answered by RFC 8482 HINFO, not forwarded", policy: open, qname: "example.test.", qtype: dns.TypeANY,
			rcode: dns.RcodeSuccess, answer: []string{`example.test. 3600 IN HINFO "RFC8482" ""`}, ede: none, upstream: 0,
		},
		{
			name: "open: PTR refused", policy: open, qname: "10.113.0.203.in-addr.arpa.", qtype: dns.TypePTR,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "open: other types in the reverse tree refused", policy: open, qname: "10.113.0.203.in-addr.arpa.", qtype: dns.TypeCNAME,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "open: over TCP", policy: open, network: "tcp", qname: "example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"example.test. 300 IN A 203.0.113.10"}, ede: none, upstream: 1,
			calls: call("example.test", 300*time.Second, "203.0.113.10"),
		},
		{
			name: "open: without EDNS", policy: open, noEDNS: true, qname: "example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"example.test. 300 IN A 203.0.113.10"}, ede: none, upstream: 1,
			calls: call("example.test", 300*time.Second, "203.0.113.10"),
		},
		{
			name: "deny list: denied name", policy: denyList, qname: "bad.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "deny list: denied name, any case", policy: denyList, qname: "BAD.Test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "deny list: wildcard", policy: denyList, qname: "x.bad.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "deny list: denied name, other type", policy: denyList, qname: "bad.test.", qtype: dns.TypeTXT,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "deny list: denied name, AAAA", policy: denyList, qname: "bad.test.", qtype: dns.TypeAAAA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "deny list: denied name, ANY", policy: denyList, qname: "bad.test.", qtype: dns.TypeANY,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "deny list: denied name without EDNS: no EDE", policy: denyList, noEDNS: true, qname: "bad.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: none, upstream: 0,
		},
		{
			name: "deny list: denied name over TCP", policy: denyList, network: "tcp", qname: "bad.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "deny list: other name", policy: denyList, qname: "example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"example.test. 300 IN A 203.0.113.10"}, ede: none, upstream: 1,
			calls: call("example.test", 300*time.Second, "203.0.113.10"),
		},
		{
			name: "allow list: allowed name", policy: allowList, qname: "example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"example.test. 300 IN A 203.0.113.10"}, ede: none, upstream: 1,
			calls: call("example.test", 300*time.Second, "203.0.113.10"),
		},
		{
			name: "allow list: a name rule does not cover the names below", policy: allowList, qname: "www.example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "allow list: other name", policy: allowList, qname: "other.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "allow list: other name, TXT", policy: allowList, qname: "txt.example.test.", qtype: dns.TypeTXT,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "wildcard allow list: a name below", policy: wildAllow, qname: "api.good.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, answer: []string{"api.good.test. 300 IN A 203.0.113.30"}, ede: none, upstream: 1,
			calls: call("api.good.test", 300*time.Second, "203.0.113.30"),
		},
		{
			name: "wildcard allow list: not the base name", policy: wildAllow, qname: "good.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "wildcard allow list: a CNAME's target need not be allowed", policy: wildAllow, qname: "cdn.example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeSuccess, ede: none, upstream: 1,
			answer: []string{"cdn.example.test. 120 IN CNAME edge.cdn.test.", "edge.cdn.test. 120 IN A 203.0.113.20"},
			calls:  call("cdn.example.test", 120*time.Second, "203.0.113.20"),
		},
		{
			name: "wildcard allow list: an escaped dot is no label boundary", policy: underAllow, qname: `evil\.example.test.`, qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "no internet: even an allowed name", policy: noInternet, qname: "example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "no internet: AAAA", policy: noInternet, qname: "example.test.", qtype: dns.TypeAAAA,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "no internet: TXT over TCP", policy: noInternet, network: "tcp", qname: "txt.example.test.", qtype: dns.TypeTXT,
			rcode: dns.RcodeNameError, ede: blocked, upstream: 0,
		},
		{
			name: "no sandbox: refused", policy: nil, qname: "example.test.", qtype: dns.TypeA,
			rcode: dns.RcodeRefused, ede: int(dns.ExtendedErrorCodeProhibited), upstream: 0,
		},
		{
			name: "no sandbox: refused over TCP", policy: nil, network: "tcp", qname: "example.test.", qtype: dns.TypeAAAA,
			rcode: dns.RcodeRefused, ede: int(dns.ExtendedErrorCodeProhibited), upstream: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.sandboxes.set(tt.policy)
			up.reset()
			r.answers.take()
			network := tt.network
			if network == "" {
				network = "udp"
			}
			m := query(tt.qname, tt.qtype, !tt.noEDNS)
			resp := exchange(t, r.addr, network, m)
			// Taken at once: OnAnswer must have returned before the
			// answer was sent.
			calls := r.answers.take()

			if resp.Id != m.Id || len(resp.Question) != 1 || resp.Question[0] != m.Question[0] {
				t.Errorf("answer to id %d %v, want to id %d %v", resp.Id, resp.Question, m.Id, m.Question)
			}
			if resp.Rcode != tt.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.rcode])
			}
			if diff := cmp.Diff(tt.answer, rrs(resp.Answer)); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if got := ede(resp); got != tt.ede {
				t.Errorf("EDE %d, want %d", got, tt.ede)
			}
			if (resp.IsEdns0() != nil) == tt.noEDNS {
				t.Errorf("answer has OPT %v, query had %v", resp.IsEdns0() != nil, !tt.noEDNS)
			}
			if got := up.count(tt.qname, ""); got != tt.upstream {
				t.Errorf("upstream got %d queries for %s, want %d", got, tt.qname, tt.upstream)
			}
			if diff := cmp.Diff(tt.calls, calls); diff != "" {
				t.Errorf("OnAnswer calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRefusedNameIsLogged(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, nil)
	r.sandboxes.set(mustPolicy(true, nil, []string{"bad.test"}))
	exchange(t, r.addr, "udp", query("bad.test.", dns.TypeA, true))
	logs := r.logs.String()
	for _, want := range []string{"level=DEBUG", "client=127.0.0.1", "name=bad.test."} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
}

func TestTruncation(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, nil)
	r.sandboxes.set(mustPolicy(true, nil, nil))
	var all []string
	for i := 1; i <= 100; i++ {
		all = append(all, fmt.Sprintf("198.51.100.%d", i))
	}
	tests := []struct {
		name      string
		network   string
		edns      bool
		truncated bool
	}{
		// The upstream's UDP answer is truncated; the resolver gets the
		// whole over TCP, and truncates its own for the client.
		{"UDP with EDNS", "udp", true, true},
		{"UDP without EDNS", "udp", false, true},
		{"TCP", "tcp", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up.reset()
			r.answers.take()
			resp := exchange(t, r.addr, tt.network, query("big.test.", dns.TypeA, tt.edns))
			calls := r.answers.take()
			if resp.Rcode != dns.RcodeSuccess || resp.Truncated != tt.truncated {
				t.Errorf("rcode %s, truncated %v; want NOERROR, truncated %v", dns.RcodeToString[resp.Rcode], resp.Truncated, tt.truncated)
			}
			if !tt.truncated && len(resp.Answer) != 100 {
				t.Errorf("%d records, want 100", len(resp.Answer))
			}
			if tt.truncated && len(resp.Answer) >= 100 {
				t.Errorf("%d records in a truncated answer", len(resp.Answer))
			}
			if u, c := up.count("big.test", "udp"), up.count("big.test", "tcp"); u != 1 || c != 1 {
				t.Errorf("upstream got %d UDP and %d TCP queries, want 1 and 1", u, c)
			}
			// The firewall learns every address, also those the client's
			// truncated answer could not hold.
			want := []answerCall{{Client: "127.0.0.1", Name: "big.test", Addrs: all, TTL: time.Minute}}
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("OnAnswer calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAnswerAddressesBounded: an answer opens at most maxAnswerAddrs
// addresses, and gives the client no others.
func TestAnswerAddressesBounded(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, nil)
	r.sandboxes.set(mustPolicy(true, nil, nil))
	resp := exchange(t, r.addr, "tcp", query("huge.test.", dns.TypeA, true))
	var got []string
	for _, rr := range resp.Answer {
		got = append(got, rr.(*dns.A).A.String())
	}
	var want []string
	for i := range maxAnswerAddrs {
		want = append(want, fmt.Sprintf("198.18.%d.%d", i/256, i%256))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("addresses in the answer (-want +got):\n%s", diff)
	}
	calls := r.answers.take()
	if len(calls) != 1 {
		t.Fatalf("OnAnswer calls %v, want one", calls)
	}
	if diff := cmp.Diff(want, calls[0].Addrs); diff != "" {
		t.Errorf("addresses opened (-want +got):\n%s", diff)
	}
}

// closedPort returns an address of 127.0.0.1 nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	pc, ln := listenPair(t)
	addr := pc.LocalAddr().String()
	pc.Close()
	ln.Close()
	return addr
}

// silentUpstream returns the address of a UDP socket that reads queries
// and never answers, and a channel that gets a value per query.
func silentUpstream(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	got := make(chan struct{}, 100)
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got <- struct{}{}
		}
	}()
	return pc.LocalAddr().String(), got
}

func TestUpstreamFailure(t *testing.T) {
	good := startUpstream(t)
	failing := startUpstream(t)
	failing.fail(dns.RcodeServerFailure)
	refusing := startUpstream(t)
	refusing.fail(dns.RcodeRefused)
	silent, _ := silentUpstream(t)
	down := closedPort(t)

	tests := []struct {
		name     string
		upstream []string
		rcode    int
	}{
		{"down", []string{down}, dns.RcodeServerFailure},
		{"silent", []string{silent}, dns.RcodeServerFailure},
		{"SERVFAIL", []string{failing.addr}, dns.RcodeServerFailure},
		{"REFUSED", []string{refusing.addr}, dns.RcodeServerFailure},
		{"all fail", []string{down, failing.addr, silent}, dns.RcodeServerFailure},
		{"first down, second answers", []string{down, good.addr}, dns.RcodeSuccess},
		{"first silent, second answers", []string{silent, good.addr}, dns.RcodeSuccess},
		{"first SERVFAIL, second answers", []string{failing.addr, good.addr}, dns.RcodeSuccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startResolver(t, tt.upstream, func(r *Resolver) { r.timeout = 200 * time.Millisecond })
			r.sandboxes.set(mustPolicy(true, nil, nil))
			start := time.Now()
			resp := exchange(t, r.addr, "udp", query("example.test.", dns.TypeA, true))
			if resp.Rcode != tt.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.rcode])
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("answered after %v", d)
			}
			calls := r.answers.take()
			if tt.rcode == dns.RcodeServerFailure {
				if got := ede(resp); got != int(dns.ExtendedErrorCodeNetworkError) {
					t.Errorf("EDE %d, want %d", got, dns.ExtendedErrorCodeNetworkError)
				}
				if len(calls) != 0 {
					t.Errorf("OnAnswer called for a failure: %v", calls)
				}
			} else if len(calls) != 1 {
				t.Errorf("OnAnswer calls %v, want one", calls)
			}
		})
	}
}

// TestRejects covers what a resolver does not answer: malformed queries,
// other opcodes, meta query types.
func TestRejects(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, nil)
	r.sandboxes.set(mustPolicy(true, nil, nil))

	twoQuestions := query("example.test.", dns.TypeA, false)
	twoQuestions.Question = append(twoQuestions.Question, dns.Question{Name: "other.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	noQuestion := query("example.test.", dns.TypeA, false)
	noQuestion.Question = nil
	withOpcode := func(op int) *dns.Msg {
		m := query("example.test.", dns.TypeA, false)
		m.Opcode = op
		return m
	}
	badVersion := query("example.test.", dns.TypeA, true)
	badVersion.IsEdns0().SetVersion(1)
	chaos := query("version.bind.", dns.TypeTXT, false)
	chaos.Question[0].Qclass = dns.ClassCHAOS

	tests := []struct {
		name    string
		network string
		m       *dns.Msg
		rcode   int
	}{
		{"two questions", "udp", twoQuestions, dns.RcodeFormatError},
		{"two questions over TCP", "tcp", twoQuestions, dns.RcodeFormatError},
		{"no question", "udp", noQuestion, dns.RcodeFormatError},
		{"NOTIFY", "udp", withOpcode(dns.OpcodeNotify), dns.RcodeNotImplemented},
		{"UPDATE", "udp", withOpcode(dns.OpcodeUpdate), dns.RcodeNotImplemented},
		{"STATUS", "udp", withOpcode(dns.OpcodeStatus), dns.RcodeNotImplemented},
		{"IQUERY", "tcp", withOpcode(dns.OpcodeIQuery), dns.RcodeNotImplemented},
		{"EDNS version 1", "udp", badVersion, dns.RcodeBadVers},
		{"CHAOS class", "udp", chaos, dns.RcodeNotImplemented},
		{"AXFR", "tcp", query("example.test.", dns.TypeAXFR, false), dns.RcodeNotImplemented},
		{"IXFR", "udp", query("example.test.", dns.TypeIXFR, false), dns.RcodeNotImplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up.reset()
			resp := exchange(t, r.addr, tt.network, tt.m)
			if resp.Id != tt.m.Id {
				t.Errorf("answer to id %d, want %d", resp.Id, tt.m.Id)
			}
			if resp.Rcode != tt.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[tt.rcode])
			}
			up.mu.Lock()
			n := len(up.queries)
			up.mu.Unlock()
			if n != 0 {
				t.Errorf("upstream got %d queries", n)
			}
		})
	}
}

// TestMalformed throws garbage at the resolver, which must neither crash
// nor stop answering.
func TestMalformed(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, nil)
	r.sandboxes.set(mustPolicy(true, nil, nil))

	valid, err := query("example.test.", dns.TypeA, true).Pack()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var packets [][]byte
	for n := range 12 { // too short for a header
		packets = append(packets, valid[:n])
	}
	for range 300 { // random bytes
		p := make([]byte, rng.IntN(600))
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		packets = append(packets, p)
	}
	for range 300 { // a valid query with random bytes changed or cut short
		p := slices.Clone(valid)
		for range 1 + rng.IntN(4) {
			p[rng.IntN(len(p))] = byte(rng.Uint32())
		}
		packets = append(packets, p[:rng.IntN(len(p)+1)])
	}
	// A name that points to itself, and a response (QR set).
	loop := slices.Clone(valid[:12])
	binary.BigEndian.PutUint16(loop[4:], 1)
	loop = append(loop, 0xc0, 12, 0, 1, 0, 1)
	response := slices.Clone(valid)
	response[2] |= 0x80
	packets = append(packets, loop, response)

	udp, err := net.Dial("udp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	for _, p := range packets {
		udp.Write(p)
	}
	for _, p := range packets[:100] {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		// Length-prefixed garbage, then garbage with a wrong length.
		c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(p))))
		c.Write(p)
		c.Write([]byte{0xff, 0xff, 1, 2, 3})
		c.Close()
	}

	for _, network := range []string{"udp", "tcp"} {
		resp := exchange(t, r.addr, network, query("example.test.", dns.TypeA, true))
		if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
			t.Errorf("%s after garbage: %v", network, resp)
		}
	}
	if logs := r.logs.String(); strings.Contains(logs, "panic") {
		t.Errorf("a handler panicked:\n%s", logs)
	}
}

// FuzzAnswer checks that any query that parses gets an answer that packs,
// to its own id, without a panic. The upstream is down: forwarded queries
// fail fast, and nothing leaves the host.
func FuzzAnswer(f *testing.F) {
	for _, m := range []*dns.Msg{
		query("example.test.", dns.TypeA, true),
		query("bad.test.", dns.TypeAAAA, false),
		query("1.0.0.127.in-addr.arpa.", dns.TypePTR, true),
		query(`a\000\.b.example.test.`, dns.TypeANY, true),
	} {
		p, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(p)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	down := pc.LocalAddr().String()
	pc.Close()
	r, err := New(Options{
		Upstream: []string{down},
		Policy: func(netip.Addr) (*policy.Egress, bool) {
			return mustPolicy(true, []string{"*.example.test"}, []string{"bad.test"}), true
		},
		OnAnswer: func(netip.Addr, string, []netip.Addr, time.Duration) {},
	})
	if err != nil {
		f.Fatal(err)
	}
	r.timeout = 50 * time.Millisecond
	ups := r.newUpstreams()
	f.Cleanup(ups.close)
	client := netip.MustParseAddr("127.0.0.1")
	f.Fuzz(func(t *testing.T, data []byte) {
		req := new(dns.Msg)
		if req.Unpack(data) != nil {
			return
		}
		resp := r.answer(context.Background(), ups, client, req)
		if resp.Id != req.Id || !resp.Response {
			t.Errorf("answer to id %d (response %v), want %d", resp.Id, resp.Response, req.Id)
		}
		resp.Truncate(udpSize(req))
		if _, err := resp.Pack(); err != nil {
			t.Errorf("answer does not pack: %v\nquery: %v\nanswer: %v", err, req, resp)
		}
	})
}

func TestHandlerPanic(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, func(r *Resolver) {
		r.onAnswer = func(netip.Addr, string, []netip.Addr, time.Duration) { panic("OnAnswer broke") }
	})
	r.sandboxes.set(mustPolicy(true, nil, nil))
	resp := exchange(t, r.addr, "udp", query("example.test.", dns.TypeA, true))
	if resp.Rcode != dns.RcodeServerFailure || len(resp.Answer) != 0 {
		t.Errorf("answer after a panic: %v", resp)
	}
	if !strings.Contains(r.logs.String(), "OnAnswer broke") {
		t.Errorf("panic not logged:\n%s", r.logs)
	}
	// Still serving.
	resp = exchange(t, r.addr, "tcp", query("example.test.", dns.TypeAAAA, true))
	if resp.Rcode != dns.RcodeSuccess {
		t.Errorf("answer after a panic: %v", resp)
	}
}

// TestOverload checks that a sandbox gets no more than its share of
// forwarded queries, and that local answers go on meanwhile.
func TestOverload(t *testing.T) {
	up := startUpstream(t)
	hold := make(chan struct{})
	up.holdUntil(hold)
	r := startResolver(t, []string{up.addr}, func(r *Resolver) { r.forwards = newLimiter(10, 2) })
	r.sandboxes.set(mustPolicy(true, nil, nil))
	released := false
	release := func() {
		if !released {
			close(hold)
			released = true
		}
	}
	defer release()

	var wg sync.WaitGroup
	results := make(chan int, 2)
	for range 2 {
		wg.Go(func() {
			c := &dns.Client{Timeout: 5 * time.Second}
			resp, _, err := c.Exchange(query("example.test.", dns.TypeA, true), r.addr)
			if err != nil {
				t.Error(err)
				return
			}
			results <- resp.Rcode
		})
	}
	// Wait for both to be held at the upstream.
	for deadline := time.Now().Add(5 * time.Second); up.count("example.test", "") < 2; {
		if time.Now().After(deadline) {
			t.Fatal("queries did not reach the upstream")
		}
		time.Sleep(5 * time.Millisecond)
	}

	resp := exchange(t, r.addr, "udp", query("txt.example.test.", dns.TypeTXT, true))
	if resp.Rcode != dns.RcodeServerFailure || ede(resp) != int(dns.ExtendedErrorCodeOther) {
		t.Errorf("third forwarded query: rcode %s, EDE %d; want SERVFAIL, EDE 0", dns.RcodeToString[resp.Rcode], ede(resp))
	}
	if n := up.count("txt.example.test", ""); n != 0 {
		t.Errorf("upstream got %d queries over the limit", n)
	}
	resp = exchange(t, r.addr, "udp", query("example.test.", dns.TypeAAAA, true))
	if resp.Rcode != dns.RcodeSuccess {
		t.Errorf("local answer while the limit is reached: %s", dns.RcodeToString[resp.Rcode])
	}

	release()
	wg.Wait()
	close(results)
	for rcode := range results {
		if rcode != dns.RcodeSuccess {
			t.Errorf("held query: %s", dns.RcodeToString[rcode])
		}
	}
	resp = exchange(t, r.addr, "udp", query("txt.example.test.", dns.TypeTXT, true))
	if resp.Rcode != dns.RcodeSuccess {
		t.Errorf("after the limit: %s", dns.RcodeToString[resp.Rcode])
	}
}

func TestTCPConnLimit(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, func(r *Resolver) { r.conns = newLimiter(10, 1) })
	r.sandboxes.set(mustPolicy(true, nil, nil))

	first, err := dns.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	// A second connection from the same client is closed at once.
	second, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := second.Read(make([]byte, 1)); err != io.EOF {
		var ne net.Error
		if !errors.As(err, &ne) || ne.Timeout() {
			t.Errorf("second connection: read %v, want it closed", err)
		}
	}
	second.Close()

	// The first still serves.
	c := &dns.Client{Net: "tcp", Timeout: 5 * time.Second}
	m := query("example.test.", dns.TypeA, true)
	if resp, _, err := c.ExchangeWithConn(m, first); err != nil || resp.Rcode != dns.RcodeSuccess {
		t.Errorf("first connection: %v, %v", resp, err)
	}
	first.Close()

	// Its slot is given back when it closes.
	for deadline := time.Now().Add(5 * time.Second); ; {
		resp, _, err := c.Exchange(m, r.addr)
		if err == nil && resp.Rcode == dns.RcodeSuccess {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new connection after the first closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestParallel runs many queries at once, for the race detector.
func TestParallel(t *testing.T) {
	up := startUpstream(t)
	r := startResolver(t, []string{up.addr}, nil)
	r.sandboxes.set(mustPolicy(true, nil, []string{"bad.test"}))
	names := []string{"example.test.", "bad.test.", "cdn.example.test.", "big.test.", "txt.example.test."}
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			network := []string{"udp", "tcp"}[i%2]
			c := &dns.Client{Net: network, Timeout: 5 * time.Second}
			if _, _, err := c.Exchange(query(names[i%len(names)], dns.TypeA, i%3 != 0), r.addr); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func TestServe(t *testing.T) {
	r, err := New(Options{Upstream: []string{"127.0.0.1:53"}, Policy: (&sandboxes{}).policy})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Serve(context.Background(), nil, nil); err == nil {
		t.Error("Serve without sockets: no error")
	}

	// Each socket alone; the query is from no sandbox, so nothing is
	// forwarded.
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			pc, ln := listenPair(t)
			addr := pc.LocalAddr().String()
			if network == "udp" {
				ln.Close()
				ln = nil
			} else {
				pc.Close()
				pc = nil
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Serve(ctx, pc, ln) }()
			resp := exchange(t, addr, network, query("example.test.", dns.TypeA, false))
			if resp.Rcode != dns.RcodeRefused {
				t.Errorf("rcode %s, want REFUSED", dns.RcodeToString[resp.Rcode])
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
}

// TestShutdown checks that Serve returns at once when its context ends,
// even with a query waiting for an upstream that does not answer, and that
// it closes its sockets.
func TestShutdown(t *testing.T) {
	silent, got := silentUpstream(t)
	sb := &sandboxes{}
	sb.set(mustPolicy(true, nil, nil))
	r, err := New(Options{Upstream: []string{silent}, Policy: sb.policy})
	if err != nil {
		t.Fatal(err)
	}
	r.timeout = time.Minute
	pc, ln := listenPair(t)
	addr := pc.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, pc, ln) }()

	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, _ := query("example.test.", dns.TypeA, true).Pack()
	c.Write(p)
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("query not forwarded")
	}

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Serve returned after %v", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("UDP socket not closed: %v", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("TCP listener not closed: %v", err)
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withServers := write("servers", "search example.test\nnameserver 192.0.2.53\nnameserver 2001:db8::53\noptions ndots:1\n")
	without := write("none", "search example.test\n")
	pol := (&sandboxes{}).policy

	tests := []struct {
		name       string
		opts       Options
		resolvConf string
		want       []string // nil: New fails
	}{
		{"upstream given", Options{Upstream: []string{"127.0.0.1:5353", "[::1]:53"}, Policy: pol}, "", []string{"127.0.0.1:5353", "[::1]:53"}},
		{"from resolv.conf", Options{Policy: pol}, withServers, []string{"192.0.2.53:53", "[2001:db8::53]:53"}},
		{"resolv.conf without nameserver", Options{Policy: pol}, without, nil},
		{"no resolv.conf", Options{Policy: pol}, filepath.Join(dir, "missing"), nil},
		{"no policy", Options{Upstream: []string{"127.0.0.1:53"}}, "", nil},
		{"upstream without port", Options{Upstream: []string{"127.0.0.1"}, Policy: pol}, "", nil},
		{"upstream by name", Options{Upstream: []string{"dns.example.test:53"}, Policy: pol}, "", nil},
		{"upstream port 0", Options{Upstream: []string{"127.0.0.1:0"}, Policy: pol}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.ResolvConf = tt.resolvConf
			if tt.resolvConf == "" {
				tt.opts.ResolvConf = filepath.Join(dir, "missing")
			}
			r, err := New(tt.opts)
			if (err == nil) != (tt.want != nil) {
				t.Fatalf("New: %v, want error %v", err, tt.want == nil)
			}
			if err == nil {
				if diff := cmp.Diff(tt.want, r.upstream); diff != "" {
					t.Errorf("upstream (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestAddresses(t *testing.T) {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tests := []struct {
		name   string
		qname  string
		answer []dns.RR
		addrs  []string
		ttl    time.Duration
	}{
		{"none", "a.test.", nil, nil, minTTL},
		{"one", "a.test.", []dns.RR{rr("a.test. 300 IN A 192.0.2.1")}, []string{"192.0.2.1"}, 300 * time.Second},
		{"smallest TTL", "a.test.", []dns.RR{rr("a.test. 300 IN A 192.0.2.1"), rr("a.test. 100 IN A 192.0.2.2")}, []string{"192.0.2.1", "192.0.2.2"}, 100 * time.Second},
		{"duplicates once", "a.test.", []dns.RR{rr("a.test. 300 IN A 192.0.2.1"), rr("a.test. 300 IN A 192.0.2.1")}, []string{"192.0.2.1"}, 300 * time.Second},
		{"any case", "A.Test.", []dns.RR{rr("a.TEST. 300 IN A 192.0.2.1")}, []string{"192.0.2.1"}, 300 * time.Second},
		{"chain out of order", "a.test.", []dns.RR{
			rr("c.test. 60 IN A 192.0.2.3"), rr("b.test. 300 IN CNAME c.test."), rr("a.test. 300 IN CNAME b.test."),
		}, []string{"192.0.2.3"}, 60 * time.Second},
		{"records off the chain left out", "a.test.", []dns.RR{
			rr("a.test. 300 IN CNAME b.test."), rr("b.test. 300 IN A 192.0.2.2"), rr("evil.test. 5 IN A 192.0.2.66"),
		}, []string{"192.0.2.2"}, 300 * time.Second},
		{"CNAME loop", "a.test.", []dns.RR{rr("a.test. 300 IN CNAME b.test."), rr("b.test. 300 IN CNAME a.test.")}, nil, minTTL},
		{"AAAA ignored", "a.test.", []dns.RR{rr("a.test. 300 IN AAAA 2001:db8::1"), rr("a.test. 300 IN A 192.0.2.1")}, []string{"192.0.2.1"}, 300 * time.Second},
		{"TTL 0 raised", "a.test.", []dns.RR{rr("a.test. 0 IN A 192.0.2.1")}, []string{"192.0.2.1"}, minTTL},
		{"TTL a day capped", "a.test.", []dns.RR{rr("a.test. 86400 IN A 192.0.2.1")}, []string{"192.0.2.1"}, maxTTL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addrs, ttl := addresses(tt.qname, tt.answer)
			var got []string
			for _, a := range addrs {
				got = append(got, a.String())
			}
			if diff := cmp.Diff(tt.addrs, got); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
			if ttl != tt.ttl {
				t.Errorf("ttl %v, want %v", ttl, tt.ttl)
			}
		})
	}
}

func TestLimiter(t *testing.T) {
	a, b, c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	l := newLimiter(3, 2)
	steps := []struct {
		client  netip.Addr
		release bool
		want    bool
	}{
		{a, false, true},
		{a, false, true},
		{a, false, false}, // a's share
		{b, false, true},
		{c, false, false}, // all slots
		{a, true, true},
		{c, false, true},
		{a, false, false},
	}
	for i, s := range steps {
		if s.release {
			l.release(s.client)
			continue
		}
		if got := l.acquire(s.client); got != s.want {
			t.Errorf("step %d: acquire(%s) = %v, want %v", i, s.client, got, s.want)
		}
	}
}

// TestNoStarvation: sandboxes that keep as many queries in flight as they
// may, for names whose servers never answer (or TCP connections open),
// do not keep another sandbox from resolving (review R8: 17 sandboxes
// failed a victim's lookups 36 times in 50).
func TestNoStarvation(t *testing.T) {
	tests := []struct {
		name      string
		attackers int
		network   string // the attack's and the victim's
	}{
		{"one sandbox, UDP", 1, "udp"},
		{"17 sandboxes, UDP", 17, "udp"},
		{"40 sandboxes, UDP", 40, "udp"},
		{"17 sandboxes, TCP", 17, "tcp"},
		{"40 sandboxes, TCP", 40, "tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startUpstream(t)
			r := startResolver(t, []string{up.addr}, nil)
			r.sandboxes.set(mustPolicy(true, nil, nil))
			r.sandboxes.mu.Lock()
			r.sandboxes.loopback = true
			r.sandboxes.mu.Unlock()

			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			defer wg.Wait()
			defer stop()
			for i := range tt.attackers {
				src := netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)})
				if tt.network == "udp" {
					wg.Go(func() { floodUDP(ctx, t, src, r.addr) })
				} else {
					wg.Go(func() { holdTCP(ctx, t, src, r.addr) })
				}
			}
			// The attack at full strength: every attacker holds all it
			// may, the shared slots all taken if there are attackers
			// enough.
			l, perClient, reserved := r.forwards, maxForwardsPerClient, maxForwardsReserved
			if tt.network == "tcp" {
				l, perClient, reserved = r.conns, maxConnsPerClient, maxConnsReserved
			}
			want := min(tt.attackers*(perClient-reserved), l.shared)
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				l.mu.Lock()
				shared := l.sharedUsed
				l.mu.Unlock()
				if shared >= want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the attackers hold %d shared slots, want %d", shared, want)
				}
			}

			victim := &dns.Client{Net: tt.network, Timeout: 2 * time.Second, Dialer: &net.Dialer{
				LocalAddr: map[string]net.Addr{"udp": &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, "tcp": &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}[tt.network],
			}}
			failed := 0
			for range 50 {
				// Asked again once if no answer came, as stub resolvers
				// do: a datagram may be lost when the attackers' bursts
				// fill the socket's buffer.
				resp, _, err := victim.Exchange(query("example.test.", dns.TypeA, true), r.addr)
				if err != nil {
					resp, _, err = victim.Exchange(query("example.test.", dns.TypeA, true), r.addr)
				}
				if err != nil {
					t.Logf("victim: %v", err)
					failed++
				} else if resp.Rcode != dns.RcodeSuccess {
					failed++
				}
			}
			if failed > 0 {
				t.Errorf("%d of the victim's 50 lookups failed", failed)
			}
		})
	}
}

// floodUDP keeps more queries than a sandbox may have in flight going
// from src, for names nobody answers, until ctx ends: a burst every
// half second, while each query holds its slot for upstreamTimeout (2 s).
func floodUDP(ctx context.Context, t *testing.T, src netip.Addr, server string) {
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(server)))
	if err != nil {
		t.Error(err)
		return
	}
	defer c.Close()
	go func() { // replies, read so that the socket never refuses them
		buf := make([]byte, 2048)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
	// Each burst spread over 100 ms, the attackers' out of step.
	time.Sleep(rand.N(500 * time.Millisecond))
	for n := 0; ctx.Err() == nil; n++ {
		for i := range maxForwardsPerClient + 8 {
			p, _ := query(fmt.Sprintf("q%d-%d.never.test.", n, i), dns.TypeA, true).Pack()
			c.Write(p)
			if i%8 == 7 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(400 * time.Millisecond):
		}
	}
}

// holdTCP keeps more TCP connections open from src than a sandbox may
// have, until ctx ends.
func holdTCP(ctx context.Context, t *testing.T, src netip.Addr, server string) {
	d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for ctx.Err() == nil {
		for len(conns) < maxConnsPerClient+8 {
			c, err := d.DialContext(ctx, "tcp", server)
			if err != nil {
				break
			}
			conns = append(conns, c)
		}
		// Those the resolver closed are opened again.
		open := conns[:0]
		for _, c := range conns {
			c.SetReadDeadline(time.Now().Add(time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				c.Close()
				continue
			}
			open = append(open, c)
		}
		conns = open
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestReservingLimiter: each client's reserved slots are there whatever
// the others hold; the shared ones go to whoever comes first, each up to
// its own bound; never more than max in all.
func TestReservingLimiter(t *testing.T) {
	a, b, c, d, e := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"),
		netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("10.0.0.5")
	l := newReservingLimiter(7, 3, 4, 1) // 7 in all, 3 shared, 4 each, 1 reserved each
	steps := []struct {
		client  netip.Addr
		release bool
		want    bool
	}{
		{a, false, true},                                  // a's reserved
		{a, false, true},                                  // shared 1
		{a, false, true},                                  // shared 2
		{a, false, true},                                  // shared 3
		{a, false, false},                                 // a's bound
		{b, false, true},                                  // b's reserved, though the shared are taken
		{b, false, false},                                 // no shared left
		{a, true, true},                                   // a gives back a shared one
		{b, false, true},                                  // which b takes
		{c, false, true},                                  // c's reserved
		{d, false, true},                                  // d's reserved: 7 in all
		{e, false, false},                                 // e's would make 8
		{a, true, true}, {a, true, true}, {a, true, true}, // a holds none: 2 shared back
		{a, false, true},  // its reserved again
		{c, false, true},  // shared 2
		{c, false, true},  // shared 3
		{d, false, false}, // no shared left, and 7 in all
	}
	for i, s := range steps {
		if s.release {
			l.release(s.client)
			continue
		}
		if got := l.acquire(s.client); got != s.want {
			t.Errorf("step %d: acquire(%s) = %v, want %v", i, s.client, got, s.want)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	want := map[netip.Addr]int{a: 1, b: 2, c: 3, d: 1}
	if l.total != 7 || l.sharedUsed != 3 || !maps.Equal(l.clients, want) {
		t.Errorf("total %d, shared %d, clients %v; want 7, 3, %v", l.total, l.sharedUsed, l.clients, want)
	}
}
