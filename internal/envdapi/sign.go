package envdapi

import (
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// The operations a /files signature names: a signed download URL cannot be
// replayed as an upload URL and vice versa.
const (
	OpRead  = "read"
	OpWrite = "write"
)

// Sign returns the signature E2B's SDKs put in the signature query
// parameter of a signed /files URL: "v1_" followed by the unpadded
// standard base64 of SHA-256 over "<path>:<operation>:<username>:<token>",
// with ":<expiration>" appended when expiration is not 0. operation is
// OpRead for downloads and OpWrite for uploads; path and username are
// exactly as they appear in the URL (username "" for the sandbox's default
// user).
func Sign(path, operation, username, token string, expiration int64) string {
	exp := ""
	if expiration != 0 {
		exp = strconv.FormatInt(expiration, 10)
	}
	return SignExpiration(path, operation, username, token, exp)
}

// SignExpiration is Sign with the expiration as the URL gives it (empty
// for none): a URL may carry signature_expiration=0, which still takes
// part in the hash.
func SignExpiration(path, operation, username, token, expiration string) string {
	return Signer(path, operation, username, expiration)(token)
}

// Signer returns SignExpiration for one URL, as a function of the token:
// what the URL names (up to 8 KiB of path and username) is hashed once,
// and each call hashes only the token and the expiration. The edge router
// tries the token of every running sandbox on a URL that names none, so
// the path's cost must not be paid once per sandbox (review 8: 15 µs per
// sandbox per anonymous request with an 8 KiB query).
func Signer(path, operation, username, expiration string) func(token string) string {
	h := sha256.New()
	io.WriteString(h, path+":"+operation+":"+username+":")
	// crypto/sha256's digest marshals its state, so each token continues
	// from the prefix's.
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("envdapi: sha256 state: " + err.Error())
	}
	tail := ""
	if expiration != "" {
		tail = ":" + expiration
	}
	return func(token string) string {
		d := sha256.New()
		if err := d.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
			panic("envdapi: sha256 state: " + err.Error())
		}
		io.WriteString(d, token+tail)
		var sum [sha256.Size]byte
		return "v1_" + base64.RawStdEncoding.EncodeToString(d.Sum(sum[:0]))
	}
}

// Expiration reads a signed URL's signature_expiration as envd checks it:
// text is what the signature hashes (the number as the reference envd
// formats it, so "+5" hashes as "5" and "0" as "0"), "" when the URL has
// none; unix is its value. A value that is not a number is an
// errdefs.ErrInvalidArgument. envd and the edge router, which finds a
// signed URL's sandbox by its signature, must agree on it to the byte.
func Expiration(q url.Values) (text string, unix int64, err error) {
	if !q.Has("signature_expiration") {
		return "", 0, nil
	}
	unix, err = strconv.ParseInt(q.Get("signature_expiration"), 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("invalid signature_expiration %q: %w", q.Get("signature_expiration"), errdefs.ErrInvalidArgument)
	}
	return strconv.FormatInt(unix, 10), unix, nil
}
