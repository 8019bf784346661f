package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// world is a cluster of three nodes on hosts 1-3 of a LAN, and the host
// its user works from (the LAN's last): every request and SDK script of
// the tests comes from there, as from another machine, unless a test
// says otherwise.
type world struct {
	*hutchtest.Cluster
	lan    *hutchtest.LAN
	user   *hutchtest.Host
	client *http.Client // dials from user
	js     string       // the E2B JS SDK's package (hutchtest.E2BJS)
}

// newWorld starts a three-node cluster: over an embedded etcd (a member
// on each node, three voters) or, external, over Debian's etcd on host 4.
// args are more flags for every node.
func newWorld(t *testing.T, external bool, args ...string) *world {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces and sandboxes")
	if external {
		hutchtest.RequireEtcd(t)
	}
	js := hutchtest.JSPackage(t, hutchtest.E2BJS)
	bin := hutchBin.Path(t)
	hosts := 4
	if external {
		hosts = 5
	}
	lan := hutchtest.NewLAN(t, hosts)
	opts := hutchtest.ClusterOptions{Args: args}
	if external {
		opts.Etcd = hutchtest.StartEtcdExternal(t, lan.Host(4))
	}
	c := hutchtest.StartCluster(t, bin, opts, lan.Host(1), lan.Host(2), lan.Host(3))
	user := lan.Hosts[len(lan.Hosts)-1]
	return &world{Cluster: c, lan: lan, user: user, client: user.Client(), js: js}
}

