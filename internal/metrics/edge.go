package metrics

import (
	"net/http"
	"strings"
)

// statusWriter records the status of the answer written through it. It
// unwraps (http.ResponseController) to the writer it wraps, so the edge's
// flushes, full duplex and hijacks for upgrades reach the server's own.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	// The first final status is the answer's (1xx ones are interim,
	// but 101 Switching Protocols is final).
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps the wrapped writer's streaming for code that asks for an
// http.Flusher by type assertion rather than a ResponseController.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the writer it wraps, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// class is the status class of the answer to r: "2xx", "5xx"... An
// answer that wrote no status through the writer was either nothing (200,
// as net/http sends it) or an upgrade whose 101 went on the hijacked
// connection (httputil.ReverseProxy writes it there).
func (w *statusWriter) class(r *http.Request) string {
	code := w.status
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
