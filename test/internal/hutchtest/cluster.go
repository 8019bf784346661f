package hutchtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// Lease is every node's --cluster-lease; 3s when zero (the tests'
	// deadlines follow from it: keep it short).
	Lease time.Duration
	// Etcd, when not nil, is the external etcd every node uses
	// (--etcd-endpoints); when nil every node runs an embedded member
	// (--etcd-embed), the members forming one cluster over TLS with the
	// cluster CA.
	Etcd *Etcd
	// Args are more flags for every node's hutch serve.
	Args []string
}

// Cluster is a Hutch cluster on a LAN: `hutch serve --cluster` on some
// of its hosts, one node on each, sharing a cluster CA (`hutch cluster
// ca`, each node's certificate from `hutch cluster issue`), the API key
// TestKey, the domain TestDomain, a lease and an etcd. Their data dirs
// are their own; their template store is the machine's, shared (as
// NewServer's: each node holds base without a copy of its own, so a
// template crossing nodes is not tested here). NewCluster makes one (not
// started), StartCluster starts it too. Every node is stopped and its
// sandboxes removed when the test ends.
type Cluster struct {
	// Nodes are the nodes, in the order of their hosts.
	Nodes []*ClusterNode
	// CADir holds the cluster CA: ca.pem, ca-key.pem.
	CADir string
	// Lease is the nodes' --cluster-lease.
	Lease time.Duration
	// Etcd is the external etcd, nil for embedded members.
	Etcd *Etcd

	t   *testing.T
	bin string
}

// ClusterNode is one node of a Cluster: a Server (its Stop, Start,
// URL, SDKEnv, Env...) run in its host's network namespace, listening on
// port 3000 of the host's address, its cluster listener on 7443 and,
// with an embedded etcd member, that member on 2379 and 2380.
type ClusterNode struct {
	*Server
	// Name is the node's --node-name, "node<host index>".
	Name string
	// Host is the host it runs on.
	Host *Host
}

// NewCluster makes a cluster of bin with a node on each host given, none
// started: the cluster CA, each node's data dir and certificate, and its
// flags.
func NewCluster(t *testing.T, bin string, opts ClusterOptions, hosts ...*Host) *Cluster {
	t.Helper()
	if opts.Lease == 0 {
		opts.Lease = 3 * time.Second
	}
	c := &Cluster{CADir: filepath.Join(t.TempDir(), "ca"), Lease: opts.Lease, Etcd: opts.Etcd, t: t, bin: bin}
	c.hutch("cluster", "ca", "--dir", c.CADir)
	var initial []string
	for _, h := range hosts {
		initial = append(initial, fmt.Sprintf("node%d=https://%s", h.Index, h.Addr(2380)))
	}
	for _, h := range hosts {
		name := fmt.Sprintf("node%d", h.Index)
		s := NewHostServer(t, bin, h)
		c.hutch("cluster", "issue", "--ca-dir", c.CADir, "--name", name, "--host", h.IP, "--out", filepath.Join(s.DataDir, "cluster"))
		s.LogPrefix = name + ": "
		s.Args = append(s.Args,
			"--cluster", "--node-name", name,
			"--cluster-listen", h.Addr(7443), "--advertise-url", "https://"+h.Addr(7443),
			"--cluster-lease", opts.Lease.String())
		if opts.Etcd != nil {
			s.Args = append(s.Args, "--etcd-endpoints", strings.Join(opts.Etcd.Endpoints(), ","))
			if e := opts.Etcd.TLS; e != nil {
				s.Args = append(s.Args, "--etcd-cacert", e.CA, "--etcd-cert", e.Cert, "--etcd-key", e.Key)
			}
		} else {
			s.Args = append(s.Args, "--etcd-embed",
				"--etcd-peer-url", "https://"+h.Addr(2380), "--etcd-client-url", "https://"+h.Addr(2379),
				"--etcd-initial-cluster", strings.Join(initial, ","))
		}
		s.Args = append(s.Args, opts.Args...)
		c.Nodes = append(c.Nodes, &ClusterNode{Server: s, Name: name, Host: h})
	}
	// Before each node's own clean-up (which stops it alone): all at
	// once, so that no member waits out the others' going.
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, n := range c.Nodes {
			wg.Add(1)
			go func() { defer wg.Done(); n.killPaused(); n.Stop(syscall.SIGTERM) }()
		}
		wg.Wait()
	})
	return c
}

