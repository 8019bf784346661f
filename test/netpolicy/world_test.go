// Package netpolicy tests sandbox networking end to end: a real `hutch
// serve` (the binary built from this checkout) creates sandboxes through
// the official E2B SDK, and what those sandboxes can reach is tried from
// inside them with curl and python3.
//
// Nothing here touches the machine's own network or firewall, and no packet
// is sent to any address outside the namespaces the tests make:
//
//	host      a fresh network namespace where `hutch serve` runs (its
//	          nftables table, links, conntrack and ip_forward are that
//	          namespace's): 203.0.113.254/24 on "inet0", default route to
//	          the internet; the API on :3000 and a test service on :8081
//	          (every address, IPv4 and IPv6), which no sandbox may reach.
//	internet  the other end of inet0, 203.0.113.1, holding every address a
//	          test reaches or expects refused: 203.0.113.10 (HTTP :80 and
//	          :8080, HTTPS :443 with a certificate for the test names, a
//	          slow TCP stream on :9000), 198.51.100.7 (the same), 169.254.169.254
//	          (cloud metadata), 10.99.0.1 (a private host), and the DNS
//	          server of the test zone at 203.0.113.53:53, Hutch's
//	          --dns-upstream.
//	sandboxes made by hutch serve; their links are the host's hv* links.
//
// The servers are goroutines of the test whose sockets were opened on a
// thread inside the internet namespace; every server says who it is
// ("served-by ADDR host HOST sni SNI"), so a test can tell which server it
// reached and under which name.
package netpolicy

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// The test world's addresses.
const (
	hostAddr     = "203.0.113.254" // the host's address on the internet link
	upstreamGW   = "203.0.113.1"   // the internet's end of that link
	webAddr      = "203.0.113.10"  // a public server: HTTP, HTTPS, stream
	otherAddr    = "198.51.100.7"  // another public server, in another range
	metadataAddr = "169.254.169.254"
	privateAddr  = "10.99.0.1"
	dnsAddr      = "203.0.113.53"

	apiPort     = 3000 // hutch serve's listener, on every host address
	hostSvcPort = 8081 // a service of the host's that sandboxes must not reach
	streamPort  = 9000 // slow TCP streams, for cut connections
	altPort     = 8080 // HTTP on a port the egress proxy does not see

	sandboxRange = "10.200.0.0/16" // hutch serve's default --network-cidr

)

// zone is what the test DNS server answers (A records); every other name
// is NXDOMAIN. Names under exfil.test all resolve: tests use fresh ones to
// see whether a query was forwarded upstream.
var zone = map[string]string{
	"allowed.test.":       webAddr,
	"other.test.":         webAddr,
	"wild.test.":          webAddr,
	"api.wild.test.":      webAddr,
	"deep.api.wild.test.": webAddr,
	"denied.test.":        otherAddr,
	"metadata.test.":      metadataAddr,
	"private.test.":       privateAddr,
}

// certNames are the names the HTTPS servers' certificate is for.
var certNames = []string{"allowed.test", "other.test", "wild.test", "api.wild.test", "denied.test"}

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, hutchBin) }

// world is one host namespace with its internet, a hutch serve in the host
// and an SDK driver talking to it.
type world struct {
	t        *testing.T
	host     netns.NsHandle
	internet netns.NsHandle
	// srv is hutch serve, run in host with nsenter.
	srv *hutchtest.Server

	dns     *dnsServer
	streams *streams
	closers []io.Closer

	sdk *driver
}

func ipnet(a string, bits int) *net.IPNet {
	return &net.IPNet{IP: net.ParseIP(a).To4(), Mask: net.CIDRMask(bits, 32)}
}

// newWorld builds the namespaces and servers and starts hutch serve, with
// serveArgs after its usual flags; all of it goes when the test ends.
func newWorld(t *testing.T, serveArgs ...string) *world {
	t.Helper()
	return newWorldFiles(t, 0, serveArgs...)
}

