package envdapi

import "testing"

func TestSign(t *testing.T) {
	// Expected values computed independently (Python hashlib/base64) from
	// the spec's formula, so they pin the wire format, not this code.
	tests := []struct {
		path, op, user, token string
		exp                   int64
		want                  string
	}{
		{"/home/user/a.txt", "read", "user", "tok", 1700000000, "v1_rjyaqcqTmWCotSjgdIM5sPngpduJ8ZZz/orD09SpFng"},
		{"a.txt", "write", "", "tok", 0, "v1_/GA+OwObMH6etEE0CJuj8oBdczYFCpvdP4xFwJ/WIH8"},
	}
	for _, tc := range tests {
		if got := Sign(tc.path, tc.op, tc.user, tc.token, tc.exp); got != tc.want {
			t.Errorf("Sign(%q, %q, %q, %q, %d) = %q, want %q", tc.path, tc.op, tc.user, tc.token, tc.exp, got, tc.want)
		}
	}
}
