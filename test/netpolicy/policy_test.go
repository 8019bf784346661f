package netpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestNetworkPolicy runs every policy and update case against one world
// and one hutch serve, each case in sandboxes of its own.
func TestNetworkPolicy(t *testing.T) {
	w := newWorld(t)
	t.Run("policy", func(t *testing.T) {
		t.Run("default", func(t *testing.T) { t.Parallel(); testDefault(t, w) })
		t.Run("no-internet", func(t *testing.T) { t.Parallel(); testNoInternet(t, w) })
		for _, c := range listCases {
			t.Run(c.name, func(t *testing.T) { t.Parallel(); testList(t, w, c) })
		}
		t.Run("domain-allow-list", func(t *testing.T) { t.Parallel(); testDomainAllowList(t, w) })
	})
	t.Run("update", func(t *testing.T) {
		t.Run("cuts-denied-connections", func(t *testing.T) { t.Parallel(); testUpdateCuts(t, w) })
		t.Run("cuts-proxied-connections", func(t *testing.T) { t.Parallel(); testUpdateCutsProxied(t, w) })
		t.Run("opens-internet", func(t *testing.T) { t.Parallel(); testUpdateOpens(t, w) })
		t.Run("closes-internet", func(t *testing.T) { t.Parallel(); testUpdateCloses(t, w) })
		t.Run("omitted-fields-are-cleared", func(t *testing.T) { t.Parallel(); testUpdateReplaces(t, w) })
		t.Run("audited", func(t *testing.T) { t.Parallel(); testUpdateAudited(t, w) })
	})
}

// testDefault: a sandbox created with no network options reaches the
// internet, by address and by name, and nothing else: not the metadata
// address, private ranges, the host on any of its addresses and ports (the
// API's included), nor a neighbour sandbox.
func testDefault(t *testing.T, w *world) {
	a := w.create(t, nil)
	b := w.create(t, nil)
	aAddr, aGW := w.sandboxAddr(t, a)
	bAddr, _ := w.sandboxAddr(t, b)
	if aAddr == bAddr {
		t.Fatalf("two sandboxes share the address %s", aAddr)
	}
	for _, addr := range []string{aAddr, aGW, bAddr} {
		if a, err := netip.ParseAddr(addr); err != nil || !netip.MustParsePrefix(sandboxRange).Contains(a) {
			t.Errorf("sandbox address %s is not in the sandbox range %s", addr, sandboxRange)
		}
	}
	if r := w.run(t, a, "cat /etc/resolv.conf"); !strings.Contains(r.Stdout, "nameserver "+aGW) {
		t.Errorf("resolv.conf does not name the gateway %s:\n%s", aGW, r.Stdout)
	}

	// Each sandbox serves on a port; each reaches its own service (the
	// services run), neither the other's.
	for _, id := range []string{a, b} {
		w.spawn(t, id, "", "python3 -m http.server 8000 --bind 0.0.0.0")
	}
	for _, s := range []struct{ id, addr string }{{a, aAddr}, {b, bAddr}} {
		waitFor(t, "the sandbox's own service", 20*time.Second, func() (bool, string) {
			r := w.run(t, s.id, fmt.Sprintf("curl -sS -m 2 http://%s:8000/", s.addr))
			return strings.Contains(r.Stdout, "Directory listing"), r.Stdout + r.Stderr
		})
	}

	// The host's link-local IPv6 address on the sandbox's link: IPv6 from
	// sandboxes must be dropped too.
	hostLL := w.hostLinkLocal(t, a)
	w.installDNSProbe(t, a)
	w.probeAll(t, a, []probe{
		// No DNS server listens at 198.51.100.7: an answer from there is
		// Hutch's resolver's, where every DNS packet goes.
		dnsProbe("DNS to any server is the resolver's (udp)", "allowed.test", otherAddr, "udp", "answer "+webAddr),
		dnsProbe("DNS to any server is the resolver's (tcp)", "allowed.test", otherAddr, "tcp", "answer "+webAddr),
		dnsProbe("a name the zone lacks", "missing.test", dnsAddr, "udp", "rcode 3 "),
		reach("public address", "served-by "+webAddr+":80", "http://"+webAddr+"/"),
		reach("another public range", "served-by "+otherAddr+":80", "http://"+otherAddr+"/"),
		reach("https by name", "served-by "+webAddr+":443 host allowed.test sni allowed.test", "-k https://allowed.test/"),
		reach("http by name", "host other.test", "http://other.test/"),
		{name: "lookup", cmd: "getent hosts allowed.test", want: served, marker: webAddr},
		deny("cloud metadata", "http://"+metadataAddr+"/"),
		deny("cloud metadata by name", "http://metadata.test/"),
		deny("private host", "http://"+privateAddr+"/"),
		deny("private host by name", "http://private.test/"),
		deny("host API port (internet address)", fmt.Sprintf("http://%s:%d/health", hostAddr, apiPort)),
		deny("host API port (gateway)", fmt.Sprintf("http://%s:%d/health", aGW, apiPort)),
		deny("host service (internet address)", fmt.Sprintf("http://%s:%d/", hostAddr, hostSvcPort)),
		deny("host service (gateway)", fmt.Sprintf("http://%s:%d/", aGW, hostSvcPort)),
		deny("host service (IPv6 link-local)", fmt.Sprintf("-g 'http://[%s%%25eth0]:%d/'", hostLL, hostSvcPort)),
		deny("host API port (IPv6 link-local)", fmt.Sprintf("-g 'http://[%s%%25eth0]:%d/health'", hostLL, apiPort)),
		deny("egress proxy port, directly", fmt.Sprintf("-H 'Host: allowed.test' http://%s:15380/", aGW)),
		deny("neighbour sandbox", fmt.Sprintf("http://%s:8000/", bAddr)),
	})
	w.probeAll(t, b, []probe{
		deny("neighbour sandbox (the other way)", fmt.Sprintf("http://%s:8000/", aAddr)),
	})
}

