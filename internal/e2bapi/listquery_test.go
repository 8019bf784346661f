package e2bapi_test

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// wireListQuery is the raw query JS SDK 2.51 sent for
// metadata {suite: "probe", "k y": "v&=1"} (spec §2.6).
const wireListQuery = "metadata=suite%3Dprobe%26k%252520y%3Dv%252526%25253D1"

func mustParseQuery(t *testing.T, raw string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatalf("url.ParseQuery(%q): %v", raw, err)
	}
	return q
}

func TestParseListQuery(t *testing.T) {
	both := []string{"running", "paused"}
	def := func(f func(*e2bapi.ListQuery)) e2bapi.ListQuery {
		lq := e2bapi.ListQuery{States: both, Order: "desc", Limit: 100}
		f(&lq)
		return lq
	}
	tests := []struct {
		raw  string
		want e2bapi.ListQuery
	}{
		{"", def(func(*e2bapi.ListQuery) {})},
		{wireListQuery, def(func(q *e2bapi.ListQuery) { q.Metadata = map[string]string{"suite": "probe", "k y": "v&=1"} })},
		{"metadata=", def(func(*e2bapi.ListQuery) {})},
		{"metadata=a%3D1&metadata=b%3D2", def(func(q *e2bapi.ListQuery) { q.Metadata = map[string]string{"a": "1", "b": "2"} })},
		{"metadata=a%3D1%26a%3D2", def(func(q *e2bapi.ListQuery) { q.Metadata = map[string]string{"a": "2"} })},
		{"metadata=a%3D", def(func(q *e2bapi.ListQuery) { q.Metadata = map[string]string{"a": ""} })},
		// Python-style form encoding: a space as '+' at the inner level.
		{"metadata=k%2By%3Dv", def(func(q *e2bapi.ListQuery) { q.Metadata = map[string]string{"k y": "v"} })},
		{"state=running,paused", def(func(*e2bapi.ListQuery) {})},
		{"state=running%2Cpaused", def(func(*e2bapi.ListQuery) {})},
		{"state=paused", def(func(q *e2bapi.ListQuery) { q.States = []string{"paused"} })},
		{"state=paused,running,paused", def(func(q *e2bapi.ListQuery) { q.States = []string{"paused", "running"} })},
		{"state=running&state=paused", def(func(*e2bapi.ListQuery) {})},
		{"state=", def(func(*e2bapi.ListQuery) {})},
		{"startedAfter=2026-08-01T10:20:30.123Z", def(func(q *e2bapi.ListQuery) {
			q.StartedAfter = time.Date(2026, 8, 1, 10, 20, 30, 123e6, time.UTC)
		})},
		{"startedAfter=2026-08-01T10:20:30Z", def(func(q *e2bapi.ListQuery) { q.StartedAfter = time.Date(2026, 8, 1, 10, 20, 30, 0, time.UTC) })},
		{"startedAfter=2026-08-01T12:20:30%2B02:00", def(func(q *e2bapi.ListQuery) { q.StartedAfter = time.Date(2026, 8, 1, 10, 20, 30, 0, time.UTC) })},
		{"startedAfter=2026-08-01T12:20:30+02:00", def(func(q *e2bapi.ListQuery) { q.StartedAfter = time.Date(2026, 8, 1, 10, 20, 30, 0, time.UTC) })},
		{"startedAfter=2026-08-01T05:20:30.5-0500", def(func(q *e2bapi.ListQuery) {
			q.StartedAfter = time.Date(2026, 8, 1, 10, 20, 30, 5e8, time.UTC)
		})},
		{"startedAfter=2026-08-01", def(func(q *e2bapi.ListQuery) { q.StartedAfter = time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC) })},
		{"template=my-template", def(func(q *e2bapi.ListQuery) { q.Template = "my-template" })},
		{"order=asc", def(func(q *e2bapi.ListQuery) { q.Order = "asc" })},
		{"order=desc", def(func(*e2bapi.ListQuery) {})},
		{"limit=5", def(func(q *e2bapi.ListQuery) { q.Limit = 5 })},
		{"limit=0", def(func(q *e2bapi.ListQuery) { q.Limit = 1 })},
		{"limit=-3", def(func(q *e2bapi.ListQuery) { q.Limit = 1 })},
		{"limit=1000", def(func(q *e2bapi.ListQuery) { q.Limit = 100 })},
		{"limit=99999999999999999999999", def(func(q *e2bapi.ListQuery) { q.Limit = 100 })},
		{"limit=-99999999999999999999999", def(func(q *e2bapi.ListQuery) { q.Limit = 1 })},
		{"nextToken=abc_DEF-1&unknown=1", def(func(q *e2bapi.ListQuery) { q.NextToken = "abc_DEF-1" })},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := e2bapi.ParseListQuery(mustParseQuery(t, tt.raw))
			if err != nil {
				t.Fatalf("ParseListQuery(%q): %v", tt.raw, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseListQuery(%q) (-want +got):\n%s", tt.raw, diff)
			}
		})
	}
}

