package envdapi

import (
	"errors"
	"net/url"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

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

// TestExpiration: the text a signature hashes, as envd reads it; the edge
// router must get the same text from the same URL.
func TestExpiration(t *testing.T) {
	for _, tc := range []struct {
		query, text string
		unix        int64
		bad         bool
	}{
		{"path=a", "", 0, false},
		{"signature_expiration=1700000000", "1700000000", 1700000000, false},
		{"signature_expiration=0", "0", 0, false},
		{"signature_expiration=%2B5", "5", 5, false},
		{"signature_expiration=", "", 0, true},
		{"signature_expiration=soon", "", 0, true},
	} {
		q, _ := url.ParseQuery(tc.query)
		text, unix, err := Expiration(q)
		if tc.bad {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: %v, want an invalid argument", tc.query, err)
			}
			continue
		}
		if err != nil || text != tc.text || unix != tc.unix {
			t.Errorf("%s: %q, %d, %v; want %q, %d", tc.query, text, unix, err, tc.text, tc.unix)
		}
	}
}