// hostLinkLocal returns the host's IPv6 link-local address on a sandbox's
// link, once it is usable, and checks the host itself can be reached at it
// (so that a refusal from the sandbox is the firewall's).
func (w *world) hostLinkLocal(t *testing.T, id string) string {
	t.Helper()
	var ll, link string
	waitFor(t, "the host's link-local address on the sandbox link", 20*time.Second, func() (bool, string) {
		link = w.inspect(t).linkOf(id)
		if link == "" {
			return false, "no link"
		}
		h, err := netlink.NewHandleAt(w.host)
		if err != nil {
			return false, err.Error()
		}
		defer h.Close()
		l, err := h.LinkByName(link)
		if err != nil {
			return false, err.Error()
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return false, err.Error()
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&0x40 == 0 { // IFA_F_TENTATIVE
				ll = a.IP.String()
				return true, ""
			}
		}
		return false, fmt.Sprintf("addresses %v", addrs)
	})
	// The sandbox's end must have finished its duplicate address detection
	// too, or its probes fail for that reason alone.
	waitFor(t, "the sandbox's link-local address", 20*time.Second, func() (bool, string) {
		r := w.run(t, id, "ip -6 -o addr show dev eth0")
		return strings.Contains(r.Stdout, "fe80") && !strings.Contains(r.Stdout, "tentative"), r.Stdout
	})
	if body, err := w.hostGet(fmt.Sprintf("http://[%s%%25%s]:%d/", ll, link, hostSvcPort)); err != nil || !strings.Contains(body, "served-by") {
		t.Fatalf("the host's service on [%s%%%s]: %q %v", ll, link, body, err)
	}
	return ll
}

// testNoInternet: allowInternetAccess false leaves loopback only.
func testNoInternet(t *testing.T, w *world) {
	id := w.create(t, opts{"allowInternetAccess": false})
	if links := w.links(t, id); !slices.Equal(links, []string{"lo"}) {
		t.Errorf("links of a sandbox without internet: %v, want only lo", links)
	}
	if r := w.run(t, id, "ip -4 -o addr"); strings.Count(strings.TrimSpace(r.Stdout), "\n") != 0 || !strings.Contains(r.Stdout, "127.0.0.1") {
		t.Errorf("IPv4 addresses of a sandbox without internet:\n%s", r.Stdout)
	}
	if l := w.inspect(t).linkOf(id); l != "" {
		t.Errorf("the host has a link %s for a sandbox without internet", l)
	}
	if i := w.info(t, id); i.AllowInternetAccess == nil || *i.AllowInternetAccess {
		t.Errorf("getInfo().allowInternetAccess = %v, want false", i.AllowInternetAccess)
	}
	w.probeAll(t, id, []probe{
		deny("public address", "http://"+webAddr+"/"),
		deny("another public range", "http://"+otherAddr+"/"),
		deny("by name", "http://allowed.test/"),
		{name: "lookup", cmd: "timeout 10 getent hosts allowed.test", want: refused},
		deny("cloud metadata", "http://"+metadataAddr+"/"),
	})
}

