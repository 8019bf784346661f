package server

import (
	"net/http"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// serveMetrics answers GET /metrics with the server's Prometheus metrics
// when the operator serves them on the API's listener (--metrics-api),
// to any valid API key: they count every key's sandboxes together, by
// template, and name no sandbox, key or snapshot. Otherwise it is a 404
// that says where they are.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.promAPI == nil {
		e2bapi.Write(w, s.logger, e2bapi.NotFound("metrics are not served on this listener: see hutch serve --metrics-api and --metrics-listen (docs/metrics.md)"))
		return
	}
	// The scrape limit is enforced here, not by promhttp, so that a
	// refusal is E2B's JSON error as every other answer of this listener.
	select {
	case s.promSlots <- struct{}{}:
		defer func() { <-s.promSlots }()
	default:
		e2bapi.WriteError(w, http.StatusServiceUnavailable, "too many scrapes at once", "")
		return
	}
	s.promAPI.ServeHTTP(w, r)
}