// newWorldFiles is newWorld with hutch serve started under an open-file
// limit (soft and hard) of nofile, when not 0.
func newWorldFiles(t *testing.T, nofile int, serveArgs ...string) *world {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces, sandboxes")
	for _, tool := range []string{"nsenter", "node"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	bin := hutchBin.Path(t)
	w := &world{t: t, dns: &dnsServer{}, streams: newStreams()}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread ends up in a new namespace: never unlocked
		var err error
		if w.internet, err = netns.New(); err == nil {
			w.host, err = netns.New()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range w.closers {
			c.Close()
		}
		w.streams.closeAll()
		w.host.Close()
		w.internet.Close()
	})

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(hutchtest.NetNSOf(w.host).Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "inet0"}, PeerName: "up0", PeerNamespace: netlink.NsFd(w.internet)}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		l, err := netlink.LinkByName("inet0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(hostAddr, 24)}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.ParseIP(upstreamGW)})
	}))
	must(hutchtest.NetNSOf(w.internet).Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		l, err := netlink.LinkByName("up0")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(upstreamGW, 24)}); err != nil {
			return err
		}
		for _, a := range []string{webAddr, otherAddr, metadataAddr, privateAddr, dnsAddr} {
			if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: ipnet(a, 32)}); err != nil {
				return fmt.Errorf("%s: %w", a, err)
			}
		}
		// Replies to the host's (masqueraded) address are on link.
		return netlink.LinkSetUp(l)
	}))

	cert := selfSigned(t)
	handler := echoHandler(w.streams)
	must(hutchtest.NetNSOf(w.internet).Do(func() error {
		for _, a := range []string{webAddr, otherAddr, metadataAddr, privateAddr} {
			if err := w.serveHTTP(a+":80", handler, nil); err != nil {
				return err
			}
		}
		for _, a := range []string{webAddr, otherAddr} {
			if err := w.serveHTTP(a+":443", handler, &tls.Config{Certificates: []tls.Certificate{cert}}); err != nil {
				return err
			}
			if err := w.serveHTTP(fmt.Sprintf("%s:%d", a, altPort), handler, nil); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", a, streamPort))
			if err != nil {
				return err
			}
			w.closers = append(w.closers, ln)
			go w.streams.serveTCP(ln)
		}
		return w.dns.start(w, dnsAddr+":53")
	}))
	must(hutchtest.NetNSOf(w.host).Do(func() error {
		return w.serveHTTP(fmt.Sprintf(":%d", hostSvcPort), handler, nil) // IPv4 and IPv6
	}))

	// hutch serve's data: sandboxes' uids must traverse to their layers.
	tmp := t.TempDir()
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, 0o711)
	serveLog := &tailBuffer{max: 150}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hutch serve's last log lines:\n%s", serveLog.String())
		}
	})
	w.srv = hutchtest.NewServer(t, bin, filepath.Join(tmp, "data"))
	w.srv.Addr = fmt.Sprintf("127.0.0.1:%d", apiPort)
	w.srv.Listen = fmt.Sprintf(":%d", apiPort) // every address, IPv6 too
	w.srv.Wrap = []string{"nsenter", fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(w.host)), "--"}
	if nofile > 0 {
		w.srv.Wrap = append(w.srv.Wrap, "prlimit", fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--")
	}
	w.srv.Args = append([]string{"--dns-upstream", dnsAddr + ":53", "--warm", "0"}, serveArgs...)
	w.srv.Client = w.hostClient()
	w.srv.Log = serveLog

	// The world itself works: from the host, every server answers, so a
	// refusal seen from a sandbox is the policy's doing.
	for _, u := range []string{
		"http://" + webAddr + "/", "https://" + webAddr + "/", "http://" + otherAddr + "/", "https://" + otherAddr + "/",
		fmt.Sprintf("http://%s:%d/", webAddr, altPort),
		"http://" + metadataAddr + "/", "http://" + privateAddr + "/",
		fmt.Sprintf("http://%s:%d/", hostAddr, hostSvcPort),
	} {
		if body, err := w.hostGet(u); err != nil || !strings.Contains(body, "served-by") {
			t.Fatalf("the test world is broken: %s from the host: %q, %v", u, body, err)
		}
	}
	if a, err := w.hostLookup("allowed.test"); err != nil || a != webAddr {
		t.Fatalf("the test world is broken: allowed.test from the host: %q, %v", a, err)
	}

	w.srv.Start()
	w.sdk = startDriver(t, w)
	return w
}

// serveHTTP serves h (over TLS with tc) on addr; call it inside a namespace.
func (w *world) serveHTTP(addr string, h http.Handler, tc *tls.Config) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second}
	w.closers = append(w.closers, srv)
	if tc != nil {
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	return nil
}

// echoHandler says who it is, for which name it was asked; /stream?id=ID
// streams ticks until the client goes (for cut connections).
func echoHandler(st *streams) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		sni := "-"
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		if r.URL.Path == "/stream" {
			st.serveHTTP(rw, r)
			return
		}
		fmt.Fprintf(rw, "served-by %s host %s sni %s\n", local, r.Host, sni)
	})
}