// listCase is a policy of address and domain lists, and what a sandbox
// created with it reaches: first the probes of before (nothing has been
// looked up yet), then the names of lookup are resolved (they must
// resolve), then the probes.
type listCase struct {
	name        string
	allow, deny []string
	before      []probe
	lookup      []string
	probes      []probe
}

// opensWhy explains the probes that fail while a DNS answer for a name no
// rule matches opens its addresses past denyOut.
const opensWhy = "denyOut denies this address; a DNS lookup of a name no rule matches must not open it " +
	"(the resolver reports every forwarded answer to Manager.Answered: its res- set is accepted before the deny rules, " +
	"and Manager.Resolved vouches for the address to the egress proxy)"

var listCases = []listCase{
	{
		name:  "cidr-allow-list",
		allow: []string{webAddr}, deny: []string{"0.0.0.0/0"},
		probes: []probe{
			reach("allowed address", "served-by "+webAddr+":80", "http://"+webAddr+"/"),
			reach("allowed address, https", "served-by "+webAddr+":443", "-k https://"+webAddr+"/"),
			deny("address outside the list", "http://"+otherAddr+"/"),
			deny("address outside the list, https", "-k https://"+otherAddr+"/"),
			// No domain rule allows a name, and every address is denied:
			// names do not resolve.
			noName("a name", "http://allowed.test/"),
			deny("cloud metadata", "http://"+metadataAddr+"/"),
			deny("private host", "http://"+privateAddr+"/"),
		},
	},
	{
		name: "cidr-deny-list",
		deny: []string{"198.51.100.0/24"},
		before: []probe{
			deny("denied range, before any lookup", "http://"+otherAddr+"/"),
			deny("denied range, https, before any lookup", "-k https://"+otherAddr+"/"),
		},
		// A name no rule denies resolves, into the denied range.
		lookup: []string{"denied.test"},
		probes: []probe{
			reach("address outside the denied range", "served-by "+webAddr+":80", "http://"+webAddr+"/"),
			reach("name outside the denied range", "host allowed.test", "http://allowed.test/"),
			{name: "denied range, after a lookup", cmd: "curl -sS -m 3 http://" + otherAddr + "/", want: refused, why: opensWhy},
			{name: "denied range, https, after a lookup", cmd: "curl -sS -m 3 -k https://" + otherAddr + "/", want: refused, why: opensWhy},
			{name: "name in the denied range", cmd: "curl -sS -m 3 http://denied.test/", want: refused, why: opensWhy},
			deny("cloud metadata", "http://"+metadataAddr+"/"),
		},
	},
	{
		// A domain rule (so web traffic goes through the egress proxy) next
		// to a denied range: the answer for a name no rule matches must
		// open that range neither in the firewall nor in the proxy, where
		// it would also vouch for an allowed name sent to it.
		name:  "domain-allow-and-cidr-deny",
		allow: []string{"allowed.test"}, deny: []string{"198.51.100.0/24"},
		before: []probe{
			deny("denied range, before any lookup", "http://"+otherAddr+"/"),
			deny("denied range, another port, before any lookup", fmt.Sprintf("http://%s:%d/", otherAddr, altPort)),
			deny("allowed Host header sent to the denied range, before any lookup", "-H 'Host: allowed.test' http://"+otherAddr+"/"),
			deny("allowed SNI sent to the denied range, before any lookup", "--resolve allowed.test:443:"+otherAddr+" -k https://allowed.test/"),
		},
		lookup: []string{"denied.test"},
		probes: []probe{
			reach("allowed name", "host allowed.test", "http://allowed.test/"),
			reach("allowed name, https", "sni allowed.test", "-k https://allowed.test/"),
			reach("a name no rule matches, outside the denied range", "host other.test", "http://other.test/"),
			{name: "denied range, after a lookup", cmd: "curl -sS -m 3 http://" + otherAddr + "/", want: refused, why: opensWhy},
			{name: "denied range, another port, after a lookup", cmd: fmt.Sprintf("curl -sS -m 3 http://%s:%d/", otherAddr, altPort), want: refused, why: opensWhy},
			{name: "allowed Host header sent to the denied range, after a lookup", cmd: "curl -sS -m 3 -H 'Host: allowed.test' http://" + otherAddr + "/", want: refused, why: opensWhy},
			{name: "allowed SNI sent to the denied range, after a lookup", cmd: "curl -sS -m 3 --resolve allowed.test:443:" + otherAddr + " -k https://allowed.test/", want: refused, why: opensWhy},
		},
	},
	{
		name:  "wildcard-allow-list",
		allow: []string{"*.wild.test"}, deny: []string{"0.0.0.0/0"},
		// Before a name resolved to it, the address itself is closed (after,
		// it is open while the answer is valid: docs/network.md's limits).
		before: []probe{
			deny("the address itself, before any lookup", "http://"+webAddr+"/"),
			deny("the address itself, https, before any lookup", "-k https://"+webAddr+"/"),
		},
		probes: []probe{
			reach("subdomain, http", "served-by "+webAddr+":80 host api.wild.test", "http://api.wild.test/"),
			reach("subdomain, https", "sni api.wild.test", "-k https://api.wild.test/"),
			reach("deeper subdomain", "host deep.api.wild.test", "http://deep.api.wild.test/"),
			noName("the wildcard's own domain", "http://wild.test/"),
			deny("the wildcard's own domain at its address, http", "--resolve wild.test:80:"+webAddr+" http://wild.test/"),
			deny("the wildcard's own domain at its address, https", "--resolve wild.test:443:"+webAddr+" -k https://wild.test/"),
			deny("a name that merely ends the same", "--resolve evilwild.test:80:"+webAddr+" http://evilwild.test/"),
			noName("another name", "http://allowed.test/"),
		},
	},
	{
		name: "domain-deny-list",
		deny: []string{"*.wild.test", "denied.test"},
		probes: []probe{
			reach("a name not denied", "host allowed.test", "http://allowed.test/"),
			reach("the wildcard's own domain", "host wild.test", "http://wild.test/"),
			reach("an address not denied", "served-by "+otherAddr+":80", "http://"+otherAddr+"/"),
			noName("denied subdomain", "http://api.wild.test/"),
			deny("denied subdomain at its address, http", "--resolve api.wild.test:80:"+webAddr+" http://api.wild.test/"),
			deny("denied subdomain at its address, https", "--resolve api.wild.test:443:"+webAddr+" -k https://api.wild.test/"),
			noName("denied name", "http://denied.test/"),
		},
	},
	{
		// Listing them opens nothing: these are never reachable.
		name:  "allow-list-cannot-open-blocked-ranges",
		allow: []string{metadataAddr, "10.0.0.0/8", "169.254.0.0/16", hostAddr, "metadata.test", "private.test"},
		deny:  []string{"0.0.0.0/0"},
		probes: []probe{
			deny("cloud metadata", "http://"+metadataAddr+"/"),
			deny("cloud metadata by name", "http://metadata.test/"),
			deny("private host", "http://"+privateAddr+"/"),
			deny("private host by name", "http://private.test/"),
			deny("host service", fmt.Sprintf("http://%s:%d/", hostAddr, hostSvcPort)),
			deny("host API port", fmt.Sprintf("http://%s:%d/health", hostAddr, apiPort)),
			deny("host port 80 (through the egress proxy)", "http://"+hostAddr+"/"),
		},
	},
}

