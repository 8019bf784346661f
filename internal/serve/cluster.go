package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hutch-sandbox/hutch/internal/cluster"
	"github.com/hutch-sandbox/hutch/internal/connlimit"
)

// ClusterConfig makes the server one node of a cluster (internal/cluster).
type ClusterConfig struct {
	// Node is this node: its name, advertised URL, labels, lease. Its
	// DataDir, Capacity, Transport and Logger are filled in by Open.
	Node cluster.Config
	// Listen is the node's cluster listener (mutual TLS with TLS).
	Listen string
	// TLS are the node's certificate and the cluster CA.
	TLS cluster.TLSFiles
	// Etcd is how the node reaches etcd; Embed, when set, runs an etcd
	// member in this process first.
	Etcd  cluster.ClientConfig
	Embed *cluster.EmbedConfig
}

// The cluster listener's caps: connections from one address (another
// node's forwarded streams), and from all.
const (
	peerConnsPerClient = 1024
	peerConnsTotal     = 2048
)

// clusterParts are what a cluster node runs beside a single server.
type clusterParts struct {
	member *cluster.Member
	cli    *clientv3.Client
	node   *cluster.Node
	peer   *http.Server
	ln     net.Listener
}

// openCluster starts the embedded etcd member (if any), connects to etcd
// and makes the node, which Open hands to the manager and the router.
func openCluster(ctx context.Context, c *ClusterConfig, dataDir string, memoryMB int, maxSandboxes int, logger *slog.Logger) (_ *clusterParts, retErr error) {
	p := &clusterParts{}
	defer func() {
		if retErr != nil {
			p.close()
		}
	}()
	clientTLS, err := c.TLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	serverTLS, err := c.TLS.ServerConfig()
	if err != nil {
		return nil, err
	}
	// The cluster listener first: a port in use stops the node before it
	// joins anything.
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster listener: %w", err)
	}
	// Capped as the public listener is: only nodes get past the
	// handshake, but anyone who reaches the port can open connections.
	capped := connlimit.New(ln, connlimit.Options{PerClient: peerConnsPerClient, Total: peerConnsTotal, Logger: logger})
	p.ln = capped
	if c.Embed != nil {
		e := *c.Embed
		e.Logger = logger
		e.TLS = c.TLS
		if p.member, err = cluster.StartMember(ctx, e); err != nil {
			return nil, err
		}
	}
	if p.cli, err = cluster.Dial(c.Etcd); err != nil {
		return nil, err
	}
	nc := c.Node
	nc.DataDir = dataDir
	nc.Logger = logger
	nc.Capacity = cluster.Capacity{CPUs: runtime.NumCPU(), MemoryMB: cluster.MemoryTotalMB(), Sandboxes: maxSandboxes, SandboxMemoryMB: memoryMB}
	nc.Transport = &http.Transport{
		TLSClientConfig:     clientTLS,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 64,
		// Past the peer's cap a request waits for a connection rather
		// than being refused.
		MaxConnsPerHost: peerConnsPerClient,
		IdleConnTimeout: 90 * time.Second,
		// HTTP/1.1 between nodes: upgrades (WebSockets) pass as they are.
		ForceAttemptHTTP2: false,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	p.node = cluster.New(p.cli, nc)
	// ReadHeaderTimeout also bounds the TLS handshake (net/http): nodes
	// on one network handshake in milliseconds, a client without a
	// cluster certificate holds a connection no longer than this.
	p.peer = &http.Server{TLSConfig: serverTLS, ReadHeaderTimeout: 3 * time.Second, IdleTimeout: 2 * time.Minute,
		ConnState: capped.ConnState, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug)}
	return p, nil
}

// serve starts the cluster listener with handler (forwarded requests) and
// the node's membership.
func (p *clusterParts) serve(s *Server, handler http.Handler, logger *slog.Logger) {
	p.peer.Handler = handler
	go func() {
		if err := p.peer.ServeTLS(p.ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("cluster listener", "err", err)
		}
	}()
	p.node.Start(s.Manager, s.Store, s.templates)
	logger.Info("cluster node", "name", p.node.Name(), "listen", p.ln.Addr().String())
}

func (p *clusterParts) close() {
	if p == nil {
		return
	}
	if p.peer != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p.peer.Shutdown(ctx)
		cancel()
	} else if p.ln != nil {
		p.ln.Close()
	}
	if p.node != nil {
		p.node.Close()
	}
	if p.cli != nil {
		p.cli.Close()
	}
	if p.member != nil {
		p.member.Close()
	}
}
