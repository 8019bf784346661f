package network

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/hutch-sandbox/hutch/internal/network/resolver"
)

// bigZone is an upstream DNS server, on the test's own loopback, that
// answers every A query under big.test with 70 addresses and a TTL of an
// hour, each name its own: the answers of a name server an attacker runs
// for a name a sandbox may look up. last.big.test's answer holds
// 198.51.100.7, where the world's internet has a server.
func bigZone(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		resp := new(dns.Msg).SetReply(req)
		q := req.Question[0]
		name := strings.ToLower(q.Name)
		if q.Qtype == dns.TypeA && strings.HasSuffix(name, ".big.test.") {
			n++
			for i := range 70 {
				a := fmt.Sprintf("11.%d.%d.%d", n>>8&0xff, n&0xff, i+1)
				if name == "last.big.test." && i == 0 {
					a = "198.51.100.7"
				}
				rr, _ := dns.NewRR(fmt.Sprintf("%s 3600 IN A %s", q.Name, a))
				resp.Answer = append(resp.Answer, rr)
			}
		}
		w.WriteMsg(resp)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return pc.LocalAddr().String()
}

// withResolver builds the world with Hutch's resolver in front of
// upstream, wired to the manager as hutch serve wires it.
func withResolver(t *testing.T, upstream string) *world {
	t.Helper()
	const port = 15354 // the world's fake resolver has 15353
	w := newWorldWith(t, Options{ResolverPort: port})
	r, err := resolver.New(resolver.Options{Upstream: []string{upstream}, Policy: w.m.Policy, OnAnswer: w.m.Answered})
	if err != nil {
		t.Fatal(err)
	}
	var udp net.PacketConn
	inNS(t, w.host, func() {
		if udp, err = net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", port)); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Serve(ctx, udp, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// lookups asks the resolver (whatever address it is sent to) for names
// from inside the sandbox of pid, one after the other over one UDP
// socket, and returns how many got an answer.
func (w *world) lookups(pid int, names []string) int {
	w.t.Helper()
	answered := 0
	w.inSandbox(pid, func() {
		c, err := dns.Dial("udp", "192.0.2.53:53")
		if err != nil {
			w.t.Error(err)
			return
		}
		defer c.Close()
		c.UDPSize = 1232
		for _, name := range names {
			m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
			m.SetEdns0(1232, false)
			c.SetDeadline(time.Now().Add(3 * time.Second))
			if err := c.WriteMsg(m); err != nil {
				continue
			}
			for {
				resp, err := c.ReadMsg()
				if err != nil {

					break
				}

				if resp.Id == m.Id {
					if resp.Rcode == dns.RcodeSuccess && len(resp.Answer) > 0 {
						answered++
					}
					break
				}
			}
		}
	})
	return answered
}

// resolvedElements returns the addresses in the sandbox's res-<id> set,
// as the kernel has them.
func (w *world) resolvedElements(id string) []netip.Addr {
	w.t.Helper()
	var addrs []netip.Addr
	inNS(w.t, w.host, func() {
		c, err := nftables.New()
		if err != nil {
			w.t.Fatal(err)
		}
		els, err := c.GetSetElements(&nftables.Set{Table: w.m.existing().t, Name: resolvedName(id), KeyType: nftables.TypeIPAddr})
		if err != nil {
			w.t.Fatal(err)
		}
		for _, el := range els {
			if a, ok := netip.AddrFromSlice(el.Key); ok {
				addrs = append(addrs, a)
			}
		}
	})
	return addrs
}

// TestResolvedAddressesBounded: a sandbox that may look up *.big.test,
// whose name server answers every name with 70 addresses for an hour,
// keeps at most maxResolved of them open, in the kernel's set and in the
// manager's memory, and the name it looked up last still connects
// (review R6: 30 s of such lookups held 236 MiB of kernel memory).
func TestResolvedAddressesBounded(t *testing.T) {
	w := withResolver(t, bigZone(t))
	pid, addr := w.sandbox("ibig", mustPolicy(t, true, []string{"*.big.test"}, []string{"0.0.0.0/0"}))

	var names []string
	for i := range 200 { // 14000 addresses
		names = append(names, fmt.Sprintf("n%d.big.test", i))
	}
	names = append(names, "last.big.test")
	if got := w.lookups(pid, names); got != len(names) {
		t.Fatalf("%d of %d lookups answered", got, len(names))
	}

	inNS(t, w.host, func() {
		c, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		set, err := c.GetSetByName(w.m.existing().t, resolvedName("ibig"))
		if err != nil {
			t.Fatal(err)
		}
		if set.Size != resolvedSetSize {
			t.Errorf("set res-ibig has size %d, want %d", set.Size, resolvedSetSize)
		}
	})
	els := w.resolvedElements("ibig")
	if len(els) > maxResolved {
		t.Errorf("%d addresses in the kernel's set res-ibig, want at most %d", len(els), maxResolved)
	}
	if len(els) < maxResolved*3/4 {
		t.Errorf("%d addresses in the kernel's set res-ibig, want at least %d (the newest)", len(els), maxResolved*3/4)
	}
	w.m.mu.Lock()
	kept := w.m.nets["ibig"].resolved.len()
	w.m.mu.Unlock()
	if kept > maxResolved {
		t.Errorf("the manager keeps %d addresses of sandbox ibig, want at most %d", kept, maxResolved)
	}
	t.Logf("%d lookups of 70 addresses: %d in the set, %d in memory", len(names), len(els), kept)

	// The newest answers stay, the oldest made room for them.
	if !w.m.Resolved(addr.Sandbox, netip.MustParseAddr("198.51.100.7")) {
		t.Error("the address of the name looked up last is not resolved")
	}
	if !w.reaches(pid, "198.51.100.7:8080") {
		t.Error("the address of the name looked up last was refused")
	}
	if w.m.Resolved(addr.Sandbox, netip.MustParseAddr("11.0.1.1")) {
		t.Error("the first answer's addresses are still resolved")
	}

	// A policy update keeps the addresses of the names it still allows,
	// and only those.
	inNS(t, w.host, func() {
		if err := w.m.Update(context.Background(), "ibig", mustPolicy(t, true, []string{"last.big.test"}, []string{"0.0.0.0/0"})); err != nil {
			t.Fatal(err)
		}
	})
	if n := len(w.resolvedElements("ibig")); n != 70 {
		t.Errorf("after an update allowing last.big.test: %d addresses in the set, want its 70", n)
	}
	if !w.reaches(pid, "198.51.100.7:8080") {
		t.Error("after the update, the address of the name still allowed was refused")
	}
}

// TestResolvedSet: what the manager keeps of a sandbox's resolved
// addresses, and what it tells the kernel, step by step.
func TestResolvedSet(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	addrs := func(first, n int) []netip.Addr {
		var a []netip.Addr
		for i := range n {
			a = append(a, netip.AddrFrom4([4]byte{192, 0, 2, byte(first + i)}))
		}
		return a
	}
	str := func(as []netip.Addr) string {
		var s []string
		for _, a := range as {
			s = append(s, strings.TrimPrefix(a.String(), "192.0.2."))
		}
		return strings.Join(s, " ")
	}
	type step struct {
		at      time.Duration // after t0
		name    string
		addrs   []netip.Addr
		ttl     time.Duration
		writes  string // addresses written, with their timeouts in seconds
		evicted string
		held    string // afterwards, in order of age
	}
	tests := []struct {
		name  string
		max   int
		steps []step
	}{
		{"under the bound", 8, []step{
			{0, "a.test", addrs(1, 3), time.Minute, "1:60 2:60 3:60", "", "1 2 3"},
			{0, "b.test", addrs(4, 2), time.Hour, "4:3600 5:3600", "", "1 2 3 4 5"},
		}},
		{"duplicates once", 8, []step{
			{0, "a.test", append(addrs(1, 2), addrs(1, 2)...), time.Minute, "1:60 2:60", "", "1 2"},
		}},
		{"the oldest quarter makes room", 8, []step{
			{0, "a.test", addrs(1, 4), time.Hour, "1:3600 2:3600 3:3600 4:3600", "", "1 2 3 4"},
			{0, "b.test", addrs(5, 4), time.Hour, "5:3600 6:3600 7:3600 8:3600", "", "1 2 3 4 5 6 7 8"},
			{0, "c.test", addrs(9, 1), time.Hour, "9:3600", "1 2", "3 4 5 6 7 8 9"},
		}},
		{"an answer bigger than a quarter", 8, []step{
			{0, "a.test", addrs(1, 8), time.Hour, "1:3600 2:3600 3:3600 4:3600 5:3600 6:3600 7:3600 8:3600", "", "1 2 3 4 5 6 7 8"},
			{0, "b.test", addrs(9, 3), time.Hour, "9:3600 10:3600 11:3600", "1 2 3", "4 5 6 7 8 9 10 11"},
		}},
		{"an answer bigger than the bound", 4, []step{
			{0, "a.test", addrs(1, 6), time.Hour, "1:3600 2:3600 3:3600 4:3600", "", "1 2 3 4"},
		}},
		{"looked up again: moved to the newest, never evicted for its own answer", 4, []step{
			{0, "a.test", addrs(1, 4), time.Hour, "1:3600 2:3600 3:3600 4:3600", "", "1 2 3 4"},
			{0, "b.test", addrs(1, 2), time.Hour, "1:3600 2:3600", "", "3 4 1 2"},
			{0, "c.test", append(addrs(1, 2), addrs(9, 1)...), time.Hour, "1:3600 2:3600 9:3600", "3", "4 1 2 9"},
		}},
		{"the later expiry wins", 8, []step{
			{0, "a.test", addrs(1, 1), time.Hour, "1:3600", "", "1"},
			{10 * time.Second, "b.test", addrs(1, 1), time.Minute, "1:3590", "", "1"},
			{20 * time.Second, "c.test", addrs(1, 1), 2 * time.Hour, "1:7200", "", "1"},
		}},
		{"expired ones are forgotten first", 4, []step{
			{0, "a.test", addrs(1, 2), time.Minute, "1:60 2:60", "", "1 2"},
			{0, "b.test", addrs(3, 2), time.Hour, "3:3600 4:3600", "", "1 2 3 4"},
			{time.Minute, "c.test", addrs(5, 2), time.Hour, "5:3600 6:3600", "", "3 4 5 6"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newResolvedSet(tt.max)
			for i, st := range tt.steps {
				now := t0.Add(st.at)
				writes, evicted := s.add(st.name, st.addrs, now.Add(st.ttl), now)
				var w []string
				for _, x := range writes {
					w = append(w, fmt.Sprintf("%s:%d", str([]netip.Addr{x.addr}), int(x.timeout/time.Second)))
				}
				var held []netip.Addr
				for e := s.order.Front(); e != nil; e = e.Next() {
					held = append(held, e.Value.(*resolvedAddr).addr)
				}
				if got := strings.Join(w, " "); got != st.writes {
					t.Errorf("step %d: writes %q, want %q", i, got, st.writes)
				}
				if got := str(evicted); got != st.evicted {
					t.Errorf("step %d: evicted %q, want %q", i, got, st.evicted)
				}
				if got := str(held); got != st.held {
					t.Errorf("step %d: held %q, want %q", i, got, st.held)
				}
				if s.len() > tt.max || s.len() != len(held) {
					t.Errorf("step %d: len %d, %d in order, max %d", i, s.len(), len(held), tt.max)
				}
				for _, a := range held {
					if !s.has(a, now) {
						t.Errorf("step %d: %s held but not open", i, a)
					}
				}
				for _, a := range evicted {
					if s.has(a, now) {
						t.Errorf("step %d: %s evicted but open", i, a)
					}
				}
			}
		})
	}
}

// TestResolvedSetKept: a policy update keeps the valid addresses of names
// the new policy allows, in their order.
func TestResolvedSetKept(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newResolvedSet(8)
	a := func(i byte) []netip.Addr { return []netip.Addr{netip.AddrFrom4([4]byte{192, 0, 2, i})} }
	s.add("a.keep.test", a(1), t0.Add(time.Hour), t0)
	s.add("b.drop.test", a(2), t0.Add(time.Hour), t0)
	s.add("c.keep.test", a(3), t0.Add(time.Minute), t0)
	s.add("d.keep.test", a(4), t0.Add(time.Hour), t0)
	// Names share addresses: one still allowed keeps it, for as long as
	// its own answer said.
	s.add("e.keep.test", a(5), t0.Add(30*time.Minute), t0)
	s.add("f.drop.test", a(5), t0.Add(time.Hour), t0)
	// Only maxNamesPerAddr names are remembered: the one that expires
	// first is forgotten.
	s.add("g.keep.test", a(6), t0.Add(10*time.Minute), t0)
	for i := range maxNamesPerAddr {
		s.add(fmt.Sprintf("h%d.drop.test", i), a(6), t0.Add(time.Hour), t0)
	}
	now := t0.Add(2 * time.Minute)
	k := s.kept(mustPolicy(t, true, []string{"*.keep.test"}, []string{"0.0.0.0/0"}), now)
	var got []string
	for _, w := range k.writes(now) {
		got = append(got, fmt.Sprintf("%s:%d", w.addr, int(w.timeout/time.Second)))
	}
	if want := "192.0.2.1:3480 192.0.2.4:3480 192.0.2.5:1680"; strings.Join(got, " ") != want {
		t.Errorf("kept %q, want %q", strings.Join(got, " "), want)
	}
	if s.len() != 6 {
		t.Errorf("kept changed the set it was made from: %d addresses", s.len())
	}
	for e := s.order.Front(); e != nil; e = e.Next() {
		if r := e.Value.(*resolvedAddr); len(r.names) > maxNamesPerAddr {
			t.Errorf("%s: %d names remembered, want at most %d", r.addr, len(r.names), maxNamesPerAddr)
		}
	}
}
