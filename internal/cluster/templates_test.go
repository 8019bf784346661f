package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hutch-sandbox/hutch/internal/template"
)

// tlsPeers makes a cluster CA and a bundle for each name in dir, and
// returns each node's files.
func tlsPeers(t *testing.T, names ...string) map[string]TLSFiles {
	t.Helper()
	dir := t.TempDir()
	if err := MakeCA(filepath.Join(dir, "ca"), time.Now()); err != nil {
		t.Fatal(err)
	}
	out := map[string]TLSFiles{}
	for _, n := range names {
		b := filepath.Join(dir, n)
		if err := Issue(filepath.Join(dir, "ca"), n, []string{"127.0.0.1"}, b, time.Now()); err != nil {
			t.Fatal(err)
		}
		out[n] = TLSFiles{CA: filepath.Join(b, CAFile), Cert: filepath.Join(b, NodeFile), Key: filepath.Join(b, NodeKeyFile)}
	}
	return out
}

// serveNode starts node n's cluster listener on loopback with its files.
func serveNode(t *testing.T, n *Node, files TLSFiles) string {
	t.Helper()
	cfg, err := files.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: n.PeerHandler(http.NotFoundHandler()), TLSConfig: cfg}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return "https://" + ln.Addr().String()
}

func peerTransport(t *testing.T, files TLSFiles) http.RoundTripper {
	t.Helper()
	cfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return &http.Transport{TLSClientConfig: cfg}
}

