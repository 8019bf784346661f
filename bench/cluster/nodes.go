package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	hcluster "github.com/hutch-sandbox/hutch/internal/cluster"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// Ports every node uses on its host's address.
const (
	apiPort     = 3000
	clusterPort = 7443
	etcdClient  = 2379
	etcdPeer    = 2380
)

// node is one `hutch serve` this harness runs in a host of its LAN.
type node struct {
	name string
	host *host
	data string // its data directory
	log  string // its output
	// voter: it runs an embedded etcd member; else it is an etcd client
	// of the voters.
	voter bool

	cmd  *exec.Cmd
	done chan struct{}
	api  *http.Client
}

// url is the node's API base URL.
func (n *node) url() string { return "http://" + n.host.addr(apiPort) }

// pid is the node's process id (nsenter execs hutch serve in place).
func (n *node) pid() int { return n.cmd.Process.Pid }

// exited reports whether the node's process has ended.
func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// logTail is the end of the node's output, for errors.
func (n *node) logTail() string {
	b, _ := os.ReadFile(n.log)
	s := strings.TrimSpace(string(b))
	if len(s) > 3000 {
		s = "…" + s[len(s)-3000:]
	}
	return s
}

// clusterSpec is how one step's nodes are started.
type clusterSpec struct {
	// n is the number of nodes; 0 with plain.
	n int
	// plain: one `hutch serve` without --cluster, the reference row.
	plain bool
	// voters is how many of the nodes (the first ones) run an embedded
	// etcd member.
	voters int
}

// label names the step in the tables.
func (s clusterSpec) label() string {
	if s.plain {
		return "1, no --cluster"
	}
	return fmt.Sprintf("%d node%s", s.n, map[bool]string{true: "s"}[s.n > 1])
}

// etcdDesc says how the step's etcd is made.
func (s clusterSpec) etcdDesc() string {
	switch {
	case s.plain:
		return "none (SQLite only)"
	case s.voters == 1 && s.n == 1:
		return "1 voter, embedded in the node"
	case s.voters == s.n:
		return fmt.Sprintf("%d voters, one embedded in each node", s.voters)
	}
	clients := fmt.Sprintf("node %s is an etcd client", nodeRange(s.voters+1, s.n))
	if s.n-s.voters > 1 {
		clients = fmt.Sprintf("nodes %s are etcd clients", nodeRange(s.voters+1, s.n))
	}
	return fmt.Sprintf("%s embedded in %s; %s of %s (--etcd-endpoints)",
		plural(s.voters, "voter"), nodeRange(1, s.voters), clients, map[bool]string{true: "them", false: "it"}[s.voters > 1])
}

// plural is "1 voter", "3 voters".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// nodeRange names nodes from to to: "n2", "n1, n2, n3".
func nodeRange(from, to int) string {
	var s []string
	for i := from; i <= to; i++ {
		s = append(s, fmt.Sprintf("n%d", i))
	}
	return strings.Join(s, ", ")
}

// votersFor is how many of n nodes run an etcd member under the -voters
// rule: "odd" (the largest odd number up to n, as docs/cluster.md
// advises: 1, 3 or 5 voters, further nodes etcd clients), "all", or a
// number (at most n); 0 for a rule it does not know.
func votersFor(n int, rule string) int {
	switch rule {
	case "odd":
		if n%2 == 1 {
			return n
		}
		return n - 1
	case "all":
		return n
	}
	v, err := strconv.Atoi(rule)
	if err != nil || v < 1 {
		return 0
	}
	return min(v, n)
}

// serveArgs are the `hutch serve` flags of node i (from 1) of spec on
// hosts, after the common flags.
func serveArgs(spec clusterSpec, hosts []*host, i int) []string {
	h := hosts[i-1]
	if spec.plain {
		return nil
	}
	name := fmt.Sprintf("n%d", i)
	args := []string{"--cluster", "--node-name", name,
		"--cluster-listen", h.addr(clusterPort), "--advertise-url", "https://" + h.addr(clusterPort)}
	if i <= spec.voters {
		var initial []string
		for j := 1; j <= spec.voters; j++ {
			initial = append(initial, fmt.Sprintf("n%d=https://%s", j, hosts[j-1].addr(etcdPeer)))
		}
		return append(args, "--etcd-embed",
			"--etcd-peer-url", "https://"+h.addr(etcdPeer), "--etcd-client-url", "https://"+h.addr(etcdClient),
			"--etcd-initial-cluster", strings.Join(initial, ","))
	}
	var endpoints []string
	for j := 1; j <= spec.voters; j++ {
		endpoints = append(endpoints, "https://"+hosts[j-1].addr(etcdClient))
	}
	return append(args, "--etcd-endpoints", strings.Join(endpoints, ","))
}

