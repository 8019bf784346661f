package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// EmbedConfig configures an etcd member embedded in `hutch serve`: the
// cluster's store runs in 1, 3 or 5 of its nodes, fixed when the cluster
// is made; the other nodes are its clients.
type EmbedConfig struct {
	// Name is the member's name in InitialCluster.
	Name string
	// Dir holds the member's data (0700).
	Dir string
	// PeerURL is where the other members reach this one; ClientURL where
	// clients do. https URLs use TLS with client certificates of the
	// cluster CA.
	PeerURL, ClientURL string
	// InitialCluster is every voter, "name=peerURL,…", as etcd's
	// --initial-cluster; read at the member's first start only.
	InitialCluster string
	TLS            TLSFiles
	Logger         *slog.Logger
}

// Member is an embedded etcd member.
type Member struct {
	etcd *embed.Etcd
	once sync.Once
}

// StartMember starts an embedded member and waits until it serves, which
// needs a majority of InitialCluster up: it logs while it waits.
func StartMember(ctx context.Context, c EmbedConfig) (*Member, error) {
	if n := len(strings.Split(c.InitialCluster, ",")); n != 1 && n != 3 && n != 5 {
		return nil, fmt.Errorf("--etcd-initial-cluster names %d members: an embedded etcd has 1, 3 or 5 voters (the other nodes join as its clients)", n)
	}
	pu, err := url.Parse(c.PeerURL)
	if err != nil || pu.Host == "" {
		return nil, fmt.Errorf("--etcd-peer-url %q: want a URL such as https://10.0.0.1:2380", c.PeerURL)
	}
	cu, err := url.Parse(c.ClientURL)
	if err != nil || cu.Host == "" {
		return nil, fmt.Errorf("--etcd-client-url %q: want a URL such as https://10.0.0.1:2379", c.ClientURL)
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = c.Dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = c.InitialCluster
	cfg.ClusterState = embed.ClusterStateFlagNew // ignored once Dir has data
	cfg.InitialClusterToken = "hutch-" + clusterToken(c.TLS.CA)
	// Only the last 10,000 revisions are kept (compacted every 5 min):
	// the store holds current records, not history, and its file would
	// otherwise grow with every write until etcd's quota stops them all.
	cfg.AutoCompactionMode = "revision"
	cfg.AutoCompactionRetention = "10000"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(c.Dir, "etcd.log")}
	tlsInfo := transport.TLSInfo{CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, TrustedCAFile: c.TLS.CA, ClientCertAuth: true}
	if pu.Scheme == "https" {
		cfg.PeerTLSInfo = tlsInfo
	}
	if cu.Scheme == "https" {
		cfg.ClientTLSInfo = tlsInfo
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start the embedded etcd member %s: %w", c.Name, err)
	}
	m := &Member{etcd: e}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-e.Server.ReadyNotify():
			c.Logger.Info("etcd member ready", "name", c.Name, "peer", c.PeerURL, "client", c.ClientURL)
			return m, nil
		case err := <-e.Err():
			m.Close()
			return nil, fmt.Errorf("embedded etcd member %s: %w", c.Name, err)
		case <-tick.C:
			c.Logger.Info("waiting for a majority of the etcd members", "initial cluster", c.InitialCluster)
		case <-ctx.Done():
			m.Close()
			return nil, ctx.Err()
		}
	}
}

// Close stops the member, handing leadership over first if it leads. A
// second Close does nothing (etcd's panics).
func (m *Member) Close() { m.once.Do(m.etcd.Close) }

// clusterToken ties a new etcd cluster to the cluster CA: members made
// with another CA cannot join it by mistake.
func clusterToken(caFile string) string {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return "plain"
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// ClientConfig says how a node reaches etcd.
type ClientConfig struct {
	Endpoints []string
	// TLS, for https endpoints: etcdctl's --cacert, --cert and --key.
	TLS TLSFiles
}

// Dial connects to etcd. It does not wait for it: the node's lease loop
// retries until the cluster answers.
func Dial(c ClientConfig) (*clientv3.Client, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("cluster mode needs etcd: --etcd-endpoints, or --etcd-embed")
	}
	cfg := clientv3.Config{
		Endpoints:   c.Endpoints,
		DialTimeout: 5 * time.Second,
		// Failures are this package's to log, with context.
		Logger: zap.NewNop(),
		// Past a partition the client must notice the dead connection
		// rather than wait on it: keepalives on gRPC's connection.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		// Every member's client URL, from the member list, whatever the
		// node was given: a node whose own member is slow to rejoin after
		// a partition reaches etcd through another (measured: 25 s until
		// a deposed leader's member served again).
		AutoSyncInterval: 10 * time.Second,
		// gRPC's reconnect backoff grows to 2 minutes: after a long
		// partition a healed link would wait that long to be tried.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		}), grpc.WithChainUnaryInterceptor(retryElsewhere)},
	}
	if strings.HasPrefix(c.Endpoints[0], "https://") {
		info := transport.TLSInfo{CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, TrustedCAFile: c.TLS.CA}
		tc, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
		cfg.TLS = tc
	}
	return clientv3.New(cfg)
}

// Tries of one etcd call (retryElsewhere): attemptTimeout caps each of
// the first tries, the last has what is left of the caller's deadline.
const (
	callTries      = 4
	attemptTimeout = time.Second
)

// idempotent lists the etcd calls that may be sent again after a try that
// timed out, which may still be applied: reads, and writes whose second
// application changes nothing (a Put of the same value, a Delete, a lease
// granted twice, whose spare expires). Txn, which Hutch uses for
// compare-and-set, is not among them.
var idempotent = map[string]bool{
	"/etcdserverpb.KV/Range":           true,
	"/etcdserverpb.KV/Put":             true,
	"/etcdserverpb.KV/DeleteRange":     true,
	"/etcdserverpb.Cluster/MemberList": true,
	"/etcdserverpb.Lease/LeaseGrant":   true,
}

// retryElsewhere sends a unary call again, at once, to the next member
// (the client's balancer takes turns): when the member it reached has no
// leader, and, for an idempotent call, when a try took attemptTimeout. A
// member that rejoins after a partition answers "no leader" for seconds,
// then lags while it catches up: the calls that reached it, a node's join
// among them, waited out their deadlines while two members of three
// answered at once (measured: a node took creates again 12.7 s after the
// heal). A "no leader" answer is safe to retry for any call: a member
// gives it to a call that requires a leader before handling it (etcd's
// v3rpc interceptor), so nothing was applied. Hand-written: gRPC's and
// go-grpc-middleware's retries go by status code alone, and neither caps
// a try short of the caller's deadline.
func retryElsewhere(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var err error
	for try := range callTries {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); try < callTries-1 && idempotent[method] && (!ok || time.Until(dl) > 2*attemptTimeout) {
			actx, cancel = context.WithTimeout(ctx, attemptTimeout)
		}
		err = invoker(actx, method, req, reply, cc, opts...)
		timedOut := actx.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		s, ok := status.FromError(err)
		noLeader := ok && s.Code() == codes.Unavailable && s.Message() == rpctypes.ErrorDesc(rpctypes.ErrGRPCNoLeader)
		if !noLeader && !timedOut {
			return err
		}
		if noLeader && try >= 2 { // every member asked: give one a moment to learn its leader
			select {
			case <-ctx.Done():
				return err
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return err
}
