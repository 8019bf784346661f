package e2bapi_test

import (
	"bytes"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// FuzzParseListQuery checks that any raw query either fails with a 400 or
// gives a ListQuery within its documented bounds. Seeds: testdata/fuzz.
func FuzzParseListQuery(f *testing.F) {
	for _, s := range []string{
		"",
		wireListQuery,
		"state=running%2Cpaused&limit=7&order=asc&startedAfter=2026-08-01T10:20:30.123Z",
		"metadata=a%3D1%26&limit=-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw) // keeps what it could parse
		lq, err := e2bapi.ParseListQuery(q)
		if err != nil {
			if got := e2bapi.StatusOf(err); got != 400 {
				t.Fatalf("ParseListQuery(%q): status %d, want 400", raw, got)
			}
			return
		}
		if lq.Limit < 1 || lq.Limit > e2bapi.MaxListLimit {
			t.Errorf("limit %d out of range", lq.Limit)
		}
		if lq.Order != e2bapi.OrderAsc && lq.Order != e2bapi.OrderDesc {
			t.Errorf("order %q", lq.Order)
		}
		if len(lq.States) == 0 || len(lq.States) > 2 {
			t.Errorf("states %q", lq.States)
		}
		for _, s := range lq.States {
			if s != e2bapi.StateRunning && s != e2bapi.StatePaused {
				t.Errorf("state %q", s)
			}
		}
		for k := range lq.Metadata {
			if k == "" {
				t.Errorf("empty metadata key")
			}
		}
		// Whatever filter was parsed survives the SDKs' encoding.
		if lq.Metadata != nil {
			enc := url.Values{"metadata": {e2bapi.EncodeMetadataFilter(lq.Metadata)}}.Encode()
			q2, err := url.ParseQuery(enc)
			if err != nil {
				t.Fatal(err)
			}
			lq2, err := e2bapi.ParseListQuery(q2)
			if err != nil {
				t.Fatalf("re-encoded filter %q: %v", enc, err)
			}
			if len(lq2.Metadata) != len(lq.Metadata) {
				t.Fatalf("re-encoded filter %q: %v != %v", enc, lq2.Metadata, lq.Metadata)
			}
			for k, v := range lq.Metadata {
				if lq2.Metadata[k] != v {
					t.Fatalf("re-encoded filter %q: %q=%q, want %q", enc, k, lq2.Metadata[k], v)
				}
			}
		}
		if _, err := e2bapi.ParseLegacyListQuery(q); err != nil && e2bapi.StatusOf(err) != 400 {
			t.Errorf("ParseLegacyListQuery: %v", err)
		}
	})
}

// FuzzDecodeNewSandbox checks that any body either fails with a 400 or 413
// or decodes into a request that re-encodes stably and normalizes without
// panicking. Seeds: testdata/fuzz.
func FuzzDecodeNewSandbox(f *testing.F) {
	for _, s := range []string{
		wireCreateV2,
		`{}`,
		`{"templateID":"base","timeout":300,"metadata":{},"envVars":{},"secure":true,"allow_internet_access":true}`,
		`{"timeout":"91"}`,
		`{"a":1} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var v e2bapi.NewSandboxV1
		err := e2bapi.DecodeBytes(body, &v, false)
		if err != nil {
			if got := e2bapi.StatusOf(err); got != 400 && got != 413 {
				t.Fatalf("DecodeBytes(%q): status %d (%v)", body, got, err)
			}
			return
		}
		b1, err := json.Marshal(&v)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var v2 e2bapi.NewSandboxV1
		if err := e2bapi.DecodeBytes(b1, &v2, false); err != nil {
			t.Fatalf("re-decoding %s: %v", b1, err)
		}
		b2, err := json.Marshal(&v2)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("unstable encoding:\n%s\n%s", b1, b2)
		}
		if err := v.Normalize(); err != nil {
			if got := e2bapi.StatusOf(err); got != 400 {
				t.Fatalf("Normalize: status %d (%v)", got, err)
			}
			return
		}
		if v.TemplateID == "" || v.Timeout == nil || *v.Timeout < 0 || *v.Timeout > e2bapi.MaxTimeout {
			t.Fatalf("normalized request out of bounds: %+v", v)
		}
	})
}
