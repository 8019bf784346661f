package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hutch-sandbox/hutch/internal/cluster"
	"github.com/hutch-sandbox/hutch/internal/serve"
)

// clusterFlags are hutch serve's cluster flags (docs/cluster.md).
type clusterFlags struct {
	on                           bool
	nodeName, listen, advertise  string
	ca, cert, key                string
	lease                        time.Duration
	labels                       map[string]string
	endpoints                    []string
	etcdCA, etcdCert, etcdKey    string
	embed                        bool
	etcdName, peerURL, clientURL string
	initial, etcdDir             string
}

func (f *clusterFlags) register(fs *pflag.FlagSet) {
	fs.BoolVar(&f.on, "cluster", false, "run as one node of a cluster on etcd: any node takes every call and routes it to the node that runs the sandbox (docs/cluster.md)")
	fs.StringVar(&f.nodeName, "node-name", "", "this node's name, unique in the cluster (default: the host name)")
	fs.StringVar(&f.listen, "cluster-listen", ":7443", "address of the node-to-node listener (mutual TLS with the cluster CA)")
	fs.StringVar(&f.advertise, "advertise-url", "", "URL other nodes reach --cluster-listen by, such as https://10.0.0.1:7443 (default: https://NODE-NAME:PORT)")
	fs.StringVar(&f.ca, "cluster-ca", "", "the cluster CA's certificate, a PEM `FILE` (default DATA_DIR/cluster/ca.pem; make one with hutch cluster ca)")
	fs.StringVar(&f.cert, "cluster-cert", "", "this node's certificate, a PEM `FILE` (default DATA_DIR/cluster/node.pem; hutch cluster issue)")
	fs.StringVar(&f.key, "cluster-key", "", "this node's key, a PEM `FILE` (default DATA_DIR/cluster/node-key.pem)")
	fs.DurationVar(&f.lease, "cluster-lease", cluster.DefaultLeaseTTL, "the node's lease: when a node dies, its sandboxes answer 502 for at most this long, then 404")
	fs.StringToStringVar(&f.labels, "node-label", nil, "a label of this node, KEY=VALUE (repeatable)")
	fs.StringSliceVar(&f.endpoints, "etcd-endpoints", nil, "etcd's client URLs (comma-separated); https ones use --etcd-cacert/--etcd-cert/--etcd-key, or the cluster's files")
	fs.StringVar(&f.etcdCA, "etcd-cacert", "", "CA of an external etcd's https endpoints, a PEM `FILE` (default: --cluster-ca)")
	fs.StringVar(&f.etcdCert, "etcd-cert", "", "client certificate for etcd, a PEM `FILE` (default: --cluster-cert)")
	fs.StringVar(&f.etcdKey, "etcd-key", "", "client key for etcd, a PEM `FILE` (default: --cluster-key)")
	fs.BoolVar(&f.embed, "etcd-embed", false, "run an etcd member in this process (the cluster's store runs in 1, 3 or 5 nodes; the others use --etcd-endpoints)")
	fs.StringVar(&f.etcdName, "etcd-name", "", "the embedded member's name in --etcd-initial-cluster (default: --node-name)")
	fs.StringVar(&f.peerURL, "etcd-peer-url", "", "URL the other members reach the embedded member by, such as https://10.0.0.1:2380")
	fs.StringVar(&f.clientURL, "etcd-client-url", "", "URL clients reach the embedded member by (default: the peer URL's host, port 2379)")
	fs.StringVar(&f.initial, "etcd-initial-cluster", "", "every voter, NAME=PEER-URL,… (default: this member alone); read at the member's first start")
	fs.StringVar(&f.etcdDir, "etcd-dir", "", "the embedded member's data (default DATA_DIR/etcd)")
}

// config is the cluster configuration of the flags; nil without --cluster.
func (f *clusterFlags) config(dataDir string) (*serve.ClusterConfig, error) {
	if !f.on {
		if f.embed || len(f.endpoints) > 0 || f.nodeName != "" || f.advertise != "" {
			return nil, errors.New("the cluster flags need --cluster")
		}
		return nil, nil
	}
	or := func(v, def string) string {
		if v != "" {
			return v
		}
		return def
	}
	name := f.nodeName
	if name == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node-name: %w", err)
		}
		name = h
	}
	files := cluster.TLSFiles{
		CA:   or(f.ca, filepath.Join(dataDir, "cluster", cluster.CAFile)),
		Cert: or(f.cert, filepath.Join(dataDir, "cluster", cluster.NodeFile)),
		Key:  or(f.key, filepath.Join(dataDir, "cluster", cluster.NodeKeyFile)),
	}
	_, port, err := net.SplitHostPort(f.listen)
	if err != nil {
		return nil, fmt.Errorf("--cluster-listen %q: %w", f.listen, err)
	}
	adv := or(f.advertise, "https://"+net.JoinHostPort(name, port))
	if u, err := url.Parse(adv); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--advertise-url %q: want https://HOST:PORT (nodes talk TLS)", adv)
	}
	if f.lease < time.Second {
		return nil, fmt.Errorf("--cluster-lease %s: at least 1s", f.lease)
	}
	c := &serve.ClusterConfig{
		Node:   cluster.Config{Name: name, URL: adv, Labels: f.labels, LeaseTTL: f.lease},
		Listen: f.listen,
		TLS:    files,
		Etcd: cluster.ClientConfig{Endpoints: f.endpoints, TLS: cluster.TLSFiles{
			CA: or(f.etcdCA, files.CA), Cert: or(f.etcdCert, files.Cert), Key: or(f.etcdKey, files.Key)}},
	}
	if f.embed {
		if f.peerURL == "" {
			return nil, errors.New("--etcd-embed needs --etcd-peer-url")
		}
		pu, err := url.Parse(f.peerURL)
		if err != nil || pu.Host == "" {
			return nil, fmt.Errorf("--etcd-peer-url %q: want a URL such as https://10.0.0.1:2380", f.peerURL)
		}
		member := or(f.etcdName, name)
		clientURL := or(f.clientURL, pu.Scheme+"://"+net.JoinHostPort(pu.Hostname(), "2379"))
		c.Embed = &cluster.EmbedConfig{Name: member, Dir: or(f.etcdDir, filepath.Join(dataDir, "etcd")),
			PeerURL: f.peerURL, ClientURL: clientURL, InitialCluster: or(f.initial, member+"="+f.peerURL)}
		if len(c.Etcd.Endpoints) == 0 {
			c.Etcd.Endpoints = []string{clientURL}
		}
	} else if f.peerURL != "" || f.initial != "" || f.clientURL != "" {
		return nil, errors.New("--etcd-peer-url, --etcd-client-url and --etcd-initial-cluster need --etcd-embed")
	}
	if len(c.Etcd.Endpoints) == 0 {
		return nil, errors.New("--cluster needs etcd: --etcd-endpoints URL,… or --etcd-embed")
	}
	return c, nil
}

// syncClusterKeys shares the node's API keys with the cluster before it
// serves, retrying while etcd does not answer.
func syncClusterKeys(ctx context.Context, n *cluster.Node, logger *slog.Logger) error {
	for {
		err := n.SyncKeys(ctx)
		if err == nil {
			return nil
		}
		logger.Info("waiting for etcd to share the API keys", "err", strings.TrimSpace(err.Error()))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
