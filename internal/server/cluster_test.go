package server

import "testing"

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
