package osbexecd

import "net/http"

// ServeSandbox is Serve with the sandbox's envd given by its parts: the
// shape internal/server's Execd takes, so that the server needs no type of
// this package.
func (h *Handler) ServeSandbox(w http.ResponseWriter, r *http.Request, id string, transport http.RoundTripper, token string) {
	h.Serve(w, r, id, Envd{Transport: transport, Token: token})
}