func testList(t *testing.T, w *world, c listCase) {
	network := map[string]any{}
	if c.allow != nil {
		network["allowOut"] = c.allow
	}
	if c.deny != nil {
		network["denyOut"] = c.deny
	}
	id := w.create(t, opts{"network": network})
	checkRules(t, w.info(t, id), c.allow, c.deny)
	if c.before != nil {
		w.probeAll(t, id, c.before)
	}
	w.lookup(t, id, c.lookup...)
	w.probeAll(t, id, c.probes)
}

// lookup resolves names in the sandbox; each must resolve.
func (w *world) lookup(t *testing.T, id string, names ...string) {
	t.Helper()
	for _, n := range names {
		if r := w.run(t, id, "getent hosts "+n); r.ExitCode != 0 {
			t.Errorf("lookup of %s: exit %d %s%s", n, r.ExitCode, r.Stdout, r.Stderr)
		}
	}
}

// testDomainAllowList: allowOut ["allowed.test"] with everything else
// denied lets the sandbox reach allowed.test by name over HTTP and HTTPS,
// and nothing else: other names do not resolve (and are never asked
// upstream), another name on allowed.test's own address is refused by its
// SNI or Host, and the allowed name cannot be used to reach other
// addresses.
func testDomainAllowList(t *testing.T, w *world) {
	id := w.create(t, opts{"network": map[string]any{"allowOut": []string{"allowed.test"}, "denyOut": []string{"0.0.0.0/0"}}})
	checkRules(t, w.info(t, id), []string{"allowed.test"}, []string{"0.0.0.0/0"})
	leak, leak2 := "leak-"+randomName()+".exfil.test", "leak-"+randomName()+".exfil.test"
	w.installDNSProbe(t, id)
	// Before allowed.test resolved to it, its address is closed, also on
	// ports the egress proxy does not see.
	w.probeAll(t, id, []probe{
		deny("the allowed name's address by IP, before any lookup", "http://"+webAddr+"/"),
		deny("the allowed name's address by IP, https, before any lookup", "-k https://"+webAddr+"/"),
		deny("the allowed name's address, another port, before any lookup", fmt.Sprintf("http://%s:%d/", webAddr, altPort)),
	})
	w.probeAll(t, id, []probe{
		reach("allowed name, http", "served-by "+webAddr+":80 host allowed.test", "http://allowed.test/"),
		reach("allowed name, https", "served-by "+webAddr+":443 host allowed.test sni allowed.test", "-k https://allowed.test/"),
		{name: "allowed name resolves", cmd: "getent hosts allowed.test", want: served, marker: webAddr},
		noName("other name", "http://other.test/"),
		noName("denied name", "http://denied.test/"),
		{name: "a name no rule allows is not resolved", cmd: "timeout 10 getent hosts " + leak, want: refused},
		// Asked of the upstream server itself, past resolv.conf: the
		// resolver still answers, and refuses.
		dnsProbe("a name no rule allows, asked of the upstream directly (udp)", leak2, dnsAddr, "udp", "rcode 3 "),
		dnsProbe("a name no rule allows, asked of the upstream directly (tcp)", leak2, dnsAddr, "tcp", "rcode 3 "),
		dnsProbe("the allowed name, asked of another server", "allowed.test", otherAddr, "udp", "answer "+webAddr),
		deny("other name on the allowed address, http (Host)", "--resolve other.test:80:"+webAddr+" http://other.test/"),
		deny("other name on the allowed address, https (SNI)", "--resolve other.test:443:"+webAddr+" -k https://other.test/"),
		deny("denied name at its address", "--resolve denied.test:80:"+otherAddr+" http://denied.test/"),
		deny("another address", "http://"+otherAddr+"/"),
		deny("allowed name pointed at cloud metadata", "--resolve allowed.test:80:"+metadataAddr+" http://allowed.test/"),
		deny("allowed name pointed at a private host", "--resolve allowed.test:80:"+privateAddr+" http://allowed.test/"),
		{
			name: "allowed Host header sent to another address", cmd: "curl -sS -m 3 -H 'Host: allowed.test' http://" + otherAddr + "/", want: refused,
			why: "198.51.100.7 is outside the allow list and allowed.test never resolved to it: the egress proxy must not let a Host header open any address",
		},
		{
			name: "allowed SNI sent to another address", cmd: "curl -sS -m 3 --resolve allowed.test:443:" + otherAddr + " -k https://allowed.test/", want: refused,
			why: "198.51.100.7 is outside the allow list and allowed.test never resolved to it: the egress proxy must not let an SNI open any address",
		},
	})
	for _, n := range []string{leak, leak2} {
		if w.dns.asked(n) {
			t.Errorf("the upstream DNS server was asked for %s, a name the policy refuses", n)
		}
	}
}
