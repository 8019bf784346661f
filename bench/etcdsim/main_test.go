package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestMain lets the test binary be an etcd member too: startCluster
// re-executes this binary with memberCmd.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == memberCmd {
		os.Exit(runMember(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// 50 nodes (and two watchers) for 2 s against a fresh 3-voter cluster on
// loopback: every kind of call happens and none fails. No timing is
// checked.
func TestSimulation(t *testing.T) {
	cfg := config{
		nodes:          50,
		duration:       2 * time.Second,
		lease:          3 * time.Second,
		loadEvery:      time.Second,
		createsPerS:    20,
		rangesPerS:     5,
		clients:        4,
		registerConc:   8,
		registerWithin: time.Minute,
		watchers:       2,
		timeout:        5 * time.Second,
		compaction:     "0",
		dir:            t.TempDir(),
		prefix:         "/hutch/v1/",
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := runStep(ctx, cfg, cfg.nodes)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{opGrant, opRegister, opRenew, opLoad, opRange, opCreate, opWatch} {
		st := r.stats[op]
		if len(st.times) == 0 {
			t.Errorf("%s: none done", op)
		}
		if st.errs != 0 {
			t.Errorf("%s: %d errors: %s", op, st.errs, st.errSummary())
		}
	}
	if r.stats[opRejoin].count() != 0 || r.lost != 0 {
		t.Errorf("leases lost: %d (rejoins %d), want none", r.lost, r.stats[opRejoin].count())
	}
	if r.nodeKeys != int64(cfg.nodes) {
		t.Errorf("nodes/ keys at the end: got %d, want %d", r.nodeKeys, cfg.nodes)
	}
	if r.rangeKeys != cfg.nodes {
		t.Errorf("keys in the last range of nodes/: got %d, want %d", r.rangeKeys, cfg.nodes)
	}
	var leaders int
	for _, m := range r.members {
		if m.statusErr != nil {
			t.Errorf("status of %s: %v", m.name, m.statusErr)
		}
		if m.leader {
			leaders++
		}
	}
	if len(r.members) != 3 || leaders != 1 {
		t.Errorf("members: %d with %d leaders, want 3 with 1", len(r.members), leaders)
	}
	t.Logf("renewals %d, load puts %d, ranges %d, creates %d, watch events %d in %.1f s",
		r.stats[opRenew].count(), r.stats[opLoad].count(), r.stats[opRange].count(), r.stats[opCreate].count(),
		r.stats[opWatch].count(), r.window.Seconds())
}
