package native

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// icmpRate is how many bytes of ICMP (v4 and v6 each) the sandbox's
// network namespace takes in per second; burst is how far past it one
// moment may go. ICMP ("ping") sockets queue the replies they get
// uncharged to any cgroup (sockguard.go), and over loopback the kernel
// answers a sandbox's own echo requests as fast as it sends them: ~2.5
// GB/s of queued replies on one CPU, so that the guard's quarter-second
// poll saw half a gigabyte parked before its first look. At this rate a
// poll's worth is a few MiB; ping, traceroute and path MTU discovery use
// a tiny fraction of it.
const (
	icmpRate  = 16 << 20
	icmpBurst = 2 << 20
)

// limitICMP makes the table "inet hutch-sandbox" in the sandbox's network
// namespace (the calling thread's), whose input chain drops ICMP past
// icmpRate. Sandbox processes lack CAP_NET_ADMIN and cannot change it. A
// kernel without nf_tables gets no limit, and the socket guard alone
// bounds the queues.
func limitICMP() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "hutch-sandbox"})
	policy := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{
		Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &policy,
	})
	for _, proto := range []byte{unix.IPPROTO_ICMP, unix.IPPROTO_ICMPV6} {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Limit{Type: expr.LimitTypePktBytes, Rate: icmpRate, Unit: expr.LimitTimeSecond, Burst: icmpBurst, Over: true},
			&expr.Verdict{Kind: expr.VerdictDrop},
		}})
	}
	if err := c.Flush(); err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
			return nil
		}
		return fmt.Errorf("limit ICMP: %w", err)
	}
	return nil
}
