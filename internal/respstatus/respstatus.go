// Package respstatus remembers the status of an HTTP answer for code that
// wraps a handler (metrics, the audit trail) without hiding the server's
// own writer from it: flushes, full duplex and hijacks for upgrades reach
// the writer underneath (http.ResponseController unwraps).
package respstatus

import "net/http"

// Writer records the status of the answer written through it.
type Writer struct {
	http.ResponseWriter
	// Status is the answer's final status; 0 while none was written.
	Status int
}

// WriteHeader records the first final status (1xx ones are interim, but
// 101 Switching Protocols is final).
func (w *Writer) WriteHeader(code int) {
	if w.Status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes b, a 200 unless a status was written.
func (w *Writer) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps the wrapped writer's streaming for code that asks for an
// http.Flusher by type assertion rather than a ResponseController.
func (w *Writer) Flush() {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the writer it wraps, for http.ResponseController.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