// cluster is one step's running nodes.
type cluster struct {
	spec  clusterSpec
	nodes []*node
	dir   string // the step's directory: the CA and the nodes' data
	// etcd is a client of the cluster's etcd with a certificate of the
	// harness's own (nil for the plain server): for the revision, how
	// many writes a phase made.
	etcd *clientv3.Client
}

// revision is etcd's current revision, -1 when it cannot be read.
func (c *cluster) revision(ctx context.Context) int64 {
	if c.etcd == nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.etcd.Get(ctx, "/hutch/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return -1
	}
	return resp.Header.Revision
}

// startCluster makes the step's directory under root (fresh), the cluster
// CA and each node's certificate bundle (hutch cluster ca / issue, as
// docs/cluster.md does it), starts every node at once in its host (the
// embedded members wait for each other), and waits until each answers
// and lists every node holding the base template. On an error what was
// started is stopped and removed.
func (b *bench) startCluster(ctx context.Context, spec clusterSpec, hosts []*host) (_ *cluster, retErr error) {
	n := spec.n
	if spec.plain {
		n = 1
	}
	c := &cluster{spec: spec, dir: filepath.Join(b.cfg.dir, stepDirName(spec))}
	if err := removeData(b.cfg.hutch, c.dir); err != nil {
		return nil, err
	}
	// Sandboxes' uids must traverse to their layers under the data dirs.
	if err := os.MkdirAll(c.dir, 0o711); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			c.stop(b.cfg.hutch)
		}
	}()
	ca := filepath.Join(c.dir, "ca")
	if !spec.plain {
		if err := runHutch(b.cfg.hutch, nil, "cluster", "ca", "--dir", ca); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= n; i++ {
		nd := &node{name: fmt.Sprintf("n%d", i), host: hosts[i-1], voter: !spec.plain && i <= spec.voters,
			data: filepath.Join(c.dir, fmt.Sprintf("n%d", i)), log: filepath.Join(c.dir, fmt.Sprintf("n%d.log", i)),
			api: b.apiClient()}
		if spec.plain {
			nd.name = "serve"
		}
		if err := os.MkdirAll(nd.data, 0o711); err != nil {
			return nil, err
		}
		if !spec.plain {
			if err := runHutch(b.cfg.hutch, nil, "cluster", "issue", "--ca-dir", ca, "--name", nd.name,
				"--host", nd.host.ip, "--out", filepath.Join(nd.data, "cluster")); err != nil {
				return nil, err
			}
		}
		c.nodes = append(c.nodes, nd)
	}
	if !spec.plain {
		bundle := filepath.Join(c.dir, "harness")
		if err := runHutch(b.cfg.hutch, nil, "cluster", "issue", "--ca-dir", ca, "--name", "bench-harness",
			"--host", switchIP, "--out", bundle); err != nil {
			return nil, err
		}
		var endpoints []string
		for j := 1; j <= spec.voters; j++ {
			endpoints = append(endpoints, "https://"+hosts[j-1].addr(etcdClient))
		}
		cli, err := hcluster.Dial(hcluster.ClientConfig{Endpoints: endpoints, TLS: hcluster.TLSFiles{
			CA: filepath.Join(bundle, hcluster.CAFile), Cert: filepath.Join(bundle, hcluster.NodeFile), Key: filepath.Join(bundle, hcluster.NodeKeyFile)}})
		if err != nil {
			return nil, fmt.Errorf("etcd client: %w", err)
		}
		c.etcd = cli
	}
	for i, nd := range c.nodes {
		args := append(append([]string{"serve", "--listen", nd.host.addr(apiPort)}, b.commonFlags()...), serveArgs(spec, hosts, i+1)...)
		if err := b.launch(nd, args); err != nil {
			return nil, err
		}
	}
	for _, nd := range c.nodes {
		if err := waitHealth(ctx, nd, time.Minute); err != nil {
			return nil, err
		}
	}
	if !spec.plain {
		for _, nd := range c.nodes {
			if err := b.waitNodes(ctx, nd, len(c.nodes), time.Minute); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// stepDirName is the directory of a step under the run's root.
func stepDirName(spec clusterSpec) string {
	if spec.plain {
		return "plain"
	}
	return fmt.Sprintf("nodes-%d", spec.n)
}

// commonFlags are every node's serve flags besides its address and
// cluster flags.
func (b *bench) commonFlags() []string {
	f := []string{"--warm", fmt.Sprint(b.cfg.warm), "--max-sandboxes-per-key", "0"}
	if !b.cfg.network {
		f = append(f, "--network=false")
	}
	return f
}

// env is a node's environment: this process's less Hutch's and E2B's own
// variables, plus its data dir, the run's key and the templates.
func (b *bench) env(data string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HUTCH_") && !strings.HasPrefix(kv, "E2B_") {
			env = append(env, kv)
		}
	}
	env = append(env, "HUTCH_DATA_DIR="+data, "HUTCH_API_KEY="+b.key)
	if t := os.Getenv("HUTCH_TEMPLATES"); t != "" {
		env = append(env, "HUTCH_TEMPLATES="+t)
	}
	return env
}

// launch starts node nd's hutch with args in its host, its output in its
// log.
func (b *bench) launch(nd *node, args []string) error {
	f, err := os.Create(nd.log)
	if err != nil {
		return err
	}
	defer f.Close()
	argv := append(append(nd.host.wrap(), b.cfg.hutch), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = b.env(nd.data)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", nd.name, err)
	}
	nd.cmd, nd.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(nd.done) }()
	b.logf("%s: hutch %s", nd.name, strings.Join(args, " "))
	return nil
}

