package osbexecd

import "net/http"

// Why the parts of execd that envd cannot back are refused.
const (
	msgCode = "code interpreting (Jupyter code contexts) is not available in this sandbox: " +
		"Hutch serves commands, sessions and files; run code with POST /command"
	msgPTY = "PTY sessions over WebSocket are not available through Hutch's OpenSandbox API; " +
		"use POST /command or POST /session"
	msgOperations = "caller-bound command and PTY operations are not available through Hutch's OpenSandbox API; " +
		"use POST /command"
	msgIsolated = "isolated sessions are not available: every Hutch sandbox is isolated as a whole"
	msgIdentity = "per-identity file access (/v1/filesystem/{uid}/{gid}) is not available: " +
		"Hutch's file API does not check permissions against a uid; run a command with uid instead"
)

// notImplemented answers 501 with msg in execd's error shape.
func notImplemented(msg string) handlerFunc {
	return func(_ *Handler, w http.ResponseWriter, _ *http.Request, _ *call) {
		writeError(w, http.StatusNotImplemented, codeNotSupported, msg)
	}
}

// isolatedCapabilities is GET /v1/isolated/capabilities: isolation is not
// available (the other isolated endpoints answer 503, as the spec says of
// an execd without it).
func (h *Handler) isolatedCapabilities(w http.ResponseWriter, _ *http.Request, _ *call) {
	writeJSON(w, map[string]any{
		"available":         false,
		"isolator":          "none",
		"message":           msgIsolated,
		"commit_supported":  false,
		"diff_supported":    false,
		"setpriv_available": false,
		"userns_available":  false,
	})
}
