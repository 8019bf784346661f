package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// The harness on its own, before any hutch: a LAN whose hosts reach each
// other and a partitioned host cannot, and an external etcd on it that
// its client finds healthy.

// TestHarnessLAN: every host reaches every other by TCP; a partitioned host
// reaches none and none reaches it, though it still reaches itself; healed,
// it reaches them again.
func TestHarnessLAN(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	lan := hutchtest.NewLAN(t, 3)
	for _, h := range lan.Hosts {
		echo(t, h, 9000)
	}
	reach := func(from, to *hutchtest.Host) error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := from.DialContext(ctx, "tcp", to.Addr(9000))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, "ping"); err != nil {
			return err
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		if string(b) != "ping" {
			return errors.New("echo answered " + string(b))
		}
		return nil
	}
	check := func(cut *hutchtest.Host) {
		t.Helper()
		for _, from := range lan.Hosts {
			for _, to := range lan.Hosts {
				err := reach(from, to)
				wantCut := cut != nil && from != to && (from == cut || to == cut)
				switch {
				case wantCut && err == nil:
					t.Errorf("host %d reaches host %d across the partition of host %d", from.Index, to.Index, cut.Index)
				case !wantCut && err != nil:
					t.Errorf("host %d does not reach host %d: %v", from.Index, to.Index, err)
				}
			}
		}
	}
	check(nil)
	h2 := lan.Host(2)
	if err := h2.Partition(); err != nil {
		t.Fatal(err)
	}
	check(h2)
	if err := h2.Heal(); err != nil {
		t.Fatal(err)
	}
	// The link comes back up at once; give the bridge's port a moment
	// (it forwards as soon as it is up: no STP).
	deadline := time.Now().Add(5 * time.Second)
	for reach(lan.Host(1), h2) != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	check(nil)
}

// echo serves a TCP echo on port of host h until the test ends.
func echo(t *testing.T, h *hutchtest.Host, port int) {
	t.Helper()
	var l net.Listener
	err := h.Do(func() (err error) {
		l, err = net.Listen("tcp", h.Addr(port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
}

// TestHarnessEtcd: Debian's etcd started on a LAN host answers its own
// client as `etcdctl endpoint health` asks it (a read of "health"), keeps
// what is written and drops a key whose lease ends; with three members it
// goes on taking writes when one is killed.
func TestHarnessEtcd(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces")
	hutchtest.RequireEtcd(t)
	lan := hutchtest.NewLAN(t, 4)
	client := lan.Host(4)

	t.Run("one member", func(t *testing.T) {
		e := hutchtest.StartEtcdExternal(t, lan.Host(1))
		cli := etcdClient(t, client, e.Endpoints())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cli.Get(ctx, "health"); err != nil {
			t.Fatalf("endpoint health (a read of \"health\"): %v", err)
		}
		st, err := cli.Status(ctx, e.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("etcd %s, leader %x", st.Version, st.Leader)
		if _, err := cli.Put(ctx, "/hutch-test/k", "v"); err != nil {
			t.Fatal(err)
		}
		got, err := cli.Get(ctx, "/hutch-test/k")
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
			t.Fatalf("get after put: %v %v", got, err)
		}
		// A key bound to a lease that is not kept alive goes with it:
		// what a node's records rely on.
		lease, err := cli.Grant(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, "/hutch-test/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got, err := cli.Get(ctx, "/hutch-test/leased")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Kvs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a key of a 1 s lease still there after 5 s")
			}
		}
	})

	t.Run("three members", func(t *testing.T) {
		e := hutchtest.StartEtcdExternal(t, lan.Host(1), lan.Host(2), lan.Host(3))
		cli := etcdClient(t, client, e.Endpoints())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		members, err := cli.MemberList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(members.Members) != 3 {
			t.Fatalf("%d members, want 3: %v", len(members.Members), members.Members)
		}
		e.Members[0].Kill()
		// A write may fail while a new leader is elected (if the killed
		// one led): retry for a few election timeouts.
		var perr error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			_, perr = cli.Put(pctx, "/hutch-test/after", "kill")
			pcancel()
			if perr == nil {
				break
			}
		}
		if perr != nil {
			t.Fatalf("no write with two of three members: %v", perr)
		}
		if err := e.Members[1].Healthy(ctx); err != nil {
			t.Errorf("a member left: %v", err)
		}
	})
}

// etcdClient is etcd's own client for endpoints, dialling from host h;
// closed when the test ends.
func etcdClient(t *testing.T, h *hutchtest.Host, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return h.DialContext(ctx, "tcp", addr)
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestHarnessServeOnHost: a plain `hutch serve` (no cluster) in a LAN
// host, sandbox networking on, serves the JS SDK on another host: a
// command runs and a port inside answers. What the cluster tests build
// on.
func TestHarnessServeOnHost(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces and sandboxes")
	js := hutchtest.JSPackage(t, hutchtest.E2BJS)
	lan := hutchtest.NewLAN(t, 2)
	s := hutchtest.NewHostServer(t, hutchBin.Path(t), lan.Host(1))
	s.Start()
	id := sdkScript(t, js, lan.Host(2), s, `
import { Sandbox } from 'e2b'
const sbx = await Sandbox.create({ timeoutMs: 600_000 })
console.log(sbx.sandboxId)
process.exit(0)
`)
	arg, _ := json.Marshal([]string{id})
	out := sdkScript(t, js, lan.Host(2), s, commandAndPort, string(arg))
	var got map[string]struct{ Stdout, Port string }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if g := got[id]; g.Stdout != "42\n" || g.Port != id {
		t.Errorf("command printed %q (want \"42\\n\"), port 8000 answered %q (want %q)", g.Stdout, g.Port, id)
	}
}