// selfSigned makes a certificate for the test names and addresses.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "netpolicy test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: certNames, IPAddresses: []net.IP{net.ParseIP(webAddr), net.ParseIP(otherAddr)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dnsServer answers the test zone and remembers every name it was asked.
type dnsServer struct {
	mu   sync.Mutex
	seen map[string]int
}

func (d *dnsServer) start(w *world, addr string) error {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return err
	}
	d.seen = map[string]int{}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: d}, {Listener: ln, Handler: d}} {
		w.closers = append(w.closers, closerFunc(srv.Shutdown))
		go srv.ActivateAndServe()
	}
	return nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

func (d *dnsServer) ServeDNS(rw dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Authoritative = true
	if len(req.Question) == 1 {
		q := req.Question[0]
		name := strings.ToLower(q.Name)
		d.mu.Lock()
		d.seen[strings.TrimSuffix(name, ".")]++
		d.mu.Unlock()
		a, ok := zone[name]
		if !ok && strings.HasSuffix(name, ".exfil.test.") {
			a, ok = webAddr, true
		}
		switch {
		case !ok:
			resp.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			resp.Answer = append(resp.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.ParseIP(a).To4(),
			})
		}
	}
	rw.WriteMsg(resp)
}

// asked reports whether the server was ever asked for name.
func (d *dnsServer) asked(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[name] > 0
}

// askedUnder returns how many names under zone the server was asked.
func (d *dnsServer) askedUnder(zone string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for name := range d.seen {
		if strings.HasSuffix(name, "."+zone) {
			n++
		}
	}
	return n
}

// streams are the slow streams the internet serves: raw TCP on streamPort
// (the client first sends "id ID\n") and HTTP /stream?id=ID. Each sends a
// tick every 100 ms until a write fails or the client goes.
type streams struct {
	mu     sync.Mutex
	byID   map[string]*stream
	closed bool
	conns  map[net.Conn]struct{}
}

type stream struct {
	mu    sync.Mutex
	ticks int
	err   error // why it ended; nil while it runs
	ended bool
}

func newStreams() *streams {
	return &streams{byID: map[string]*stream{}, conns: map[net.Conn]struct{}{}}
}

func (s *streams) get(id string) *stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.byID[id]
	if st == nil {
		st = &stream{}
		s.byID[id] = st
	}
	return st
}

// state returns how many ticks the stream id has sent and whether it ended.
func (s *streams) state(id string) (ticks int, ended bool, err error) {
	st := s.get(id)
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.ticks, st.ended, st.err
}

func (s *streams) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *streams) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *streams) closeAll() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

func (s *streams) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !s.track(c) {
			return
		}
		go func() {
			defer s.untrack(c)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return
			}
			c.SetReadDeadline(time.Time{})
			id, _ := strings.CutPrefix(strings.TrimSpace(line), "id ")
			s.run(s.get(id), func(n int) error {
				_, err := fmt.Fprintf(c, "tick %d\n", n)
				return err
			}, nil)
		}()
	}
}

func (s *streams) serveHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Content-Type", "text/plain")
	fl, _ := rw.(http.Flusher)
	s.run(s.get(r.URL.Query().Get("id")), func(n int) error {
		if _, err := fmt.Fprintf(rw, "tick %d\n", n); err != nil {
			return err
		}
		fl.Flush()
		return nil
	}, r.Context().Done())
}

// run ticks until a write fails, done closes or the world ends (at most
// ten minutes).
func (s *streams) run(st *stream, write func(n int) error, done <-chan struct{}) {
	end := func(err error) {
		st.mu.Lock()
		st.ended, st.err = true, err
		st.mu.Unlock()
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
	for n := 1; ; n++ {
		if err := write(n); err != nil {
			end(err)
			return
		}
		st.mu.Lock()
		st.ticks = n
		st.mu.Unlock()
		select {
		case <-tick.C:
		case <-done:
			end(fmt.Errorf("client gone"))
			return
		case <-deadline:
			end(fmt.Errorf("ten minutes"))
			return
		}
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if closed {
			end(fmt.Errorf("world closed"))
			return
		}
	}
}

// hostClient is an HTTP client whose connections start in the host
// namespace (the API listens there).
func (w *world) hostClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext:     hutchtest.NetNSOf(w.host).DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
}

func (w *world) hostGet(url string) (string, error) {
	resp, err := w.hostClient().Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// hostLookup asks the test DNS server from the host.
func (w *world) hostLookup(name string) (string, error) {
	var addr string
	err := hutchtest.NetNSOf(w.host).Do(func() error {
		c := &dns.Client{Timeout: 5 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		r, _, err := c.Exchange(m, dnsAddr+":53")
		if err != nil {
			return err
		}
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				addr = a.A.String()
			}
		}
		return nil
	})
	return addr, err
}