// waitHealth waits until the node answers GET /health.
func waitHealth(ctx context.Context, nd *node, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		if nd.exited() {
			return fmt.Errorf("%s exited: %s", nd.name, nd.logTail())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, nd.url()+"/health", nil)
		resp, err := nd.api.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = errors.New(resp.Status)
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer GET /health within %v (%v): %s", nd.name, d, last, nd.logTail())
}

// clusterNodes asks the node's GET /cluster/nodes.
func (b *bench) clusterNodes(ctx context.Context, nd *node) ([]e2bapi.ClusterNode, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, nd.url()+"/cluster/nodes", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", b.key)
	resp, err := nd.api.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /cluster/nodes: %s: %.300s", resp.Status, body)
	}
	var list []e2bapi.ClusterNode
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET /cluster/nodes: %w", err)
	}
	return list, nil
}

// waitNodes waits until the node lists n nodes, each with its templates
// recorded (placement sends a create only to a node whose record holds
// the template).
func (b *bench) waitNodes(ctx context.Context, nd *node, n int, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		if nd.exited() {
			return fmt.Errorf("%s exited: %s", nd.name, nd.logTail())
		}
		list, err := b.clusterNodes(ctx, nd)
		if err == nil {
			var ready []string
			for _, r := range list {
				if r.Templates > 0 {
					ready = append(ready, r.Name)
				}
			}
			slices.Sort(ready)
			if len(ready) == n {
				return nil
			}
			last = fmt.Sprintf("nodes with templates: %v", ready)
		} else {
			last = err.Error()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s did not list %d nodes holding templates within %v (%s): %s", nd.name, n, d, last, nd.logTail())
}

// stop stops every node at once (SIGTERM, SIGKILL after 20 s: a member
// must not wait out the others' going), then removes the sandboxes left
// in their data dirs and the step's directory.
func (c *cluster) stop(hutch string) error {
	if c.etcd != nil {
		c.etcd.Close()
	}
	var wg sync.WaitGroup
	for _, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-nd.done:
			case <-time.After(20 * time.Second):
				nd.cmd.Process.Kill()
				<-nd.done
			}
		}()
	}
	wg.Wait()
	return removeData(hutch, c.dir)
}

// runHutch runs hutch with args (and env added to a clean environment),
// to its end.
func runHutch(hutch string, env []string, args ...string) error {
	_, err := hutchOutput(hutch, env, args...)
	return err
}

// hutchOutput runs hutch with args and returns its standard output.
func hutchOutput(hutch string, env []string, args ...string) (string, error) {
	cmd := exec.Command(hutch, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HUTCH_") && !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	if t := os.Getenv("HUTCH_TEMPLATES"); t != "" {
		cmd.Env = append(cmd.Env, "HUTCH_TEMPLATES="+t)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hutch %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// sandboxesOf lists the sandboxes the runtime of data dir runs (hutch
// ps -q): which node owns a sandbox, whichever node took its create.
func sandboxesOf(hutch, data string) ([]string, error) {
	out, err := hutchOutput(hutch, []string{"HUTCH_DATA_DIR=" + data}, "ps", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// removeData removes what a step left under dir: every sandbox of each
// data dir in it (hutch rm; sandboxes outlive their server by design),
// what is mounted below dir, then dir itself.
func removeData(hutch, dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		data := filepath.Join(dir, e.Name())
		if !e.IsDir() || e.Name() == "ca" || e.Name() == "harness" {
			continue
		}
		ids, err := sandboxesOf(hutch, data)
		if err != nil || len(ids) == 0 {
			continue
		}
		for len(ids) > 0 {
			k := min(100, len(ids))
			if err := runHutch(hutch, []string{"HUTCH_DATA_DIR=" + data}, append([]string{"rm"}, ids[:k]...)...); err != nil {
				errs = append(errs, err)
			}
			ids = ids[k:]
		}
	}
	unmountUnder(dir)
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unmountUnder detaches what is mounted below dir, so that removing it
// does not reach into a mount.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	prefix := filepath.Clean(dir) + "/"
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], prefix) {
			points = append(points, f[4])
		}
	}
	// Deepest first.
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// pids are the nodes' hutch serve pids.
func (c *cluster) pids() []int {
	var p []int
	for _, nd := range c.nodes {
		p = append(p, nd.pid())
	}
	return p
}
