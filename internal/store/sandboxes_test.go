package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

func mustKey(t *testing.T, s *Store, name string) Key {
	t.Helper()
	_, k, err := s.CreateKey(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestSandboxRoundTrip(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	k := mustKey(t, s, "a")
	no := false
	in := Sandbox{
		ID: "abc123", TemplateID: "tpl1", Alias: "base",
		EnvdVersion: "0.2.0", EnvdAccessToken: "tok", TrafficAccessToken: "traffic",
		Secure: true, AllowInternetAccess: &no, AutoPause: true, AutoResume: true,
		AllowOut: []string{"1.1.1.1", "example.com"}, DenyOut: []string{"0.0.0.0/0"},
		AllowPublicTraffic: &no, MaskRequestHost: "${PORT}.example",
		Metadata:  map[string]string{"k y": "v&=1", "suite": "probe"},
		EnvVars:   map[string]string{"FOO": "bar"},
		StartedAt: t0, EndAt: t0.Add(5 * time.Minute),
		CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, CPUMillis: 1500,
		Image: "registry.local/app:1", Entrypoint: []string{"python", "-m", "http.server"},
		State: StatePaused, KeyID: k.ID, Runtime: `{"pid":42}`,
	}
	sb := in
	if err := s.CreateSandbox(ctx, &sb); err != nil {
		t.Fatal(err)
	}
	// Survives a re-open (a restarted server).
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.GetSandbox(ctx, k.ID, "abc123")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}

	// Defaults: state running, StartedAt now, maps non-nil, nil bool stays nil.
	d := Sandbox{ID: "def", TemplateID: "base", EndAt: t0}
	before := time.Now()
	if err := s2.CreateSandbox(ctx, &d); err != nil {
		t.Fatal(err)
	}
	got, err = s2.GetSandbox(ctx, "", "def")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateRunning || got.StartedAt.Before(before.Add(-time.Second)) ||
		got.Metadata == nil || got.EnvVars == nil || got.AllowInternetAccess != nil || got.KeyID != "" ||
		got.AllowOut == nil || got.DenyOut == nil || got.AllowPublicTraffic != nil || got.MaskRequestHost != "" ||
		got.CPUMillis != 0 || got.Image != "" || got.Entrypoint != nil {
		t.Fatalf("defaults: %+v", got)
	}

	// SetMetadata replaces the map; a missing sandbox is not found.
	if err := s2.SetMetadata(ctx, "def", map[string]string{"team": "ml"}); err != nil {
		t.Fatal(err)
	}
	if got, err := s2.GetSandbox(ctx, "", "def"); err != nil || !cmp.Equal(got.Metadata, map[string]string{"team": "ml"}) {
		t.Fatalf("after SetMetadata: %v %v", got.Metadata, err)
	}
	if err := s2.SetMetadata(ctx, "nope", nil); !errdefs.IsNotFound(err) {
		t.Fatalf("SetMetadata of a missing sandbox: %v", err)
	}
}

func TestCreateSandboxErrors(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	k := mustKey(t, s, "a")
	if err := s.CreateSandbox(ctx, &Sandbox{ID: "dup", KeyID: k.ID, EndAt: t0}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sb   Sandbox
		want error
	}{
		{"duplicate", Sandbox{ID: "dup", EndAt: t0}, errdefs.ErrAlreadyExists},
		{"empty id", Sandbox{EndAt: t0}, errdefs.ErrInvalidArgument},
		{"id with underscore", Sandbox{ID: "a__b", EndAt: t0}, errdefs.ErrInvalidArgument},
		{"id with slash", Sandbox{ID: "../x", EndAt: t0}, errdefs.ErrInvalidArgument},
		{"bad state", Sandbox{ID: "x1", State: "dead", EndAt: t0}, errdefs.ErrInvalidArgument},
		{"no end", Sandbox{ID: "x2"}, errdefs.ErrInvalidArgument},
		{"unknown key", Sandbox{ID: "x3", KeyID: "key_nope", EndAt: t0}, errdefs.ErrInvalidArgument},
	} {
		sb := tc.sb
		if err := s.CreateSandbox(ctx, &sb); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestSandboxUpdates(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	// other is a second handle on the file, as another process would have:
	// it sees only committed writes.
	other, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := s.CreateSandbox(ctx, &Sandbox{ID: "s1", StartedAt: t0, EndAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	// ExtendEndAt never moves backwards.
	for _, tc := range []struct {
		to, want time.Time
	}{
		{t0.Add(30 * time.Minute), t0.Add(time.Hour)},
		{t0.Add(2 * time.Hour), t0.Add(2 * time.Hour)},
		{t0, t0.Add(2 * time.Hour)},
		{t0.Add(2*time.Hour + time.Nanosecond), t0.Add(2*time.Hour + time.Nanosecond)},
	} {
		got, err := s.ExtendEndAt(ctx, "s1", tc.to)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ExtendEndAt(%v) = %v, %v; want %v", tc.to, got, err, tc.want)
		}
		sb, _ := other.GetSandbox(ctx, "", "s1")
		if !sb.EndAt.Equal(tc.want) {
			t.Errorf("stored EndAt = %v, want %v", sb.EndAt, tc.want)
		}
	}
	// SetEndAt may shorten.
	if err := s.SetEndAt(ctx, "s1", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if sb, _ := s.GetSandbox(ctx, "", "s1"); !sb.EndAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("SetEndAt: EndAt = %v", sb.EndAt)
	}
	if err := s.SetState(ctx, "s1", StatePaused); err != nil {
		t.Fatal(err)
	}
	if err := s.SetState(ctx, "s1", StatePaused); err != nil {
		t.Fatalf("SetState to same state: %v", err)
	}
	if err := s.SetState(ctx, "s1", "killed"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("SetState(killed) = %v", err)
	}
	if err := s.SetRuntime(ctx, "s1", `{"pid":7}`); err != nil {
		t.Fatal(err)
	}
	sb, _ := s.GetSandbox(ctx, "", "s1")
	if sb.State != StatePaused || sb.Runtime != `{"pid":7}` {
		t.Errorf("after updates: %+v", sb)
	}

	// Everything on a missing sandbox is ErrNotFound.
	nf := map[string]error{
		"SetEndAt":      s.SetEndAt(ctx, "nope", t0),
		"SetState":      s.SetState(ctx, "nope", StateRunning),
		"SetRuntime":    s.SetRuntime(ctx, "nope", ""),
		"DeleteSandbox": s.DeleteSandbox(ctx, "nope"),
	}
	_, nf["ExtendEndAt"] = s.ExtendEndAt(ctx, "nope", t0)
	_, nf["GetSandbox"] = s.GetSandbox(ctx, "", "nope")
	for name, err := range nf {
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s(missing) = %v, want ErrNotFound", name, err)
		}
	}

	if err := s.DeleteSandbox(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox(ctx, "s1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete = %v", err)
	}
}

func TestExpiredSandboxes(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	now := t0.Add(time.Hour)
	for _, sb := range []Sandbox{
		{ID: "past2", EndAt: now.Add(-time.Minute)},
		{ID: "past1", EndAt: now.Add(-time.Hour)},
		{ID: "exact", EndAt: now},
		{ID: "future", EndAt: now.Add(time.Nanosecond)},
		{ID: "pausedpast", EndAt: now.Add(-time.Hour), State: StatePaused},
	} {
		sb.StartedAt = t0
		if err := s.CreateSandbox(ctx, &sb); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ExpiredSandboxes(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"past1", "past2", "exact"}, ids(got)); diff != "" {
		t.Errorf("expired (-want +got):\n%s", diff)
	}
	all, err := s.AllSandboxes(ctx)
	if err != nil || len(all) != 5 {
		t.Errorf("AllSandboxes = %d, %v", len(all), err)
	}
}

func ids(sbs []Sandbox) []string {
	out := []string{}
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

func TestKeyScoping(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	a, b := mustKey(t, s, "a"), mustKey(t, s, "b")
	if err := s.CreateSandbox(ctx, &Sandbox{ID: "owned", KeyID: a.ID, EndAt: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSandbox(ctx, a.ID, "owned"); err != nil {
		t.Errorf("owner cannot see its sandbox: %v", err)
	}
	if _, err := s.GetSandbox(ctx, b.ID, "owned"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("other key sees sandbox: %v", err)
	}
	if _, err := s.GetSandbox(ctx, "", "owned"); err != nil {
		t.Errorf("keyID \"\" cannot see sandbox: %v", err)
	}
	for _, tc := range []struct {
		key  string
		want []string
	}{{a.ID, []string{"owned"}}, {b.ID, []string{}}, {"", []string{"owned"}}} {
		items, next, err := s.ListSandboxes(ctx, ListFilter{KeyID: tc.key})
		if err != nil || next != "" {
			t.Fatalf("list: %v %q", err, next)
		}
		if diff := cmp.Diff(tc.want, ids(items)); diff != "" {
			t.Errorf("list as %q (-want +got):\n%s", tc.key, diff)
		}
	}
}

// listFixture stores sandboxes for the filter and pagination tests. Several
// share a StartedAt so the ID tiebreak matters.
func listFixture(t *testing.T) (*Store, Key, Key) {
	t.Helper()
	s, _ := openTest(t)
	ctx := context.Background()
	a, b := mustKey(t, s, "a"), mustKey(t, s, "b")
	for _, sb := range []Sandbox{
		{ID: "s01", StartedAt: t0, TemplateID: "tplbase", Alias: "base", Metadata: map[string]string{"suite": "probe", "k y": "v&=1"}},
		{ID: "s02", StartedAt: t0.Add(time.Second), TemplateID: "tplbase", Alias: "base", Metadata: map[string]string{"suite": "probe"}},
		{ID: "s03", StartedAt: t0.Add(time.Second), TemplateID: "tplpy", Alias: "python", Metadata: map[string]string{"suite": "other", "k y": "v&=1"}, State: StatePaused},
		{ID: "s04", StartedAt: t0.Add(time.Second), TemplateID: "tplpy", Metadata: map[string]string{"suite": "probe", "k y": "v&=1", "a=b": "c&d"}},
		{ID: "s05", StartedAt: t0.Add(2 * time.Second), TemplateID: "tplbase", Alias: "base", State: StatePaused},
		{ID: "s06", StartedAt: t0.Add(3 * time.Second), TemplateID: "tplbase", Alias: "base", Metadata: map[string]string{"suite": "probe "}},
		{ID: "s07", StartedAt: t0.Add(3*time.Second + time.Nanosecond), TemplateID: "tplbase", Metadata: map[string]string{"Suite": "probe"}},
		{ID: "b01", StartedAt: t0.Add(time.Second), TemplateID: "tplbase", Alias: "base", Metadata: map[string]string{"suite": "probe"}},
	} {
		sb.EndAt = t0.Add(time.Hour)
		sb.KeyID = a.ID
		if sb.ID[0] == 'b' {
			sb.KeyID = b.ID
		}
		if err := s.CreateSandbox(ctx, &sb); err != nil {
			t.Fatal(err)
		}
	}
	return s, a, b
}

func TestListFilters(t *testing.T) {
	s, a, _ := listFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		f    ListFilter
		want []string
	}{
		{"all desc (default)", ListFilter{}, []string{"s07", "s06", "s05", "s04", "s03", "s02", "s01"}},
		{"all asc", ListFilter{Order: "asc"}, []string{"s01", "s02", "s03", "s04", "s05", "s06", "s07"}},
		{"explicit desc", ListFilter{Order: "desc"}, []string{"s07", "s06", "s05", "s04", "s03", "s02", "s01"}},
		{"metadata one", ListFilter{Metadata: map[string]string{"suite": "probe"}}, []string{"s04", "s02", "s01"}},
		{"metadata AND with space & =", ListFilter{Metadata: map[string]string{"suite": "probe", "k y": "v&=1"}}, []string{"s04", "s01"}},
		{"metadata key with =", ListFilter{Metadata: map[string]string{"a=b": "c&d"}}, []string{"s04"}},
		{"metadata value exact (no trim)", ListFilter{Metadata: map[string]string{"suite": "probe "}}, []string{"s06"}},
		{"metadata key case-sensitive", ListFilter{Metadata: map[string]string{"Suite": "probe"}}, []string{"s07"}},
		{"metadata no match", ListFilter{Metadata: map[string]string{"suite": "nope"}}, []string{}},
		{"metadata missing key", ListFilter{Metadata: map[string]string{"k y": "v&=1", "missing": ""}}, []string{}},
		{"running only", ListFilter{States: []string{StateRunning}}, []string{"s07", "s06", "s04", "s02", "s01"}},
		{"paused only", ListFilter{States: []string{StatePaused}}, []string{"s05", "s03"}},
		{"both states", ListFilter{States: []string{StatePaused, StateRunning}}, []string{"s07", "s06", "s05", "s04", "s03", "s02", "s01"}},
		{"startedAfter inclusive", ListFilter{StartedAfter: t0.Add(2 * time.Second)}, []string{"s07", "s06", "s05"}},
		{"startedAfter ns", ListFilter{StartedAfter: t0.Add(3*time.Second + 1)}, []string{"s07"}},
		{"template by alias", ListFilter{Template: "python"}, []string{"s03"}},
		{"template by id", ListFilter{Template: "tplpy"}, []string{"s04", "s03"}},
		{"template alias asc", ListFilter{Template: "base", Order: "asc"}, []string{"s01", "s02", "s05", "s06"}},
		{"combined", ListFilter{Template: "tplbase", States: []string{StateRunning}, Metadata: map[string]string{"suite": "probe"}, StartedAfter: t0.Add(time.Second)}, []string{"s02"}},
		{"limit clamps high", ListFilter{Limit: 1000}, []string{"s07", "s06", "s05", "s04", "s03", "s02", "s01"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.f
			f.KeyID = a.ID
			items, next, err := s.ListSandboxes(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if next != "" {
				t.Errorf("nextToken %q on a single page", next)
			}
			if diff := cmp.Diff(tc.want, ids(items)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestListLimitClampLow(t *testing.T) {
	s, a, _ := listFixture(t)
	items, next, err := s.ListSandboxes(context.Background(), ListFilter{KeyID: a.ID, Limit: -5})
	if err != nil || len(items) != 1 || next == "" {
		t.Fatalf("Limit -5: %d items, next %q, %v", len(items), next, err)
	}
}

func TestPagination(t *testing.T) {
	s, a, _ := listFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		f    ListFilter
	}{
		{"desc", ListFilter{}},
		{"asc", ListFilter{Order: "asc"}},
		{"desc running", ListFilter{States: []string{StateRunning}}},
		{"asc metadata", ListFilter{Order: "asc", Metadata: map[string]string{"suite": "probe"}}},
		{"desc template", ListFilter{Template: "base"}},
		{"asc all keys", ListFilter{Order: "asc", KeyID: "-"}},
	} {
		for _, limit := range []int{1, 2, 3, 7, 8} {
			t.Run(fmt.Sprintf("%s/limit%d", tc.name, limit), func(t *testing.T) {
				f := tc.f
				if f.KeyID == "-" {
					f.KeyID = ""
				} else {
					f.KeyID = a.ID
				}
				// The expected order: one page with the maximum limit.
				whole := f
				whole.Limit = MaxListLimit
				want, next, err := s.ListSandboxes(ctx, whole)
				if err != nil || next != "" {
					t.Fatalf("whole: %v %q", err, next)
				}
				f.Limit = limit
				var got []string
				pages := 0
				for {
					items, next, err := s.ListSandboxes(ctx, f)
					if err != nil {
						t.Fatalf("page %d: %v", pages, err)
					}
					pages++
					if len(items) > limit || len(items) == 0 && len(want) > 0 {
						t.Fatalf("page %d has %d items (limit %d)", pages, len(items), limit)
					}
					got = append(got, ids(items)...)
					if next == "" {
						break
					}
					if pages > 20 {
						t.Fatal("pagination does not end")
					}
					f.NextToken = next
				}
				if diff := cmp.Diff(ids(want), got); diff != "" {
					t.Errorf("walk (-want +got):\n%s", diff)
				}
				wantPages := max(1, (len(want)+limit-1)/limit)
				if pages != wantPages {
					t.Errorf("%d pages, want %d (last page must have no token)", pages, wantPages)
				}
				seen := map[string]bool{}
				for _, id := range got {
					if seen[id] {
						t.Errorf("%s listed twice", id)
					}
					seen[id] = true
				}
			})
		}
	}
}

func TestPaginationExactMultiple(t *testing.T) {
	// 4 items, limit 2: the second page is full and must carry no token.
	s, a, _ := listFixture(t)
	ctx := context.Background()
	f := ListFilter{KeyID: a.ID, Limit: 2, Template: "base"}
	p1, next, err := s.ListSandboxes(ctx, f)
	if err != nil || len(p1) != 2 || next == "" {
		t.Fatalf("page 1: %v %q %v", ids(p1), next, err)
	}
	f.NextToken = next
	p2, next, err := s.ListSandboxes(ctx, f)
	if err != nil || len(p2) != 2 || next != "" {
		t.Fatalf("page 2: %v %q %v", ids(p2), next, err)
	}
	if got := append(ids(p1), ids(p2)...); !slices.Equal(got, []string{"s06", "s05", "s02", "s01"}) {
		t.Fatalf("got %v", got)
	}
}

func TestListBadInput(t *testing.T) {
	s, a, _ := listFixture(t)
	ctx := context.Background()
	_, descTok, err := s.ListSandboxes(ctx, ListFilter{KeyID: a.ID, Limit: 2})
	if err != nil || descTok == "" {
		t.Fatal(err)
	}
	_, ascTok, err := s.ListSandboxes(ctx, ListFilter{KeyID: a.ID, Limit: 2, Order: "asc"})
	if err != nil || ascTok == "" {
		t.Fatal(err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name string
		f    ListFilter
	}{
		{"not base64", ListFilter{NextToken: "!!!"}},
		{"garbage", ListFilter{NextToken: enc("hello")}},
		{"bad time", ListFilter{NextToken: enc("yesterday__s01")}},
		{"empty id", ListFilter{NextToken: enc(t0.Format(time.RFC3339Nano) + "__")}},
		{"bad id", ListFilter{NextToken: enc(t0.Format(time.RFC3339Nano) + "__a/b")}},
		{"bad suffix", ListFilter{NextToken: enc(t0.Format(time.RFC3339Nano) + "__s01__up")}},
		{"too many parts", ListFilter{NextToken: enc(t0.Format(time.RFC3339Nano) + "__s01__asc__x")}},
		{"desc token asc order", ListFilter{NextToken: descTok, Order: "asc"}},
		{"asc token desc order", ListFilter{NextToken: ascTok}},
		{"bad order", ListFilter{Order: "up"}},
		{"bad state", ListFilter{States: []string{"running", "killed"}}},
	} {
		f := tc.f
		f.KeyID = a.ID
		if _, _, err := s.ListSandboxes(ctx, f); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	// A padded token is accepted too.
	if _, _, err := s.ListSandboxes(ctx, ListFilter{KeyID: a.ID, NextToken: descTok + "=="}); err != nil {
		t.Errorf("padded token: %v", err)
	}
}

func TestSetEgress(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	no := false
	sb := &Sandbox{ID: "inet", TemplateID: "base", EnvdVersion: "0.6.4", StartedAt: t0, EndAt: t0.Add(time.Minute),
		AllowOut: []string{"1.1.1.1"}, AllowPublicTraffic: &no, MaskRequestHost: "h"}
	if err := s.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if err := s.SetEgress(ctx, "inet", &no, nil, []string{"0.0.0.0/0"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "", "inet")
	if err != nil || len(got.AllowOut) != 0 || !slices.Equal(got.DenyOut, []string{"0.0.0.0/0"}) ||
		got.AllowInternetAccess == nil || *got.AllowInternetAccess {
		t.Errorf("after SetEgress: %+v, %v", got, err)
	}
	// The inbound settings are not egress: they stay.
	if got.AllowPublicTraffic == nil || *got.AllowPublicTraffic || got.MaskRequestHost != "h" {
		t.Errorf("SetEgress changed the inbound settings: %+v", got)
	}
	if err := s.SetEgress(ctx, "inope", nil, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetEgress of a missing sandbox: %v", err)
	}
}

func TestCountSandboxes(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if got, err := s.CountSandboxes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("CountSandboxes of none = %v, %v", got, err)
	}
	k1, k2 := mustKey(t, s, "a"), mustKey(t, s, "b")
	for _, sb := range []Sandbox{
		{ID: "a1", TemplateID: "base", KeyID: k1.ID},
		{ID: "a2", TemplateID: "base", KeyID: k2.ID},
		{ID: "a3", TemplateID: "base", KeyID: k1.ID, State: StatePaused},
		{ID: "a4", TemplateID: "py", KeyID: k1.ID},
	} {
		sb.StartedAt, sb.EndAt = t0, t0.Add(time.Hour)
		if err := s.CreateSandbox(ctx, &sb); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.CountSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []SandboxCount{{StatePaused, "base", 1}, {StateRunning, "base", 2}, {StateRunning, "py", 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}
