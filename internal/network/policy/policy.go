// Package policy is a sandbox's egress policy as E2B's SDK expresses it
// (allowInternetAccess, network.allowOut and network.denyOut, spec §2.4),
// and how one connection or DNS name is judged against it. It holds no
// state and does no I/O: the firewall, the DNS resolver and the SNI proxy
// of internal/network all ask it the same questions.
//
// The rules, in order:
//  1. Addresses no sandbox may ever reach (loopback, link-local and cloud
//     metadata, private ranges, the host, other sandboxes, multicast) are
//     denied whatever the lists say: see AlwaysBlocked.
//  2. Without internet access everything else is denied too.
//  3. A name or address matching AllowOut is allowed; AllowOut wins over
//     DenyOut, so {denyOut: ["0.0.0.0/0"], allowOut: [...]} is an allow list.
//  4. A name or address matching DenyOut is denied.
//  5. Anything else is allowed.
package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Rule is one entry of allowOut or denyOut: an address range or a domain.
type Rule struct {
	// Prefix is set for IP and CIDR rules ("1.2.3.4" is 1.2.3.4/32).
	Prefix netip.Prefix
	// Domain is set for name rules: "example.com" matches that name only,
	// "*.example.com" every name below it (not example.com itself).
	// Lower case, without a trailing dot.
	Domain string
}

// String returns the rule as it would be written in a request.
func (r Rule) String() string {
	if r.Domain != "" {
		return r.Domain
	}
	return r.Prefix.String()
}

// IsDomain reports whether the rule names a domain.
func (r Rule) IsDomain() bool { return r.Domain != "" }

// ParseRule parses an IP address, a CIDR, a domain name or a wildcard
// domain ("*.example.com").
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, errors.New("empty rule")
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		if !p.Addr().Is4() {
			return Rule{}, fmt.Errorf("rule %.80q: only IPv4 ranges (sandboxes have IPv4 only)", s)
		}
		return Rule{Prefix: p.Masked()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if !a.Is4() {
			return Rule{}, fmt.Errorf("rule %.80q: only IPv4 addresses (sandboxes have IPv4 only)", s)
		}
		return Rule{Prefix: netip.PrefixFrom(a, 32)}, nil
	}
	d := strings.TrimSuffix(strings.ToLower(s), ".")
	name := strings.TrimPrefix(d, "*.")
	if !validName(name) || strings.Contains(name, "*") {
		return Rule{}, fmt.Errorf("rule %.80q is neither an IPv4 address, a CIDR nor a domain name", s)
	}
	return Rule{Domain: d}, nil
}

