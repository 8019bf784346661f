package envdapi

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/url"
	"strings"
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

// TestSigner: the router's signer, which hashes what the URL names once,
// gives what the formula gives, for paths of every length and with and
// without an expiration.
func TestSigner(t *testing.T) {
	formula := func(path, op, user, token, exp string) string {
		s := path + ":" + op + ":" + user + ":" + token
		if exp != "" {
			s += ":" + exp
		}
		sum := sha256.Sum256([]byte(s))
		return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	}
	for _, path := range []string{"", "a.txt", "/home/user/" + strings.Repeat("d/", 2000) + "f"} {
		for _, exp := range []string{"", "0", "1700000000"} {
			sign := Signer(path, OpWrite, "user", exp)
			for _, token := range []string{"tok", strings.Repeat("f", 64)} {
				if got, want := sign(token), formula(path, OpWrite, "user", token, exp); got != want {
					t.Errorf("Signer(%.20q…, exp %q)(%q) = %s, want %s", path, exp, token, got, want)
				}
			}
		}
	}
}

// BenchmarkSigner: the cost per token of a URL with a 4 KiB path, what
// the router pays for each running sandbox.
func BenchmarkSigner(b *testing.B) {
	sign := Signer("/"+strings.Repeat("a", 4095), OpRead, strings.Repeat("u", 4096), "")
	token := strings.Repeat("f", 64)
	for b.Loop() {
		sign(token)
	}
}
