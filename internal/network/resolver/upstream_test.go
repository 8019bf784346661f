package resolver

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// A fakeUpstream is an upstream server whose answers each test writes:
// handle gets every query (in a goroutine of its own) and a send function
// that writes a packet back the way the query came. It records the
// resolver's UDP source ports and TCP connections.
type fakeUpstream struct {
	addr string
	// closeAfterAnswer closes a TCP connection after its first answer.
	closeAfterAnswer bool

	mu       sync.Mutex
	handle   func(network string, q *dns.Msg, send func([]byte))
	udpPorts map[string]bool
	tcpConns int
}

func startFakeUpstream(t *testing.T, handle func(network string, q *dns.Msg, send func([]byte))) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{handle: handle, udpPorts: map[string]bool{}}
	pc, ln := listenPair(t)
	t.Cleanup(func() { pc.Close(); ln.Close() })
	u.addr = pc.LocalAddr().String()
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			u.mu.Lock()
			u.udpPorts[from.String()] = true
			u.mu.Unlock()
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			go u.handle("udp", q, func(p []byte) { pc.WriteTo(p, from) })
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			u.mu.Lock()
			u.tcpConns++
			u.mu.Unlock()
			go u.serveTCP(c)
		}
	}()
	return u
}

func (u *fakeUpstream) serveTCP(c net.Conn) {
	var wmu sync.Mutex
	send := func(p []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(p))), p...))
		if u.closeAfterAnswer {
			c.Close()
		}
	}
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		p := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, p); err != nil {
			return
		}
		q := new(dns.Msg)
		if q.Unpack(p) != nil {
			continue
		}
		go u.handle("tcp", q, send)
	}
}

// seen returns how many UDP source ports and TCP connections the
// upstream saw.
func (u *fakeUpstream) seen() (ports, conns int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.udpPorts), u.tcpConns
}

func pack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	p, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// answerA returns the answer to q giving its name the address a.
func answerA(q *dns.Msg, a string) *dns.Msg {
	resp := new(dns.Msg).SetReply(q)
	resp.RecursionAvailable = true
	rr, err := dns.NewRR(fmt.Sprintf("%s 300 IN A %s", q.Question[0].Name, a))
	if err != nil {
		panic(err)
	}
	resp.Answer = []dns.RR{rr}
	return resp
}

// TestUpstreamMatchesAnswers: queries in flight at once share the
// resolver's few sockets, and each gets its own answer when the upstream
// answers them in the reverse order, over UDP and over TCP (after a
// truncated UDP answer).
func TestUpstreamMatchesAnswers(t *testing.T) {
	const n = 48 // within the resolver's 64 forwarded queries per client
	tests := []struct {
		name    string
		network string // where the answers are given
	}{
		{"udp", "udp"},
		{"tcp after truncation", "tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var held []func()
			up := startFakeUpstream(t, func(network string, q *dns.Msg, send func([]byte)) {
				if network != tt.network {
					tc := new(dns.Msg).SetReply(q)
					tc.Truncated = true
					send(pack(t, tc))
					return
				}
				var i int
				fmt.Sscanf(q.Question[0].Name, "q%d.", &i)
				p := pack(t, answerA(q, fmt.Sprintf("192.0.2.%d", i)))
				mu.Lock()
				defer mu.Unlock()
				held = append(held, func() { send(p) })
				if len(held) == n {
					for _, f := range slices.Backward(held) {
						f()
					}
				}
			})
			r := startResolver(t, []string{up.addr}, nil)
			r.sandboxes.set(mustPolicy(true, nil, nil))

			got := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					c := &dns.Client{Timeout: 5 * time.Second}
					resp, _, err := c.Exchange(query(fmt.Sprintf("q%d.test.", i), dns.TypeA, true), r.addr)
					if err != nil {
						t.Error(err)
						return
					}
					got[i] = fmt.Sprint(rrs(resp.Answer))
				})
			}
			wg.Wait()
			for i := range n {
				if want := fmt.Sprint([]string{fmt.Sprintf("q%d.test. 300 IN A 192.0.2.%d", i, i)}); got[i] != want {
					t.Errorf("q%d: answer %s, want %s", i, got[i], want)
				}
			}
			ports, conns := up.seen()
			t.Logf("%d queries over %d UDP sockets and %d TCP connections", n, ports, conns)
			if ports > udpSockets {
				t.Errorf("%d UDP sockets, want at most %d", ports, udpSockets)
			}
			if conns > tcpConns {
				t.Errorf("%d TCP connections, want at most %d", conns, tcpConns)
			}
		})
	}
}

