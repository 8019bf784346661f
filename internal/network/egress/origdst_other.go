//go:build !linux

package egress

import (
	"errors"
	"net"
	"net/netip"
)

// originalDst needs Linux's conntrack (SO_ORIGINAL_DST); elsewhere the
// proxy only runs with Options.OriginalDst set (as its tests do).
func originalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("original destination: SO_ORIGINAL_DST needs Linux")
}
