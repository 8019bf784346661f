package serve

import (
	"net/http"
	"time"
)

// MetricsHandler serves the server's metrics at GET /metrics, to anyone
// who reaches it, and nothing else: the handler of a listener of their
// own (hutch serve --metrics-listen), which the operator keeps where only
// the scraper reaches it.
func (s *Server) MetricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.Metrics.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "this listener serves GET /metrics only", http.StatusNotFound)
	})
	return mux
}

// MetricsServer is the HTTP server of the metrics' own listener: plain
// HTTP, with the bounds a scraper never reaches (its requests are small
// and its scrapes take milliseconds), so that nothing else holds it.
func (s *Server) MetricsServer() *http.Server {
	return &http.Server{
		Handler:           s.MetricsHandler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}
