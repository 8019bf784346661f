package server

import (
	"io"
	"net/http"
	"strconv"

	"github.com/hutch-sandbox/hutch/api/openapi"
)

// handle registers an API pattern and keeps it in s.patterns, so that
// the routes the router serves can be listed and held to the OpenAPI
// document without a second list of them to forget to update.
func (s *Server) handle(pattern string, h http.HandlerFunc) {
	// Counted by pattern: a bounded set, where the path has ids.
	s.api.Handle(pattern, s.prom.InstrumentAPI(pattern, s.audited(pattern, h)))
	s.patterns = append(s.patterns, pattern)
}

// openAPI answers GET /openapi.json with the API's OpenAPI document, to
// anyone: it is public knowledge (the server's source says the same), and
// tools must read it before they have a key.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(openapi.JSON)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, openapi.JSON)
}
