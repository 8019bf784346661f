package metrics

import (
	"net/http"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/respstatus"
)

// statusWriter records the status of an answer.
type statusWriter struct{ respstatus.Writer }

// class is the status class of the answer to r: "2xx", "5xx"... An
// answer that wrote no status through the writer was either nothing (200,
// as net/http sends it) or an upgrade whose 101 went on the hijacked
// connection (httputil.ReverseProxy writes it there).
func (w *statusWriter) class(r *http.Request) string {
	code := w.Status
	if code == 0 {
		code = http.StatusOK
		if isUpgrade(r) {
			code = http.StatusSwitchingProtocols
		}
	}
	if code < 100 || code > 599 {
		return "other"
	}
	return string(rune('0'+code/100)) + "xx"
}

// isUpgrade reports whether r asks for a protocol upgrade.
func isUpgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}
