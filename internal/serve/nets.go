package serve

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/hutch-sandbox/hutch/internal/network"
	"github.com/hutch-sandbox/hutch/internal/network/egress"
	"github.com/hutch-sandbox/hutch/internal/network/policy"
	"github.com/hutch-sandbox/hutch/internal/network/resolver"
)

// sandboxNets is the network side of `hutch serve`: the network manager
// (links and firewall), the resolver every sandbox's DNS goes to, and the
// egress proxy that enforces domain rules on web traffic.
type sandboxNets struct {
	mgr   *network.Manager
	res   *resolver.Resolver
	proxy *egress.Proxy

	udp     net.PacketConn
	tcp     net.Listener
	proxyLn net.Listener
	cancel  context.CancelFunc
}

// proxyCaps divides the server's descriptors: each connection through the
// egress proxy holds two (the sandbox's side and the way out), so the
// proxy may hold an eighth of the open-file limit in connections, a
// quarter of the descriptors, beside the half that client connections may
// take (see serveConns) and what sandboxes and the rest of the server
// need. With the proxy's old fixed 16384, nine sandboxes holding 1000
// kept-alive connections each took all 20 000 of serve's descriptors and
// the API stopped answering (review 3). One sandbox gets at most an eighth
// of that (at least 64), and never more than its flow cap, so that one
// tenant's sandboxes fill it only together.
func proxyCaps(nofile, flows int) (total, each int) {
	total = max(nofile/8, 64)
	each = min(flows, max(total/8, 64))
	return total, each
}

// startNetworks makes the network manager and the services' listeners; the
// firewall is written by the sandbox manager's Recover, then serve starts
// the services.
func startNetworks(ctx context.Context, cidr string, upstream []string, maxConns uint32, logger *slog.Logger) (*sandboxNets, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("--network-cidr: %w", err)
	}
	nofile, err := openFileLimit()
	if err != nil {
		return nil, err
	}
	proxyTotal, proxyEach := proxyCaps(nofile, int(maxConns))
	logger.Info("egress proxy", "max-conns", proxyTotal, "max-conns-per-sandbox", proxyEach)
	n := &sandboxNets{}
	n.proxy = egress.New(egress.Options{
		Policy:            func(a netip.Addr) (*policy.Egress, bool) { return n.mgr.Policy(a) },
		Resolved:          func(client, dst netip.Addr) bool { return n.mgr.Resolved(client, dst) },
		Dial:              network.DialEgress,
		MaxConns:          proxyTotal,
		MaxConnsPerClient: proxyEach,
		Logger:            logger.With("component", "egress-proxy"),
	})
	n.mgr, err = network.New(network.Options{
		Prefix: prefix, MaxConns: maxConns, Logger: logger.With("component", "network"),
		OnUpdate: func(sandbox netip.Addr) { n.proxy.Recheck(sandbox) },
	})
	if err != nil {
		return nil, err
	}
	n.res, err = resolver.New(resolver.Options{
		Upstream: upstream,
		Policy:   n.mgr.Policy,
		OnAnswer: n.mgr.Answered,
		Logger:   logger.With("component", "resolver"),
	})
	if err != nil {
		return nil, err
	}
	ports := n.mgr.Ports()
	if n.udp, err = net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", ports.Resolver)); err != nil {
		return nil, fmt.Errorf("sandboxes' resolver: %w", err)
	}
	if n.tcp, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", ports.Resolver)); err != nil {
		n.udp.Close()
		return nil, fmt.Errorf("sandboxes' resolver: %w", err)
	}
	if n.proxyLn, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", ports.Proxy)); err != nil {
		n.udp.Close()
		n.tcp.Close()
		return nil, fmt.Errorf("sandboxes' egress proxy: %w", err)
	}
	return n, nil
}

// manager is nil for a nil sandboxNets (serve --network=false).
func (n *sandboxNets) manager() *network.Manager {
	if n == nil {
		return nil
	}
	return n.mgr
}

// serve starts the resolver and the proxy; they stop with close.
func (n *sandboxNets) serve(ctx context.Context) error {
	ctx, n.cancel = context.WithCancel(ctx)
	go n.res.Serve(ctx, n.udp, n.tcp)
	go n.proxy.Serve(ctx, n.proxyLn)
	return nil
}

func (n *sandboxNets) close() {
	if n.cancel != nil {
		n.cancel()
	}
	n.mgr.Close()
	n.udp.Close()
	n.tcp.Close()
	n.proxyLn.Close()
}