// apiCall sends a control-plane request with the test key to node n with
// client hc and returns the status and body; err is a failure to get an
// answer at all.
func apiCall(hc *http.Client, n *hutchtest.ClusterNode, method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, n.URL()+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("X-API-KEY", hutchtest.TestKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// createBody is a create request as E2B's v1 API takes it: the base
// template, ten minutes, tagged with the test's name in metadata.
func createBody(t *testing.T) string {
	b, _ := json.Marshal(map[string]any{"templateID": "base", "timeout": 600, "metadata": map[string]string{"test": t.Name()}})
	return string(b)
}

// create makes a sandbox through node n (POST /sandboxes) and returns its
// id; it fails the test unless the answer is 201.
func create(t *testing.T, hc *http.Client, n *hutchtest.ClusterNode) string {
	t.Helper()
	status, body, err := apiCall(hc, n, "POST", "/sandboxes", createBody(t))
	if err != nil {
		t.Fatalf("create through %s: %v", n.Name, err)
	}
	if status != http.StatusCreated {
		t.Fatalf("create through %s: %d %s", n.Name, status, body)
	}
	return sandboxID(t, body)
}

func sandboxID(t *testing.T, body []byte) string {
	t.Helper()
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(body, &sb); err != nil || sb.SandboxID == "" {
		t.Fatalf("a create's answer without a sandboxID: %v: %s", err, body)
	}
	return sb.SandboxID
}

// listed returns the ids of the sandboxes node n lists
// (GET /v2/sandboxes, every state, every page).
func listed(hc *http.Client, n *hutchtest.ClusterNode) ([]string, error) {
	var ids []string
	for next := ""; ; {
		req, err := http.NewRequest("GET", n.URL()+"/v2/sandboxes?limit=100&nextToken="+url.QueryEscape(next), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-API-KEY", hutchtest.TestKey)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("list through %s: %s %s", n.Name, resp.Status, body)
		}
		var list []struct {
			SandboxID string `json:"sandboxID"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("list through %s: %v: %s", n.Name, err, body)
		}
		for _, sb := range list {
			ids = append(ids, sb.SandboxID)
		}
		if next = resp.Header.Get("X-Next-Token"); next == "" {
			break
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// owners maps each sandbox of ids to the node whose runtime runs it
// (`hutch ps` on the node's data dir: where it really is, whatever the
// cluster says).
func (w *world) owners(t *testing.T, ids ...string) map[string]*hutchtest.ClusterNode {
	t.Helper()
	own := map[string]*hutchtest.ClusterNode{}
	for _, n := range w.Nodes {
		for _, st := range hutchtest.RuntimeSandboxes(t, n.Bin, n.Env) {
			if slices.Contains(ids, st.ID) {
				if other := own[st.ID]; other != nil {
					t.Errorf("sandbox %s runs on %s and on %s", st.ID, other.Name, n.Name)
				}
				own[st.ID] = n
			}
		}
	}
	for _, id := range ids {
		if own[id] == nil {
			t.Fatalf("sandbox %s runs on no node", id)
		}
	}
	return own
}

// edge502 reports whether an answer is E2B's edge proxy's 502 for
// sandbox id: {"sandboxId": id, "message": ..., "code": 502}.
func edge502(status int, body []byte, id string) bool {
	var e struct {
		SandboxID string `json:"sandboxId"`
		Message   string `json:"message"`
		Code      int    `json:"code"`
	}
	return status == http.StatusBadGateway && json.Unmarshal(body, &e) == nil &&
		e.SandboxID == id && e.Code == http.StatusBadGateway && e.Message != ""
}

// envdHealth asks sandbox id's envd for /health through node n, as the
// SDKs reach envd (E2b-Sandbox-Id, E2b-Sandbox-Port: 49983).
func envdHealth(hc *http.Client, n *hutchtest.ClusterNode, id string) (int, []byte, error) {
	req, err := http.NewRequest("GET", n.URL()+"/health", nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// sdkScript runs an ES module with the E2B JS SDK from the user's host,
// pointed at node n (E2B_API_URL, E2B_SANDBOX_URL), and returns its
// standard output.
func (w *world) sdkScript(t *testing.T, n *hutchtest.ClusterNode, script string, args ...string) string {
	t.Helper()
	return sdkScript(t, w.js, w.user, n.Server, script, args...)
}

// sdkScript runs an ES module with the E2B JS SDK (in js) from host h,
// pointed at server s, and returns its standard output.
func sdkScript(t *testing.T, js string, h *hutchtest.Host, s *hutchtest.Server, script string, args ...string) string {
	t.Helper()
	return hutchtest.NodeScript(t, js, h.Wrap(), s.SDKEnv(), script, args...)
}

// commandAndPort is an SDK script: for each sandbox id (JSON list in
// argv[1]) it connects, runs a command, starts `python3 -m http.server`
// inside serving a file that holds the id, and fetches that file through
// E2B_SANDBOX_URL by E2b-Sandbox-Id/E2b-Sandbox-Port. It prints
// {"<id>": {"stdout": ..., "port": ...}}.
const commandAndPort = `
import { Sandbox } from 'e2b'
const ids = JSON.parse(process.argv[1])
const base = new URL(process.env.E2B_SANDBOX_URL)
const out = {}
for (const id of ids) {
  const sbx = await Sandbox.connect(id)
  const run = await sbx.commands.run('echo $((6*7))')
  await sbx.files.write('/tmp/www/id.txt', id)
  await sbx.commands.run('python3 -m http.server 8000 --directory /tmp/www', { background: true, timeoutMs: 0 })
  let port = ''
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 100))) {
    const res = await fetch(new URL('/id.txt', base), { headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '8000' } })
    const text = await res.text()
    if (res.status === 200) { port = text; break }
    port = res.status + ' ' + text
  }
  out[id] = { stdout: run.stdout, port }
}
console.log(JSON.stringify(out))
process.exit(0)
`

// runCommands is an SDK script: for each sandbox id (JSON list in
// argv[1]) it connects and runs a command; it prints {"<id>": stdout}, or
// the SDK's error in place of stdout.
const runCommands = `
import { Sandbox } from 'e2b'
const ids = JSON.parse(process.argv[1])
const out = {}
for (const id of ids) {
  try {
    const sbx = await Sandbox.connect(id)
    out[id] = (await sbx.commands.run('echo ran in ' + id)).stdout
  } catch (e) {
    out[id] = String(e)
  }
}
console.log(JSON.stringify(out))
process.exit(0)
`

// checkCommands runs a command in each sandbox of ids with the SDK
// through node n, and fails the test unless every one ran.
func (w *world) checkCommands(t *testing.T, n *hutchtest.ClusterNode, ids ...string) {
	t.Helper()
	arg, _ := json.Marshal(ids)
	out := w.sdkScript(t, n, runCommands, string(arg))
	var got map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	for _, id := range ids {
		if want := "ran in " + id + "\n"; got[id] != want {
			t.Errorf("a command in %s through %s printed %q, want %q", id, n.Name, got[id], want)
		}
	}
}

// pollUntil calls f every 100 ms until it returns true or deadline
// passes; it reports whether f did.
func pollUntil(deadline time.Time, f func() bool) bool {
	for {
		if f() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// etcdLeader names the node whose embedded etcd member leads, asking
// each member (with a certificate of the cluster CA, from the user's
// host); "" and a log line when it cannot tell. For logs: which member a
// failure took away matters.
func (w *world) etcdLeader(t *testing.T) string {
	t.Helper()
	if w.Etcd != nil {
		return ""
	}
	dir := t.TempDir()
	issue := exec.Command(w.Nodes[0].Bin, "cluster", "issue", "--ca-dir", w.CADir, "--name", "tester", "--host", w.user.IP, "--out", dir)
	issue.Env = hutchtest.CleanEnv()
	if out, err := issue.CombinedOutput(); err != nil {
		t.Logf("hutch cluster issue: %v\n%s", err, out)
		return ""
	}
	cfg, err := (&hutchtest.EtcdTLS{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem")}).ClientConfig()
	if err != nil {
		t.Logf("etcd client: %v", err)
		return ""
	}
	var endpoints []string
	for _, n := range w.Nodes {
		endpoints = append(endpoints, "https://"+n.Host.Addr(2379))
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, TLS: cfg,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return w.user.DialContext(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		t.Logf("etcd client: %v", err)
		return ""
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, ep := range endpoints {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			t.Logf("etcd status of %s: %v", ep, err)
			continue
		}
		if st.Header.MemberId == st.Leader {
			return w.Nodes[i].Name
		}
	}
	return ""
}