// validName reports whether s is a DNS name of at least two labels of
// letters, digits and hyphens (underscores allowed, as in SRV names).
func validName(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// MatchName reports whether a domain rule matches name (any case, with or
// without a trailing dot). IP rules match no name.
func (r Rule) MatchName(name string) bool {
	if r.Domain == "" {
		return false
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if base, ok := strings.CutPrefix(r.Domain, "*."); ok {
		return strings.HasSuffix(name, "."+base)
	}
	return name == r.Domain
}

// Egress is a sandbox's outbound policy.
type Egress struct {
	// Internet is allowInternetAccess: false denies all egress.
	Internet bool
	// Allow and Deny are network.allowOut and network.denyOut.
	Allow, Deny []Rule
}

// Parse builds a policy from a create or update request's fields.
func Parse(internet bool, allowOut, denyOut []string) (*Egress, error) {
	e := &Egress{Internet: internet}
	for _, list := range []struct {
		in  []string
		out *[]Rule
	}{{allowOut, &e.Allow}, {denyOut, &e.Deny}} {
		for _, s := range list.in {
			r, err := ParseRule(s)
			if err != nil {
				return nil, err
			}
			*list.out = append(*list.out, r)
		}
	}
	return e, nil
}

// Verdict is a policy's answer.
type Verdict int

// The verdicts: Allow and Deny are final; Unmatched means no rule of the
// kind asked about matched (the caller goes on to other evidence).
const (
	Unmatched Verdict = iota
	Allow
	Deny
)

// Name judges a DNS name (from a DNS query, a TLS SNI or an HTTP Host)
// against the domain rules only.
func (e *Egress) Name(name string) Verdict {
	if !e.Internet {
		return Deny
	}
	for _, r := range e.Allow {
		if r.MatchName(name) {
			return Allow
		}
	}
	for _, r := range e.Deny {
		if r.MatchName(name) {
			return Deny
		}
	}
	return Unmatched
}

// Addr judges a destination address against the address rules, rules 1 to
// 5 above; resolvedAllowed says whether the address was an answer to a
// DNS query for a name AllowOut allows (the firewall cannot see names).
func (e *Egress) Addr(a netip.Addr, resolvedAllowed bool) Verdict {
	if AlwaysBlocked(a) || !e.Internet {
		return Deny
	}
	if resolvedAllowed {
		return Allow
	}
	for _, r := range e.Allow {
		if r.Prefix.IsValid() && r.Prefix.Contains(a) {
			return Allow
		}
	}
	for _, r := range e.Deny {
		if r.Prefix.IsValid() && r.Prefix.Contains(a) {
			return Deny
		}
	}
	return Allow
}

// AllowsConn judges a connection to a, made for name when the name is
// known (TLS SNI, HTTP Host; "" when not). A denied name is refused; an
// allowed name still needs an address an allowed name resolved to (or one
// the address rules allow), since the client chooses the name it sends; a
// name no rule mentions is judged by the address rules alone. A connection to an
// address allowed only because an allowed name resolved to it, made for
// another name, is denied: that is how a domain rule is kept from opening
// every site sharing the same address.
func (e *Egress) AllowsConn(a netip.Addr, name string, resolvedAllowed bool) bool {
	if AlwaysBlocked(a) || !e.Internet {
		return false
	}
	if name != "" {
		switch e.Name(name) {
		case Allow:
			// The name alone proves nothing: a client writes any SNI or
			// Host it likes. The address must be one an allowed name
			// resolved to, or allowed by itself.
			return resolvedAllowed || e.Addr(a, false) == Allow
		case Deny:
			return false
		}
		return e.Addr(a, false) == Allow
	}
	return e.Addr(a, resolvedAllowed) == Allow
}

// AllowsLookup reports whether the resolver may answer a query for name:
// names the domain rules allow, and, unless the policy denies every
// address (an allow list), names no rule denies.
func (e *Egress) AllowsLookup(name string) bool {
	switch e.Name(name) {
	case Allow:
		return true
	case Deny:
		return false
	}
	return !e.DeniesAll()
}

// DeniesAll reports whether addresses that match no rule are denied: no
// internet, or a DenyOut rule covering every address.
func (e *Egress) DeniesAll() bool {
	if !e.Internet {
		return true
	}
	for _, r := range e.Deny {
		if r.Prefix.IsValid() && r.Prefix.Bits() == 0 {
			return true
		}
	}
	return false
}

// HasDomains reports whether any rule names a domain (then DNS answers and
// the names of TLS and HTTP connections matter).
func (e *Egress) HasDomains() bool {
	for _, rs := range [][]Rule{e.Allow, e.Deny} {
		for _, r := range rs {
			if r.IsDomain() {
				return true
			}
		}
	}
	return false
}

// alwaysBlocked are the ranges no sandbox reaches, whatever its policy
// (IANA special-purpose registry, the parts that are not the internet).
var alwaysBlocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),     // private
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback (the host's, seen from outside)
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata
	netip.MustParsePrefix("172.16.0.0/12"),  // private
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"), // private
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, broadcast
}

// AlwaysBlockedPrefixes returns the ranges AlwaysBlocked denies, for the
// firewall.
func AlwaysBlockedPrefixes() []netip.Prefix { return append([]netip.Prefix(nil), alwaysBlocked...) }

// AlwaysBlocked reports whether a is in a range no sandbox may reach. The
// host's own public addresses are not known here: the firewall denies
// traffic to the host by its input hook, not by address.
func AlwaysBlocked(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() {
		return true // sandboxes have IPv4 only
	}
	for _, p := range alwaysBlocked {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
