package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// originalDst returns the destination a connection redirected by
// netfilter (nftables "redirect", iptables REDIRECT) had before the
// redirect, read from conntrack with getsockopt(SOL_IP, SO_ORIGINAL_DST).
// Sandboxes have IPv4 only, so only IPv4 destinations are asked for.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	// The kernel answers a struct sockaddr_in (16 bytes). x/sys has no
	// getter for it, but IPv6Mreq is a 20-byte buffer the kernel fills the
	// same way: the usual way to ask for SO_ORIGINAL_DST from Go.
	var (
		mreq    *unix.IPv6Mreq
		sockErr error
	)
	if err := rc.Control(func(fd uintptr) {
		mreq, sockErr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	}); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if sockErr != nil {
		// ENOENT: conntrack knows no such connection (it was not redirected).
		return netip.AddrPort{}, fmt.Errorf("original destination: getsockopt SO_ORIGINAL_DST: %w", sockErr)
	}
	return parseSockaddrInet4(mreq.Multiaddr[:])
}

// parseSockaddrInet4 decodes a struct sockaddr_in: the family in host
// byte order, then the port and the address in network byte order.
func parseSockaddrInet4(b []byte) (netip.AddrPort, error) {
	if len(b) < 8 {
		return netip.AddrPort{}, errors.New("original destination: short sockaddr")
	}
	if family := binary.NativeEndian.Uint16(b[0:2]); family != unix.AF_INET {
		return netip.AddrPort{}, fmt.Errorf("original destination: address family %d, want AF_INET", family)
	}
	port := binary.BigEndian.Uint16(b[2:4])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
}
