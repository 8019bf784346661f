package files

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envd/envderr"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// tokenMessage is envd's wording for a wrong access token (spec §3.1); the
// SDKs show it to users, so it is kept verbatim.
const tokenMessage = "unauthorized access, please provide a valid access token or method signing if supported"

// envd's messages for a signature that is not the URL's, and for one that
// was but whose signature_expiration has passed (E2B's envd, api/auth.go
// validateSigning), verbatim: users of the SDKs match on them.
const (
	msgInvalidSignature = "invalid signature"
	msgExpiredSignature = "signature is already expired"
)

// authorize applies envd's /files rules (spec §3.1, §3.9): no token on the
// sandbox means no checks; an X-Access-Token header must match and then
// decides alone; otherwise the URL must carry a matching signature that has
// not expired, checked in that order as envd does (a forged URL is "invalid
// signature" whatever its expiration). Failures are of the class
// envderr.ErrUnauthenticated (401), with envd's words alone as their
// message, except a malformed signature_expiration, which can never
// succeed (400).
func authorize(r *http.Request, q url.Values, token, operation string, now time.Time) error {
	if token == "" {
		return nil
	}
	if got := r.Header.Get(envdapi.HeaderAccessToken); got != "" {
		if !equal(got, token) {
			return unauthenticated(tokenMessage)
		}
		return nil
	}
	sig := q.Get("signature")
	if sig == "" {
		return unauthenticated(tokenMessage + ": missing signature query parameter")
	}
	exp, expires, err := envdapi.Expiration(q)
	if err != nil {
		return err
	}
	if !equal(sig, envdapi.SignExpiration(q.Get("path"), operation, q.Get("username"), token, exp)) {
		return unauthenticated(msgInvalidSignature)
	}
	if exp != "" && expires < now.Unix() {
		return unauthenticated(msgExpiredSignature)
	}
	return nil
}

// unauthenticated is a refusal of the request's credentials whose message
// is msg exactly: wrapping envderr.ErrUnauthenticated with %w would append
// ": unauthorized" to envd's words.
func unauthenticated(msg string) error {
	return errdefs.Mark(errors.New(msg), envderr.ErrUnauthenticated)
}

// equal compares secrets in constant time. Hashing first makes the time
// independent of the lengths too, which ConstantTimeCompare alone reveals.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