// NewHostServer is a Server, not started, of bin in host h's network
// namespace, on port 3000 of h's address, with a fresh data dir, and
// flags for --domain TestDomain and --warm 0 (sandboxes have networking:
// the host is a namespace of the test's own); its Client dials from h.
// As NewServer's, it is stopped and its sandboxes removed when the test
// ends.
func NewHostServer(t *testing.T, bin string, h *Host) *Server {
	t.Helper()
	tmp := t.TempDir()
	// Sandboxes' uids must traverse to their layers under the data dir
	// (as StartServe's).
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, 0o711)
	s := NewServer(t, bin, filepath.Join(tmp, "data"))
	s.Addr = h.Addr(3000)
	s.Wrap = h.Wrap()
	s.Client = h.Client()
	s.Args = []string{"--domain", TestDomain, "--warm", "0"}
	return s
}

// StartCluster is NewCluster, then Start.
func StartCluster(t *testing.T, bin string, opts ClusterOptions, hosts ...*Host) *Cluster {
	t.Helper()
	c := NewCluster(t, bin, opts, hosts...)
	c.Start()
	return c
}

// hutch runs a hutch command to its end and fails the test if it fails.
func (c *Cluster) hutch(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = CleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("hutch %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Start starts every node that is not running, all at once (embedded
// etcd members wait for a quorum of each other), waits until each
// answers and then until every node lists all of them (WaitNodes).
func (c *Cluster) Start() {
	c.t.Helper()
	var started []*ClusterNode
	for _, n := range c.Nodes {
		if n.Pid() == 0 {
			n.Launch()
			started = append(started, n)
		}
	}
	for _, n := range started {
		n.WaitReady(time.Minute)
	}
	names := c.Names()
	for _, n := range c.Nodes {
		n.WaitNodes(time.Minute, names...)
	}
}

// Stop sends sig to every node at once and waits for all to exit.
func (c *Cluster) Stop(sig syscall.Signal) {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop(sig) }()
	}
	wg.Wait()
}

// Names are the nodes' names.
func (c *Cluster) Names() []string {
	var names []string
	for _, n := range c.Nodes {
		names = append(names, n.Name)
	}
	return names
}

// Node is the node named name, nil if none is.
func (c *Cluster) Node(name string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Kill kills the node's process with SIGKILL, as a crash would; its
// sandboxes go on running (they outlive servers by design).
func (n *ClusterNode) Kill() { n.Stop(syscall.SIGKILL) }

// ClusterNodeRecord is what GET /cluster/nodes says of a node (the part
// the tests read).
type ClusterNodeRecord struct {
	Name   string            `json:"name"`
	URL    string            `json:"url"`
	Labels map[string]string `json:"labels"`
	Load   struct {
		Running int `json:"running"`
	} `json:"load"`
}

// ClusterNodes asks GET /cluster/nodes of the node, with client (the
// node's own when nil), and returns the nodes it lists.
func (n *ClusterNode) ClusterNodes(client *http.Client) ([]ClusterNodeRecord, error) {
	if client == nil {
		client = n.client()
	}
	req, err := http.NewRequest("GET", n.URL()+"/cluster/nodes", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-KEY", TestKey)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /cluster/nodes: %s: %s", resp.Status, b)
	}
	return parseClusterNodes(b)
}

// parseClusterNodes reads GET /cluster/nodes: a JSON array of node
// records, or an object holding one under "nodes".
func parseClusterNodes(b []byte) ([]ClusterNodeRecord, error) {
	var list []ClusterNodeRecord
	if err := json.Unmarshal(b, &list); err == nil {
		return list, nil
	}
	var obj struct {
		Nodes []ClusterNodeRecord `json:"nodes"`
	}
	if err := json.Unmarshal(b, &obj); err != nil || obj.Nodes == nil {
		return nil, fmt.Errorf("GET /cluster/nodes: neither a list of nodes nor {\"nodes\": [...]}: %.500s", b)
	}
	return obj.Nodes, nil
}

// NodeNames are the names of the nodes GET /cluster/nodes lists, sorted.
func NodeNames(list []ClusterNodeRecord) []string {
	var names []string
	for _, r := range list {
		names = append(names, r.Name)
	}
	slices.Sort(names)
	return names
}

// WaitNodes waits up to d until the node's GET /cluster/nodes lists
// exactly the nodes named, and fails the test if it does not.
func (n *ClusterNode) WaitNodes(d time.Duration, names ...string) {
	n.t.Helper()
	want := slices.Sorted(slices.Values(names))
	var got []string
	var err error
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var list []ClusterNodeRecord
		if list, err = n.ClusterNodes(nil); err == nil {
			if got = NodeNames(list); slices.Equal(got, want) {
				return
			}
		}
	}
	n.t.Fatalf("%s: GET /cluster/nodes did not list %v within %v: last %v (%v)", n.Name, want, d, got, err)
}