func TestParseListQueryErrors(t *testing.T) {
	tests := []struct {
		raw     string
		wantMsg string
	}{
		{"metadata=novalue", `metadata: "novalue" is not a key=value pair`},
		{"metadata=a%3D1%3D2", `metadata: "a=1=2" is not a key=value pair`},
		{"metadata=a%3D1%26", `metadata: "" is not a key=value pair`},
		{"metadata=%3Dv", "metadata: empty key"},
		{"metadata=a%3D%2525zz", "metadata: value of \"a\" has invalid percent-encoding"},
		{"metadata=%25zz", "metadata: invalid percent-encoding"},
		{"state=running,stopped", `state: "stopped" is not "running" or "paused"`},
		{"state=RUNNING", `state: "RUNNING"`},
		{"startedAfter=yesterday", `startedAfter: "yesterday" is not an ISO 8601 date-time`},
		{"startedAfter=1722500000", "startedAfter:"},
		{"order=newest", `order: must be "asc" or "desc", got "newest"`},
		{"limit=ten", `limit: "ten" is not an integer`},
		{"limit=1.5", `limit: "1.5" is not an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			_, err := e2bapi.ParseListQuery(mustParseQuery(t, tt.raw))
			if err == nil {
				t.Fatalf("ParseListQuery(%q) succeeded", tt.raw)
			}
			se := statusErr(t, err)
			if se.Status != 400 || !strings.Contains(se.Message, tt.wantMsg) {
				t.Errorf("ParseListQuery(%q) = %d %q, want 400 containing %q", tt.raw, se.Status, se.Message, tt.wantMsg)
			}
		})
	}
}

func TestParseLegacyListQuery(t *testing.T) {
	got, err := e2bapi.ParseLegacyListQuery(mustParseQuery(t, wireListQuery+"&state=paused&limit=3"))
	if err != nil {
		t.Fatal(err)
	}
	want := e2bapi.ListQuery{
		Metadata: map[string]string{"suite": "probe", "k y": "v&=1"},
		States:   []string{"running"},
		Order:    "desc",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := e2bapi.ParseLegacyListQuery(mustParseQuery(t, "metadata=x")); e2bapi.StatusOf(err) != 400 {
		t.Errorf("bad metadata: %v, want 400", err)
	}
}

func TestEncodeMetadataFilter(t *testing.T) {
	md := map[string]string{"suite": "probe", "k y": "v&=1"}
	q := url.Values{"metadata": {e2bapi.EncodeMetadataFilter(md)}}
	// The wire form with the keys sorted (JS keeps insertion order).
	const want = "metadata=k%252520y%3Dv%252526%25253D1%26suite%3Dprobe"
	if got := q.Encode(); got != want {
		t.Errorf("encoded = %q, want %q", got, want)
	}
	for _, md := range []map[string]string{
		{"a": "b"},
		{"ü n+i=c&o%de": "=&%+ ?#/"},
		{"empty": ""},
	} {
		raw := url.Values{"metadata": {e2bapi.EncodeMetadataFilter(md)}}.Encode()
		got, err := e2bapi.ParseListQuery(mustParseQuery(t, raw))
		if err != nil {
			t.Fatalf("round trip of %v through %q: %v", md, raw, err)
		}
		if diff := cmp.Diff(md, got.Metadata); diff != "" {
			t.Errorf("round trip through %q (-want +got):\n%s", raw, diff)
		}
	}
}

func TestCursor(t *testing.T) {
	c := e2bapi.Cursor{StartedAt: time.Date(2026, 8, 1, 10, 20, 30, 123456789, time.FixedZone("x", 3600)), SandboxID: "i9z8y7"}
	tok := e2bapi.EncodeCursor(c)
	if strings.ContainsAny(tok, "+/=") {
		t.Errorf("token %q is not unpadded base64url", tok)
	}
	got, err := e2bapi.DecodeCursor(tok)
	if err != nil {
		t.Fatalf("DecodeCursor(%q): %v", tok, err)
	}
	if !got.StartedAt.Equal(c.StartedAt) || got.SandboxID != c.SandboxID || got.StartedAt.Location() != time.UTC {
		t.Errorf("round trip = %+v, want %+v in UTC", got, c)
	}
	if _, err := e2bapi.DecodeCursor(tok + "=="); err != nil {
		t.Errorf("padded token: %v", err)
	}
	for _, bad := range []string{"", "!!!", "bm90LWEtY3Vyc29y", e2bapi.EncodeCursor(e2bapi.Cursor{})[:10]} {
		_, err := e2bapi.DecodeCursor(bad)
		if se := statusErr(t, err); se.Status != 400 || se.Message != "Invalid next token" {
			t.Errorf("DecodeCursor(%q) = %v, want 400 Invalid next token", bad, err)
		}
	}
}
