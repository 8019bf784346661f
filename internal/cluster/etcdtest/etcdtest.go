// Package etcdtest starts embedded etcd members
// (go.etcd.io/etcd/server/v3/embed) on loopback ports in a directory of
// their own, alone or as one cluster, for the tests of internal/cluster and
// the cluster benchmark.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Member is one embedded etcd member started by Start.
type Member struct {
	Name      string
	ClientURL string // http://127.0.0.1:PORT
	PeerURL   string // http://127.0.0.1:PORT
	Etcd      *embed.Etcd

	closeOnce sync.Once
}

// Close stops the member (handing leadership over first if it leads) and
// closes its listeners; a second Close does nothing (embed.Etcd.Close
// panics when called twice).
func (m *Member) Close() {
	m.closeOnce.Do(m.Etcd.Close)
}

// Start starts one embedded member per name, each in DIR/NAME with a client
// and a peer port on 127.0.0.1 picked free, together as one new cluster
// (initial-cluster lists them all), and waits until every one is ready to
// serve (a leader is elected and each has published itself) or timeout has
// passed. Each member logs (warnings and errors) to DIR/NAME.log. On error it closes whatever it started.
func Start(dir string, names []string, timeout time.Duration) ([]*Member, error) {
	members := make([]*Member, len(names))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := FreePorts(2 * len(names))
	if err != nil {
		return nil, err
	}
	var initial []string
	for i, name := range names {
		members[i] = &Member{
			Name:      name,
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		initial = append(initial, name+"="+members[i].PeerURL)
	}
	started := make([]*Member, 0, len(members))
	stop := func() {
		for _, m := range started {
			m.Close()
		}
	}
	for _, m := range members {
		cfg := embed.NewConfig()
		cfg.Name = m.Name
		cfg.Dir = filepath.Join(dir, m.Name)
		cu, _ := url.Parse(m.ClientURL)
		pu, _ := url.Parse(m.PeerURL)
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "hutch-spike"
		cfg.ClusterState = embed.ClusterStateFlagNew
		// etcd logs every election and lost peer, and an error for each
		// listener that Close closes: to DIR/NAME.log, not the test's
		// output.
		cfg.LogLevel = "warn"
		cfg.LogOutputs = []string{filepath.Join(dir, m.Name+".log")}
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			stop()
			return nil, fmt.Errorf("start etcd member %s: %w", m.Name, err)
		}
		m.Etcd = e
		started = append(started, m)
	}
	deadline := time.After(timeout)
	for _, m := range members {
		select {
		case <-m.Etcd.Server.ReadyNotify():
		case err := <-m.Etcd.Err():
			stop()
			return nil, fmt.Errorf("etcd member %s: %w", m.Name, err)
		case <-deadline:
			stop()
			return nil, fmt.Errorf("etcd member %s not ready after %s", m.Name, timeout)
		}
	}
	return members, nil
}

// FreePorts returns n TCP ports on 127.0.0.1 that were free a moment ago
// (held together so that they differ). etcd's embed.Config takes URLs, not
// listeners, and a cluster's members must know each other's peer URLs
// before any of them starts, so port 0 cannot be used.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
