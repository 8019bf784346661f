package policy

import (
	"net/netip"
	"testing"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"1.2.3.4", "1.2.3.4/32", false},
		{"10.1.2.3/8", "10.0.0.0/8", false},
		{"0.0.0.0/0", "0.0.0.0/0", false},
		{"Example.COM.", "example.com", false},
		{"*.example.com", "*.example.com", false},
		{"_srv.example.com", "_srv.example.com", false},
		{"::1", "", true},
		{"2001:db8::/32", "", true},
		{"localhost", "", true}, // one label
		{"*.com.*", "", true},
		{"a..b", "", true},
		{"-a.com", "", true},
		{"exa mple.com", "", true},
		{"", "", true},
		{"1.2.3.4/33", "", true},
	}
	for _, tt := range tests {
		r, err := ParseRule(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseRule(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && r.String() != tt.want {
			t.Errorf("ParseRule(%q) = %q, want %q", tt.in, r.String(), tt.want)
		}
	}
}

func TestMatchName(t *testing.T) {
	exact, _ := ParseRule("example.com")
	wild, _ := ParseRule("*.example.com")
	tests := []struct {
		rule Rule
		name string
		want bool
	}{
		{exact, "example.com", true},
		{exact, "EXAMPLE.com.", true},
		{exact, "www.example.com", false},
		{exact, "notexample.com", false},
		{wild, "www.example.com", true},
		{wild, "a.b.example.com", true},
		{wild, "example.com", false},
		{wild, "badexample.com", false},
	}
	for _, tt := range tests {
		if got := tt.rule.MatchName(tt.name); got != tt.want {
			t.Errorf("%s matches %q = %v, want %v", tt.rule, tt.name, got, tt.want)
		}
	}
}

func TestEgress(t *testing.T) {
	open, _ := Parse(true, nil, nil)
	none, _ := Parse(false, []string{"1.1.1.1"}, nil)
	allowList, _ := Parse(true, []string{"203.0.113.0/28", "example.com", "*.good.test"}, []string{"0.0.0.0/0"})
	denyList, _ := Parse(true, []string{"198.51.100.7"}, []string{"198.51.100.0/24", "bad.test"})
	a := netip.MustParseAddr
	tests := []struct {
		name     string
		e        *Egress
		addr     string
		host     string // SNI or Host; "" unknown
		resolved bool   // the address answered a query for an allowed name
		want     bool
	}{
		{"open: public address", open, "203.0.113.10", "", false, true},
		{"open: metadata", open, "169.254.169.254", "", false, false},
		{"open: private", open, "10.1.2.3", "", false, false},
		{"open: private 192.168", open, "192.168.1.1", "", false, false},
		{"open: CGNAT", open, "100.64.0.1", "", false, false},
		{"open: loopback", open, "127.0.0.1", "", false, false},
		{"open: multicast", open, "224.0.0.251", "", false, false},
		{"no internet: even an allowed address", none, "1.1.1.1", "", false, false},
		{"allow list: allowed CIDR", allowList, "203.0.113.5", "", false, true},
		{"allow list: other address", allowList, "198.51.100.1", "", false, false},
		{"allow list: address of an allowed name", allowList, "198.51.100.1", "", true, true},
		{"allow list: allowed name by SNI", allowList, "198.51.100.1", "example.com", true, true},
		{"allow list: other name on the same address", allowList, "198.51.100.1", "other.test", true, false},
		{"allow list: wildcard", allowList, "198.51.100.1", "api.good.test", true, true},
		{"allow list: an allowed name sent to any other address", allowList, "198.51.100.99", "example.com", false, false},
		{"allow list: an allowed name to an allowed CIDR", allowList, "203.0.113.5", "example.com", false, true},
		{"open: an allowed name to an unresolved public address", open, "198.51.100.99", "example.com", false, true},
		{"allow list: wildcard does not cover the base", allowList, "198.51.100.1", "good.test", true, false},
		{"allow list: never private, even by name", allowList, "10.0.0.1", "example.com", true, false},
		{"deny list: denied CIDR", denyList, "198.51.100.9", "", false, false},
		{"deny list: allow wins over deny", denyList, "198.51.100.7", "", false, true},
		{"deny list: other address", denyList, "203.0.113.1", "", false, true},
		{"deny list: denied name", denyList, "203.0.113.1", "bad.test", false, false},
		{"deny list: other name", denyList, "203.0.113.1", "fine.test", false, true},
	}
	for _, tt := range tests {
		if got := tt.e.AllowsConn(a(tt.addr), tt.host, tt.resolved); got != tt.want {
			t.Errorf("%s: AllowsConn(%s, %q, %v) = %v, want %v", tt.name, tt.addr, tt.host, tt.resolved, got, tt.want)
		}
	}
}

func TestAllowsLookup(t *testing.T) {
	open, _ := Parse(true, nil, []string{"bad.test", "*.bad.test"})
	allowList, _ := Parse(true, []string{"example.com"}, []string{"0.0.0.0/0"})
	none, _ := Parse(false, []string{"example.com"}, nil)
	tests := []struct {
		e    *Egress
		name string
		want bool
	}{
		{open, "example.com", true},
		{open, "bad.test", false},
		{open, "x.bad.test", false},
		{allowList, "example.com", true},
		{allowList, "other.test", false},
		{none, "example.com", false},
	}
	for _, tt := range tests {
		if got := tt.e.AllowsLookup(tt.name); got != tt.want {
			t.Errorf("AllowsLookup(%q) = %v, want %v (policy %+v)", tt.name, got, tt.want, tt.e)
		}
	}
	if !allowList.DeniesAll() || open.DeniesAll() || !none.DeniesAll() {
		t.Error("DeniesAll")
	}
	if !allowList.HasDomains() {
		t.Error("HasDomains")
	}
}
