// Package console serves Hutch's web console: one HTML page and its
// script and style sheet, built from web/console by scripts/console.sh
// and embedded in the binary, so that `hutch serve` needs no other server
// and the browser fetches nothing from a CDN at run time.
//
// The built files (dist/) are committed: `go build` from a clean checkout
// then needs no Node.js, and scripts/test.sh rebuilds them and fails when
// they differ from the committed ones (docs/console.md).
//
// The console holds no state and has no API of its own: the page signs in
// (internal/server's /console/session) and then calls the same REST API
// and the same envd services through the edge router as the SDKs do.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// dist is the built console: index.html and assets/.
//
//go:embed dist
var dist embed.FS

// CSP is the Content-Security-Policy of every console answer. Scripts,
// connections and everything else come from the server itself and no
// inline script runs; no page may frame the console (clickjacking).
// style-src allows inline styles because xterm.js writes its theme and
// cell sizes into <style> elements it makes at run time.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// SetSecurityHeaders sets the headers every console answer carries: CSP,
// no MIME sniffing, no Referer (a page's URL names sandboxes), no framing
// for browsers that predate frame-ancestors.
func SetSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// file is one embedded file, read once.
type file struct {
	body  []byte
	ctype string
	etag  string
}

// Console serves the embedded files. Its zero value is not ready: use
// New. Safe for concurrent use (it never changes after New).
type Console struct {
	index  file
	assets map[string]file // by name under dist/assets
}

// New reads the embedded files. It fails only if the build put no
// index.html in dist, which the package's tests catch.
func New() (*Console, error) {
	c := &Console{assets: map[string]file{}}
	b, err := dist.ReadFile("dist/index.html")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	c.index = newFile("index.html", b)
	entries, err := fs.ReadDir(dist, "dist/assets")
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := dist.ReadFile("dist/assets/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		c.assets[e.Name()] = newFile(e.Name(), b)
	}
	return c, nil
}

func newFile(name string, body []byte) file {
	sum := sha256.Sum256(body)
	ctype := "application/octet-stream"
	switch path.Ext(name) {
	case ".html":
		ctype = "text/html; charset=utf-8"
	case ".js":
		ctype = "text/javascript; charset=utf-8"
	case ".css":
		ctype = "text/css; charset=utf-8"
	case ".svg":
		ctype = "image/svg+xml"
	}
	return file{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
}

// ServeIndex answers the console's page.
func (c *Console) ServeIndex(w http.ResponseWriter, r *http.Request) {
	c.serve(w, r, c.index)
}

// Asset reports whether the console has an asset of that name (a plain
// file name: no directories).
func (c *Console) Asset(name string) bool {
	_, ok := c.assets[name]
	return ok && !strings.ContainsAny(name, "/\\")
}

// ServeAsset answers the asset name, which must be one Asset reports.
func (c *Console) ServeAsset(w http.ResponseWriter, r *http.Request, name string) {
	c.serve(w, r, c.assets[name])
}

// serve answers f, revalidated by its ETag at each use: the names carry
// no hash, so a browser must ask again after an upgrade of the server.
func (c *Console) serve(w http.ResponseWriter, r *http.Request, f file) {
	h := w.Header()
	SetSecurityHeaders(h)
	h.Set("Content-Type", f.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	// ServeContent answers If-None-Match and ranges; the zero time sends
	// no Last-Modified (embedded files have none).
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}
