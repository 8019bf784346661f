package server

import (
	"net/http"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/console"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// The web console (internal/console, docs/console.md) signs in with an
// API key kept in a cookie, and then calls the same REST API as the SDKs:
// authed takes the cookie's key in place of X-API-KEY (consoleKey).
const (
	// consoleCookie holds the console's API key: HttpOnly (no script
	// reads it), Secure, SameSite=Strict, Path=/. The __Host- prefix
	// makes browsers refuse one set with a Domain, a Path other than / or
	// without Secure: a sandbox's page on <port>-<id>.<domain>, the same
	// site as the console, cannot plant its own key's cookie where the
	// console's requests would carry it (review of issue 22: cookie
	// tossing signed an operator's console in as a tenant).
	consoleCookie = "__Host-hutch_console"
	// consoleHeader must be "1" on every request that the cookie
	// authenticates, sign-in included. A page of another origin cannot
	// send it without a CORS preflight, which Hutch never approves, so a
	// cookie a browser sends on its own (a form, a link, a page of a
	// sandbox's <port>-<id>.<domain>, which is same-site) authenticates
	// nothing: defence in depth beside SameSite=Strict.
	consoleHeader = "X-Hutch-Console"
)

// consoleRoutes registers the console's page, its assets and its session.
func (s *Server) consoleRoutes() {
	s.handle("GET /{$}", s.consolePage)
	s.handle("GET /console/assets/{name}", s.consoleAsset)
	s.handle("POST /console/session", s.consoleSignIn)
	s.handle("DELETE /console/session", s.consoleSignOut)
}

// consolePage answers GET / with the console's page, to anyone: it holds
// nothing secret until signed in.
func (s *Server) consolePage(w http.ResponseWriter, r *http.Request) {
	if s.console == nil {
		e2bapi.Write(w, s.logger, notSupported("the web console", "this binary was built without it"))
		return
	}
	s.console.ServeIndex(w, r)
}

// consoleAsset answers GET /console/assets/{name}.
func (s *Server) consoleAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if s.console == nil || !s.console.Asset(name) {
		e2bapi.Write(w, s.logger, e2bapi.NotFound("no such console asset: "+name))
		return
	}
	s.console.ServeAsset(w, r, name)
}

// maxSignInBody bounds a sign-in's body: {"apiKey": "e2b_…"}.
const maxSignInBody = 4 << 10

// consoleSignIn answers POST /console/session {"apiKey": "e2b_…"}: 204
// with the key in the console's cookie when the key is valid, 401 when it
// is not. The key travels in the body, never in a URL.
func (s *Server) consoleSignIn(w http.ResponseWriter, r *http.Request) {
	console.SetSecurityHeaders(w.Header())
	if r.Header.Get(consoleHeader) != "1" {
		// Without the header a page of another origin could sign a
		// browser in with a key of its choosing (login CSRF).
		e2bapi.Write(w, s.logger, &e2bapi.StatusError{Status: http.StatusForbidden, Message: "sign in from the console: the " + consoleHeader + " header is missing"})
		return
	}
	var req consoleSession
	// A key is some fifty bytes: anyone may call this, so the body it
	// reads is small (1 MiB trickled at the pace allowed held a
	// connection's megabyte for half an hour, review 27 round 2, G6).
	if err := e2bapi.DecodeJSON(r, &req, maxSignInBody); err != nil {
		e2bapi.Write(w, s.logger, err)
		return
	}
	key := strings.TrimSpace(req.APIKey)
	if !e2bapi.ValidKeyFormat(key) {
		e2bapi.Write(w, s.logger, e2bapi.Unauthorized("invalid API key"))
		return
	}
	id, err := s.mgr.VerifyKey(r.Context(), key)
	if err != nil {
		if errdefs.IsNotFound(err) {
			err = e2bapi.Unauthorized("invalid API key")
		}
		e2bapi.Write(w, s.logger, err)
		return
	}
	auditKey(r, id)
	// A session cookie (no Max-Age): it ends with the browser, and every
	// request checks the key again, so a revoked key ends it at once.
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: key, Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// consoleSession is the body of POST /console/session.
type consoleSession struct {
	APIKey string `json:"apiKey"`
}

// consoleSignOut answers DELETE /console/session: 204, the cookie
// cleared. It needs no key: anyone may forget their own cookie.
func (s *Server) consoleSignOut(w http.ResponseWriter, r *http.Request) {
	console.SetSecurityHeaders(w.Header())
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

// consoleKey is the API key of the console's cookie, when the request
// carries the console's header too; "" otherwise.
func consoleKey(r *http.Request) string {
	if r.Header.Get(consoleHeader) != "1" {
		return ""
	}
	var key string
	for _, c := range r.CookiesNamed(consoleCookie) {
		if key != "" && c.Value != key {
			// Two keys: one was planted. Neither is trusted.
			return ""
		}
		key = c.Value
	}
	return key
}

// stripConsoleCookie removes the console's cookie from a request the edge
// router sends on to a sandbox: the console's calls to envd go to the same
// origin and carry it, and a sandbox must never see an API key.
func stripConsoleCookie(h http.Header) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var kept []string
	for _, line := range lines {
		var parts []string
		for _, p := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(p), "=")
			if name != consoleCookie {
				parts = append(parts, strings.TrimSpace(p))
			}
		}
		if len(parts) > 0 {
			kept = append(kept, strings.Join(parts, "; "))
		}
	}
	h.Del("Cookie")
	for _, k := range kept {
		h.Add("Cookie", k)
	}
}

// dropConsoleSetCookie removes from a sandbox's answer any Set-Cookie of
// the console's cookie: routed by header, a sandbox answers on the
// console's own origin, and could otherwise sign the browser in with a key
// of its choosing.
func dropConsoleSetCookie(resp *http.Response) error {
	lines := resp.Header.Values("Set-Cookie")
	if len(lines) == 0 {
		return nil
	}
	resp.Header.Del("Set-Cookie")
	for _, line := range lines {
		name, _, _ := strings.Cut(line, "=")
		if strings.TrimSpace(name) != consoleCookie {
			resp.Header.Add("Set-Cookie", line)
		}
	}
	return nil
}