// TestUpstreamDropsSpoofedAnswers: an answer that comes back from the
// upstream's address and port but does not answer the query in flight
// (another ID, another question, not a response, not DNS) is dropped, and
// the query takes the real answer after it; with no real answer, it fails.
func TestUpstreamDropsSpoofedAnswers(t *testing.T) {
	const real, evil = "203.0.113.10", "192.0.2.66"
	spoof := func(f func(q, m *dns.Msg)) func(t *testing.T, q *dns.Msg) []byte {
		return func(t *testing.T, q *dns.Msg) []byte {
			m := answerA(q, evil)
			f(q, m)
			return pack(t, m)
		}
	}
	tests := []struct {
		name     string
		spoof    func(t *testing.T, q *dns.Msg) []byte
		noAnswer bool // only the spoofed answer is sent
	}{
		{name: "another ID", spoof: spoof(func(q, m *dns.Msg) { m.Id = q.Id + 1 })},
		{name: "another name", spoof: spoof(func(q, m *dns.Msg) {
			m.Question[0].Name = "evil.test."
			m.Answer[0].Header().Name = "evil.test."
		})},
		{name: "another type", spoof: spoof(func(q, m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA })},
		{name: "another class", spoof: spoof(func(q, m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS })},
		{name: "no question", spoof: spoof(func(q, m *dns.Msg) { m.Question = nil })},
		{name: "two questions", spoof: spoof(func(q, m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) })},
		{name: "not a response", spoof: spoof(func(q, m *dns.Msg) { m.Response = false })},
		{name: "not DNS", spoof: func(*testing.T, *dns.Msg) []byte { return []byte{1, 2, 3} }},
		{name: "only a spoofed answer", spoof: spoof(func(q, m *dns.Msg) { m.Id = q.Id ^ 0x8000 }), noAnswer: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startFakeUpstream(t, func(network string, q *dns.Msg, send func([]byte)) {
				send(tt.spoof(t, q))
				if !tt.noAnswer {
					time.Sleep(10 * time.Millisecond) // the spoofed answer first
					send(pack(t, answerA(q, real)))
				}
			})
			r := startResolver(t, []string{up.addr}, func(r *Resolver) { r.timeout = 300 * time.Millisecond })
			r.sandboxes.set(mustPolicy(true, nil, nil))
			resp := exchange(t, r.addr, "udp", query("example.test.", dns.TypeA, true))
			calls := r.answers.take()
			if tt.noAnswer {
				if resp.Rcode != dns.RcodeServerFailure || len(calls) != 0 {
					t.Errorf("rcode %s, OnAnswer %v; want SERVFAIL, no call", dns.RcodeToString[resp.Rcode], calls)
				}
				return
			}
			if diff := cmp.Diff([]string{"example.test. 300 IN A " + real}, rrs(resp.Answer)); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			want := []answerCall{{Client: "127.0.0.1", Name: "example.test", Addrs: []string{real}, TTL: 300 * time.Second}}
			if diff := cmp.Diff(want, calls); diff != "" {
				t.Errorf("OnAnswer calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTCPConnections: answers too big for UDP come over a few TCP
// connections the resolver keeps; when the server closes each after one
// answer, the resolver dials again, no faster than tcpDialEvery once its
// first tcpConns are used.
func TestTCPConnections(t *testing.T) {
	const n = tcpConns + 2
	tests := []struct {
		name      string
		close     bool
		wantConns func(int) bool
		minTime   time.Duration
	}{
		{"kept open", false, func(c int) bool { return c >= 1 && c <= tcpConns }, 0},
		{"closed after each answer", true, func(c int) bool { return c >= n }, (n - tcpConns - 1) * tcpDialEvery},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startFakeUpstream(t, func(network string, q *dns.Msg, send func([]byte)) {
				resp := answerA(q, "203.0.113.10")
				resp.Truncated = network == "udp"
				send(pack(t, resp))
			})
			up.closeAfterAnswer = tt.close
			r := startResolver(t, []string{up.addr}, nil)
			r.sandboxes.set(mustPolicy(true, nil, nil))
			start := time.Now()
			for i := range n {
				name := fmt.Sprintf("q%d.test.", i)
				resp := exchange(t, r.addr, "udp", query(name, dns.TypeA, true))
				if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 || resp.Truncated {
					t.Errorf("%s: %v", name, resp)
				}
			}
			took := time.Since(start)
			_, conns := up.seen()
			t.Logf("%d queries over %d TCP connections in %v", n, conns, took)
			if !tt.wantConns(conns) {
				t.Errorf("%d TCP connections for %d queries", conns, n)
			}
			if took < tt.minTime {
				t.Errorf("%d connections dialled in %v, want at least %v", conns, took, tt.minTime)
			}
		})
	}
}

// TestUDPSocketLife: an upstream's UDP sockets serve query after query
// for udpLife; a socket past it is replaced, and the queries still in
// flight on it get their answers.
func TestUDPSocketLife(t *testing.T) {
	const n = 40
	tests := []struct {
		name      string
		life      time.Duration
		wantPorts func(int) bool
	}{
		{"kept", udpLife, func(p int) bool { return p <= udpSockets }},
		{"replaced at each query", 0, func(p int) bool { return p == n }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := startFakeUpstream(t, func(network string, q *dns.Msg, send func([]byte)) {
				time.Sleep(50 * time.Millisecond) // queries overlap
				send(pack(t, answerA(q, "203.0.113.10")))
			})
			u := newUpstream(up.addr, slog.New(slog.DiscardHandler))
			u.life = tt.life
			defer u.close()
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					name := fmt.Sprintf("q%d.test.", i)
					resp, err := u.exchange(ctx, "udp", query(name, dns.TypeA, false))
					if err != nil || len(resp.Answer) != 1 || resp.Answer[0].Header().Name != name {
						t.Errorf("%s: %v, %v", name, resp, err)
					}
				})
				time.Sleep(time.Millisecond)
			}
			wg.Wait()
			if ports, _ := up.seen(); !tt.wantPorts(ports) {
				t.Errorf("%d queries from %d ports", n, ports)
			}
		})
	}
}
