package etcdspike

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func start(t *testing.T, names ...string) []*Member {
	t.Helper()
	members, err := Start(t.TempDir(), names, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Stop every raft node first, then close them all at once: one
		// by one, each leader in turn would try to hand over to members
		// already gone (4 s), and each Close waits up to 1 s for its
		// peers' idle connections.
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, m := range members {
			m.Etcd.Server.HardStop()
		}
		for _, m := range members {
			wg.Go(m.Close)
		}
		wg.Wait()
		t.Logf("closed %d members in %.2f s", len(members), time.Since(t0).Seconds())
	})
	return members
}

func client(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A node's key bound to a 2 s lease lives while the lease is kept alive and
// is deleted by etcd itself, seen through a watch, once the keepalives stop:
// what node liveness in issue 21 stands on.
func TestLeaseBoundKeyGoesWhenKeepaliveStops(t *testing.T) {
	m := start(t, "n1")
	var endpoints []string
	for _, m := range m {
		endpoints = append(endpoints, m.ClientURL)
	}
	leaseBoundKeyGoes(t, client(t, endpoints...))
}

// The same against an external etcd (issue 21's --etcd-endpoints), when
// HUTCH_TEST_ETCD_ENDPOINTS names one (comma-separated URLs); for example
// Debian 12's etcd-server (3.4.23) run by hand:
//
//	etcd --data-dir $(mktemp -d) --listen-client-urls http://127.0.0.1:23790 \
//		--advertise-client-urls http://127.0.0.1:23790 \
//		--listen-peer-urls http://127.0.0.1:23800
func TestLeaseBoundKeyGoesOnExternalEtcd(t *testing.T) {
	endpoints := os.Getenv("HUTCH_TEST_ETCD_ENDPOINTS")
	if endpoints == "" {
		t.Skip("HUTCH_TEST_ETCD_ENDPOINTS names no external etcd")
	}
	cli := client(t, strings.Split(endpoints, ",")...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, ep := range cli.Endpoints() {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: etcd %s", ep, st.Version)
	}
	leaseBoundKeyGoes(t, cli)
}

func leaseBoundKeyGoes(t *testing.T, cli *clientv3.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	key := fmt.Sprintf("/hutch/spike/nodes/n1-%d", time.Now().UnixNano())
	lease, err := cli.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(ctx, key, `{"addr":"http://127.0.0.1:3000"}`, clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	events := cli.Watch(ctx, key, clientv3.WithRev(put.Header.Revision+1))

	kaCtx, kaStop := context.WithCancel(ctx)
	defer kaStop()
	kas, err := cli.KeepAlive(kaCtx, lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lastRenewal time.Time
	renewals := 0
	go func() {
		for range kas {
			mu.Lock()
			lastRenewal = time.Now()
			renewals++
			mu.Unlock()
		}
	}()

	// Twice the TTL with keepalives: the key stays.
	time.Sleep(4 * time.Second)
	got, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 {
		t.Fatalf("key gone while its lease was kept alive: %v", got.Kvs)
	}

	kaStop()
	stopped := time.Now()
	mu.Lock()
	last, n := lastRenewal, renewals
	mu.Unlock()
	t.Logf("keepalive stopped after %d renewals", n)

	for {
		select {
		case resp, ok := <-events:
			if !ok {
				t.Fatal("watch closed before the key was deleted")
			}
			if err := resp.Err(); err != nil {
				t.Fatal(err)
			}
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete {
					t.Fatalf("unexpected event %v on %s", ev.Type, ev.Kv.Key)
				}
				t.Logf("key deleted, seen by the watch %.2f s after keepalive stopped (%.2f s after the last renewal; TTL 2 s)",
					time.Since(stopped).Seconds(), time.Since(last).Seconds())
				got, err := cli.Get(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				if len(got.Kvs) != 0 {
					t.Fatalf("key still there after its delete event: %v", got.Kvs)
				}
				ttl, err := cli.TimeToLive(ctx, lease.ID)
				if err != nil {
					t.Fatal(err)
				}
				if ttl.TTL != -1 {
					t.Fatalf("lease still alive, TTL %d", ttl.TTL)
				}
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("key not deleted 10 s after keepalive stopped")
		}
	}
}

// Three embedded members form one cluster; its leader stops and writes
// through the two others succeed again. "crash" stops the leader's raft
// node without telling anyone (as kill -9 would: the others must notice
// the missing heartbeats and elect); "graceful" is embed.Etcd.Close, which
// hands leadership over first (as hutch serve shutting down would). How
// long writes failed is logged, not asserted.
func TestWritesAfterLeaderStops(t *testing.T) {
	for _, mode := range []string{"crash", "graceful"} {
		t.Run(mode, func(t *testing.T) {
			members := start(t, "a", "b", "c")
			leaderID := members[0].Etcd.Server.Leader()
			var leader *Member
			var others []*Member
			for _, m := range members {
				if m.Etcd.Server.MemberID() == leaderID {
					leader = m
				} else {
					others = append(others, m)
				}
			}
			if leader == nil {
				t.Fatalf("no member is the leader %s", leaderID)
			}
			cli := client(t, others[0].ClientURL, others[1].ClientURL)
			ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "/hutch/spike", "before"); err != nil {
				t.Fatal(err)
			}

			// Write without pause from the moment the stop begins (in
			// parallel: Close takes a second) until a write succeeds after
			// it has finished; the longest time between two successful
			// writes is how long the cluster could not take one.
			stopped := time.Now()
			stopDone := make(chan time.Duration, 1)
			go func() {
				switch mode {
				case "crash":
					leader.Etcd.Server.HardStop()
					stopDone <- time.Since(stopped)
					leader.Close() // its listeners: as the kernel would
					return
				case "graceful":
					leader.Close()
				}
				stopDone <- time.Since(stopped)
			}()
			var stopTook, longest time.Duration
			lastOK, done, failed := stopped, false, 0
			for {
				if !done {
					select {
					case stopTook = <-stopDone:
						done = true
					default:
					}
				}
				// WithRequireLeader: fail at once where the member
				// knows there is no leader; the short timeout: a write
				// forwarded to the stopped leader is lost and waits.
				pctx, pcancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 100*time.Millisecond)
				_, err := cli.Put(pctx, "/hutch/spike", "after")
				pcancel()
				if err == nil {
					longest = max(longest, time.Since(lastOK))
					lastOK = time.Now()
					if done {
						break
					}
					continue
				}
				failed++
				if ctx.Err() != nil {
					t.Fatalf("no write succeeded %s after the leader %s stopped: %v", time.Since(stopped), leader.Name, err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			var newLeader string
			for _, m := range others {
				if m.Etcd.Server.MemberID() == m.Etcd.Server.Leader() {
					newLeader = m.Name
				}
			}
			if newLeader == "" {
				t.Fatalf("a write succeeded but neither %s nor %s leads", others[0].Name, others[1].Name)
			}
			t.Logf("%s stop of leader %s (the stop took %.3f s): longest time without a successful write %.3f s, %d writes failed; new leader %s",
				mode, leader.Name, stopTook.Seconds(), longest.Seconds(), failed, newLeader)
			got, err := cli.Get(ctx, "/hutch/spike")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "after" {
				t.Fatalf("read back %v", got.Kvs)
			}
		})
	}
}