// hostState is what the kernel of the host namespace holds for sandboxes.
type hostState struct {
	links     map[string]string // hv* link name -> alias (the sandbox id)
	chains    []string          // chains of the hutch table but its base chains: sbx-*, cap-*
	sets      []string          // sets but the base ones: res-*
	dispatch  int               // elements of the dispatch map
	caps      int               // elements of the caps map
	proxied   int               // elements of the proxied set
	table     bool              // the inet hutch table exists
	conntrack []string          // flows from or to the sandbox range
}

// baseObjects are the chains and sets of the hutch table that are no
// sandbox's; every other is some sandbox's.
var baseObjects = []string{"conncap", "egressout", "forward", "input", "prerouting", "postrouting", "dispatch", "caps", "proxied"}

// inspect reads the host namespace's links, firewall and conntrack table.
func (w *world) inspect(t *testing.T) hostState {
	t.Helper()
	st := hostState{links: map[string]string{}}
	h, err := netlink.NewHandleAt(w.host)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "hv") {
			st.links[l.Attrs().Name] = l.Attrs().Alias
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(w.host)))
	if err != nil {
		t.Fatal(err)
	}
	if tbl, err := c.ListTableOfFamily("hutch", nftables.TableFamilyINet); err == nil && tbl != nil {
		st.table = true
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chains {
			if ch.Table.Name == "hutch" && ch.Table.Family == nftables.TableFamilyINet && !slices.Contains(baseObjects, ch.Name) {
				st.chains = append(st.chains, ch.Name)
			}
		}
		sets, err := c.GetSets(tbl)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			if !slices.Contains(baseObjects, s.Name) {
				st.sets = append(st.sets, s.Name)
				continue
			}
			els, err := c.GetSetElements(s)
			if err != nil {
				t.Fatal(err)
			}
			switch s.Name {
			case "dispatch":
				st.dispatch = len(els)
			case "caps":
				st.caps = len(els)
			case "proxied":
				st.proxied = len(els)
			}
		}
	}
	sort.Strings(st.chains)
	sort.Strings(st.sets)
	flows := w.flows(t)
	rng := netip.MustParsePrefix(sandboxRange)
	in := func(ip net.IP) bool {
		a, ok := netip.AddrFromSlice(ip)
		return ok && rng.Contains(a.Unmap())
	}
	for _, f := range flows {
		if in(f.Forward.SrcIP) || in(f.Forward.DstIP) || in(f.Reverse.SrcIP) || in(f.Reverse.DstIP) {
			st.conntrack = append(st.conntrack, describeFlow(f))
		}
	}
	return st
}

// flows returns the host namespace's IPv4 conntrack table.
func (w *world) flows(t *testing.T) []*netlink.ConntrackFlow {
	t.Helper()
	h, err := netlink.NewHandleAt(w.host)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	return flows
}

// tcpEstablished is conntrack's TCP state ESTABLISHED.
const tcpEstablished = 3

var tcpStates = []string{"NONE", "SYN_SENT", "SYN_RECV", "ESTABLISHED", "FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "TIME_WAIT", "CLOSE", "SYN_SENT2"}

func describeFlow(f *netlink.ConntrackFlow) string {
	state := ""
	if p, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP); ok && int(p.State) < len(tcpStates) {
		state = tcpStates[p.State] + " "
	}
	proto := map[uint8]string{6: "tcp", 17: "udp", 1: "icmp"}[f.Forward.Protocol]
	return fmt.Sprintf("%s %s%s:%d -> %s:%d (reply %s:%d -> %s:%d) timeout %ds", proto, state,
		f.Forward.SrcIP, f.Forward.SrcPort, f.Forward.DstIP, f.Forward.DstPort,
		f.Reverse.SrcIP, f.Reverse.SrcPort, f.Reverse.DstIP, f.Reverse.DstPort, f.TimeOut)
}

// linkOf returns the host-side link of a sandbox ("" if none).
func (st hostState) linkOf(id string) string {
	for name, alias := range st.links {
		if alias == id {
			return name
		}
	}
	return ""
}

// tailBuffer keeps the last max lines written to it.
type tailBuffer struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.partial = append(b.partial, p...)
	for {
		i := bytes.IndexByte(b.partial, '\n')
		if i < 0 {
			break
		}
		b.lines = append(b.lines, string(b.partial[:i]))
		b.partial = b.partial[i+1:]
		if len(b.lines) > b.max {
			b.lines = b.lines[len(b.lines)-b.max:]
		}
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n") + string(b.partial)
}
