package server

import (
	"net/url"
	"strings"
	"testing"
)

func TestPathIDs(t *testing.T) {
	for _, tc := range []struct {
		path, sandbox, volume string
	}{
		{"/sandboxes/abc", "abc", ""},
		{"/sandboxes/abc/pause", "abc", ""},
		{"/v2/sandboxes/abc/logs", "abc", ""},
		{"/sandboxes/metrics", "", ""},
		{"/sandboxes", "", ""},
		{"/sandboxes/", "", ""},
		{"/volumes/v1", "", "v1"},
		{"/volumecontent/v1/dir/file", "", "v1"},
		{"/volumes", "", ""},
		{"/templates/abc", "", ""},
		{"/x/sandboxes/abc", "", ""},
	} {
		if got := apiSandboxID(tc.path); got != tc.sandbox {
			t.Errorf("apiSandboxID(%q) = %q, want %q", tc.path, got, tc.sandbox)
		}
		if got := volumeID(tc.path); got != tc.volume {
			t.Errorf("volumeID(%q) = %q, want %q", tc.path, got, tc.volume)
		}
	}
}

// TestSignedFields: what is sent to the other nodes of a signed /files
// URL is what its signature covers, one value each (review 26: the whole
// query went, escaped again); a signature longer than any envd makes is
// no signature.
func TestSignedFields(t *testing.T) {
	q, _ := url.ParseQuery("path=%2Fa&path=%2Fb&username=user&signature=v1_x&signature_expiration=9&pad=" + strings.Repeat("%25", 100))
	if got, want := signedFields(q).Encode(), "path=%2Fa&signature=v1_x&signature_expiration=9&username=user"; got != want {
		t.Errorf("signedFields = %s, want %s", got, want)
	}
	if _, ok := fileSignature("GET", url.Values{"path": {"/a"}, "signature": {"v1_" + strings.Repeat("A", 43)}}); !ok {
		t.Error("an envd-sized signature was refused")
	}
	if _, ok := fileSignature("GET", url.Values{"path": {"/a"}, "signature": {strings.Repeat("A", maxSignature+1)}}); ok {
		t.Errorf("a %d-byte signature was read", maxSignature+1)
	}
}
