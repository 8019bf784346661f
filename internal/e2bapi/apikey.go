package e2bapi

import (
	"net/http"
	"strings"
)

// HeaderAPIKey is the header both SDKs send the API key in on every
// control-plane call. HTTP header names are case-insensitive; net/http
// canonicalizes this one to "X-Api-Key".
const HeaderAPIKey = "X-API-KEY"

// APIKeyPrefix starts every key Hutch issues; the Python SDK refuses keys
// without it (spec §2.1).
const APIKeyPrefix = "e2b_"

// APIKeyFromRequest returns the API key r presents, or "" if none: the
// X-API-KEY header (any case), else an "Authorization: Bearer e2b_..." header
// (for the CLI; the scheme name is case-insensitive, and Bearer tokens not
// shaped like a key are ignored, since they are E2B access or volume
// tokens). Surrounding spaces are trimmed. It does not check the key's
// format ([ValidKeyFormat]) or validity.
func APIKeyFromRequest(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get(HeaderAPIKey)); k != "" {
		return k
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, APIKeyPrefix) {
		return ""
	}
	return token
}

// ValidKeyFormat reports whether k matches ^e2b_[0-9a-f]+$, the shape the
// Python SDK enforces client-side. A key failing it can be rejected with a
// 401 without a lookup.
func ValidKeyFormat(k string) bool {
	hex, ok := strings.CutPrefix(k, APIKeyPrefix)
	if !ok || hex == "" {
		return false
	}
	for i := 0; i < len(hex); i++ {
		c := hex[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