// addTemplate commits a one-layer template name holding file hello.txt.
func addTemplate(t *testing.T, s *template.Store, name, content string) *template.Template {
	t.Helper()
	lease, err := s.NewLease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	l, err := s.AddLayer(lease, "test", func(root string) (string, error) {
		sum := sha256.Sum256([]byte(name + content))
		return hex.EncodeToString(sum[:]), os.WriteFile(filepath.Join(root, "hello.txt"), []byte(content), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := s.Commit(name, nil, []string{l.ID}, template.Config{Name: name, Built: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

// TestTemplatesAcrossNodes: a template made on one node reaches another
// with its own store, over the cluster listeners with mutual TLS; a newer
// build replaces it; a removal follows.
func TestTemplatesAcrossNodes(t *testing.T) {
	url := etcd(t)
	files := tlsPeers(t, "a", "b")
	ctx := context.Background()
	mk := func(name string) (*Node, *template.Store) {
		st := template.Open(t.TempDir())
		n := New(dial(t, url), Config{Name: name, LeaseTTL: 2 * time.Second, DataDir: t.TempDir(), Transport: peerTransport(t, files[name])})
		n.cfg.URL = serveNode(t, n, files[name])
		n.Start(&fakeSandboxes{}, openStore(t), st)
		t.Cleanup(n.Close)
		waitFor(t, 15*time.Second, func() bool { return n.Ready() == nil })
		return n, st
	}
	a, sa := mk("a")
	b, sb := mk("b")
	// b's mirror must know a's URL to pull from it.
	waitFor(t, 10*time.Second, func() bool { _, ok := b.copyNodes()["a"]; return ok })

	made := addTemplate(t, sa, "tools", "v1")
	// The loops run every few seconds; passes by hand make the test quick.
	prevA, prevB := map[string]string{}, map[string]string{}
	sync := func() {
		var err error
		if prevA, err = a.syncTemplates(ctx, prevA); err != nil {
			t.Fatal(err)
		}
		if prevB, err = b.syncTemplates(ctx, prevB); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	got, err := sb.Get("tools")
	if err != nil || got.ID != made.ID {
		t.Fatalf("b has tools = %v, %v; want build %s", got, err, made.ID)
	}
	data, err := os.ReadFile(filepath.Join(got.LowerDirs()[0], "hello.txt"))
	if err != nil || string(data) != "v1" {
		t.Fatalf("b's copy of hello.txt = %q, %v", data, err)
	}

	// A newer build on b wins on a.
	time.Sleep(10 * time.Millisecond)
	newer := addTemplate(t, sb, "tools", "v2")
	sync()
	sync()
	if got, err := sa.Get("tools"); err != nil || got.ID != newer.ID {
		t.Fatalf("a has tools = %v, %v; want b's newer build %s", got, err, newer.ID)
	}

	// Removed on a: gone from b.
	if err := sa.Remove("tools", nil); err != nil {
		t.Fatal(err)
	}
	sync()
	sync()
	if _, err := sb.Get("tools"); err == nil {
		t.Fatal("b still has tools, removed on a")
	}
}

// TestClusterListenerWantsAClusterCertificate: a client without a
// certificate of the cluster CA gets nothing from a node's listener.
func TestClusterListenerWantsAClusterCertificate(t *testing.T) {
	files := tlsPeers(t, "a")
	other := tlsPeers(t, "intruder") // another CA
	n := New(nil, Config{Name: "a"})
	n.templates = template.Open(t.TempDir())
	url := serveNode(t, n, files["a"])
	for name, rt := range map[string]http.RoundTripper{
		"no certificate":        &http.Transport{TLSClientConfig: mustClientNoCert(t, files["a"])},
		"another CA's":          peerTransport(t, TLSFiles{CA: files["a"].CA, Cert: other["intruder"].Cert, Key: other["intruder"].Key}),
		"a cluster member's ok": peerTransport(t, files["a"]),
	} {
		req, _ := http.NewRequest(http.MethodGet, url+"/cluster/v1/layers/x", nil)
		resp, err := rt.RoundTrip(req)
		if name == "a cluster member's ok" {
			if err != nil || resp.StatusCode != http.StatusNotFound {
				t.Fatalf("%s: %v %v, want 404 for an unknown layer", name, resp, err)
			}
			resp.Body.Close()
			continue
		}
		if err == nil {
			resp.Body.Close()
			t.Fatalf("%s: answered %s", name, resp.Status)
		}
	}
}

func mustClientNoCert(t *testing.T, f TLSFiles) *tls.Config {
	t.Helper()
	cfg, err := f.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = nil
	return cfg
}

// TestForwardedRequestsNeverReachTheNodesOwnCalls: a client's request that
// another node forwards (for a sandbox, with the client's own path) is
// served as a client's, even when its path is one of the template
// transfers; a node's own call never reaches the forwarded handler.
func TestForwardedRequestsNeverReachTheNodesOwnCalls(t *testing.T) {
	n := New(nil, Config{Name: "a"})
	n.templates = template.Open(t.TempDir())
	var got []string
	h := n.PeerHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path+" fwd="+r.Header.Get(ForwardHeader))
		w.WriteHeader(http.StatusTeapot)
	}))
	for _, tt := range []struct {
		path      string
		forwarded bool
		want      int
	}{
		{"/cluster/v1/layers/x", true, http.StatusTeapot},
		{"/cluster/v1/templates/base/manifest", true, http.StatusTeapot},
		{"/cluster/v1/layers/x", false, http.StatusNotFound},
		{"/sandboxes", false, http.StatusNotFound},
	} {
		req := httptest.NewRequest(http.MethodGet, tt.path, nil)
		if tt.forwarded {
			req.Header.Set(ForwardHeader, "1")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("GET %s forwarded=%v: %d, want %d", tt.path, tt.forwarded, rec.Code, tt.want)
		}
	}
	if want := "[/cluster/v1/layers/x fwd= /cluster/v1/templates/base/manifest fwd=]"; fmt.Sprint(got) != want {
		t.Errorf("the forwarded handler saw %v, want %s", got, want)
	}
}

// TestHoldsAreRecordsOfTheirOwn: what a node holds is one small record
// per build, written when it changes, not a list in the node's record
// that every refresh rewrote (review 26: 2,200 snapshots made each node's
// record 210 KB, rewritten every 2 s, and etcd's file grew 19 MB a
// minute). Another node sees a build held, and sees it go.
func TestHoldsAreRecordsOfTheirOwn(t *testing.T) {
	url := etcd(t)
	// Each node's template loop runs: b tries to pull a's templates and
	// fails (a serves no cluster listener here), which is not this test's.
	mk := func(name string, st *template.Store) *Node {
		n := New(dial(t, url), Config{Name: name, URL: "https://" + name + ".invalid:7443", LeaseTTL: 2 * time.Second,
			DataDir: t.TempDir(), Transport: http.DefaultTransport})
		n.Start(&fakeSandboxes{}, openStore(t), st)
		t.Cleanup(n.Close)
		waitFor(t, 15*time.Second, func() bool { return n.Ready() == nil })
		return n
	}
	st := template.Open(t.TempDir())
	mk("a", st)
	b := mk("b", noTemplates(t))
	var made []*template.Template
	for i := range 50 {
		made = append(made, addTemplate(t, st, fmt.Sprintf("snapshot-%02d", i), "x"))
	}
	holds := func(build string) bool {
		r, ok := b.copyNodes()["a"]
		return ok && b.holding(r, build)
	}
	// The next refresh (every 2 s) publishes them.
	waitFor(t, 10*time.Second, func() bool { return holds(made[0].ID) && holds(made[49].ID) })
	resp, err := dial(t, url).Get(context.Background(), nodesPrefix+"a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("a's record: %v %v", resp, err)
	}
	if size := len(resp.Kvs[0].Value); size > 1024 {
		t.Errorf("a's record with 50 templates is %d bytes: %s", size, resp.Kvs[0].Value)
	}
	if err := st.Remove(made[0].ID, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return !holds(made[0].ID) && holds(made[1].ID) })
}

// TestManyHoldsKeepTheLease: a node that holds many builds gets a new
// lease and keeps it (review 26: a join that wrote one record per build,
// one call each, outlived a 3 s lease with 2,700 snapshots, and rewrote
// them all again on every try).
func TestManyHoldsKeepTheLease(t *testing.T) {
	url := etcd(t)
	st := template.Open(t.TempDir())
	for i := range 200 {
		addTemplate(t, st, fmt.Sprintf("snapshot-%03d", i), "x")
	}
	n := New(dial(t, url), Config{Name: "a", URL: "https://a.invalid:7443", LeaseTTL: 2 * time.Second,
		DataDir: t.TempDir(), Transport: http.DefaultTransport})
	n.Start(&fakeSandboxes{}, openStore(t), st)
	t.Cleanup(n.Close)
	waitFor(t, 15*time.Second, func() bool { return n.Ready() == nil })
	cli := dial(t, url)
	count := func() int64 {
		resp, err := cli.Get(context.Background(), holdsPrefix+"a/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Count
	}
	waitFor(t, 10*time.Second, func() bool { return count() == 200 })
	// The lease is lost (as after a partition): the node takes another,
	// keeps it, and records its holdings again under it.
	if _, err := cli.Revoke(context.Background(), n.currentLease()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return n.Ready() == nil && count() == 200 })
	lease := n.currentLease()
	time.Sleep(3 * time.Second)
	if n.currentLease() != lease || n.Ready() != nil {
		t.Fatalf("the node lost its new lease within 3 s: %x, then %x (%v)", lease, n.currentLease(), n.Ready())
	}
}
