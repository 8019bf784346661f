package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/api/openapi"
)

// openAPIMethods are the operations an OpenAPI path item may have: a
// pattern without a method serves all of them.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// subtreeMark marks a path item "/prefix/{path}" that stands for the
// ServeMux subtree pattern "/prefix/": every path under the prefix.
const subtreeMark = "x-hutch-subtree"

// document is the parts of the OpenAPI document the route tests read.
type document struct {
	Security []map[string]any          `json:"security"`
	Paths    map[string]map[string]any `json:"paths"`
}

func loadDocument(t *testing.T) document {
	t.Helper()
	var doc document
	if err := json.Unmarshal([]byte(openapi.JSON), &doc); err != nil {
		t.Fatalf("api/openapi/openapi.json: %v", err)
	}
	if len(doc.Paths) == 0 {
		t.Fatal("api/openapi/openapi.json has no paths")
	}
	return doc
}

// documentedAt maps a ServeMux pattern of routes() to the document: the
// path it is documented at, the operations that path must have, and
// whether the path stands for a subtree. ok is false for a pattern form
// the rules below do not cover (a host, {name...}, {$}): add a rule
// before using one.
func documentedAt(pattern string) (path string, methods []string, subtree, ok bool) {
	method, path, found := strings.Cut(pattern, " ")
	if !found {
		method, path = "", pattern
	}
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "...}") || strings.Contains(path, "{$}") {
		return "", nil, false, false
	}
	methods = openAPIMethods
	if method != "" {
		methods = []string{strings.ToLower(method)}
	}
	if strings.HasSuffix(path, "/") {
		return path + "{path}", methods, true, true
	}
	return path, methods, false, true
}

// TestRoutesMatchDocument holds the router (the patterns routes()
// registers) and the OpenAPI document (api/openapi/openapi.json) to each
// other, both ways. A pattern maps to the document so:
//
//   - "METHOD /path": paths["/path"] has that method's operation (a
//     {name} wildcard is written the same in both);
//   - "/path", without a method, serves every method: paths["/path"] has
//     all eight of OpenAPI's operations;
//   - "/prefix/", a subtree, serves every method on every path under the
//     prefix: paths["/prefix/{path}"], marked "x-hutch-subtree": true,
//     has all eight;
//   - "/", the catch-all, is not a route: it is the 404 of every path
//     nothing else serves, which the document's description states.
//
// The other way, each operation of the document, made into a request
// (each {name} filled in), must reach through the real mux the pattern
// documented at that path: not the catch-all, nor another route. GET
// patterns serve HEAD too (net/http's rule); the document need not say
// so. And each operation's security must be what the route does: a
// request without a key answers 401 exactly when the operation needs one.
func TestRoutesMatchDocument(t *testing.T) {
	doc := loadDocument(t)
	s := New(Options{})
	if len(s.patterns) < 10 {
		t.Fatalf("routes() registered only %v", s.patterns)
	}

	// The router's routes are in the document.
	for _, pattern := range s.patterns {
		if pattern == "/" {
			continue
		}
		path, methods, subtree, ok := documentedAt(pattern)
		if !ok {
			t.Errorf("pattern %q: no rule maps it to the OpenAPI document (see this test)", pattern)
			continue
		}
		item, ok := doc.Paths[path]
		if !ok {
			t.Errorf("the router serves %q, but api/openapi/openapi.json has no path %q", pattern, path)
			continue
		}
		if marked := item[subtreeMark] == true; marked != subtree {
			t.Errorf("path %q: %s is %v, but the router's %q is %s", path, subtreeMark, marked, pattern,
				map[bool]string{true: "a subtree", false: "not a subtree"}[subtree])
		}
		for _, m := range methods {
			if _, ok := item[m]; !ok {
				t.Errorf("the router serves %q, but api/openapi/openapi.json has no %s %s", pattern, strings.ToUpper(m), path)
			}
		}
	}

	// The document's routes are the router's.
	wildcard := regexp.MustCompile(`\{[^}]+\}`)
	for path, item := range doc.Paths {
		// Filled in: a wildcard with one segment, a subtree's rest with
		// one and with several.
		urls := []string{wildcard.ReplaceAllString(path, "x1")}
		if item[subtreeMark] == true {
			if !strings.HasSuffix(path, "/{path}") {
				t.Errorf("path %q: %s, but not \"/prefix/{path}\"", path, subtreeMark)
			}
			urls = append(urls, strings.TrimSuffix(path, "{path}")+"x1/x2/x3")
		}
		for _, m := range openAPIMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			for _, url := range urls {
				req := httptest.NewRequest(strings.ToUpper(m), url, nil)
				_, pattern := s.api.Handler(req)
				if pattern == "/" {
					t.Errorf("api/openapi/openapi.json has %s %s, which the router does not serve (%s %s answers 404)", strings.ToUpper(m), path, req.Method, url)
					continue
				}
				if at, _, _, _ := documentedAt(pattern); at != path {
					t.Errorf("%s %s, documented at %s, reaches the router's %q, documented at %q", req.Method, url, path, pattern, at)
				}
				checkSecurity(t, s, doc, op, req, path)
			}
		}
	}
}

// checkSecurity: without a key, req answers 401 exactly when the
// operation needs a key (its own security, else the document's), and
// the document lists that 401.
func checkSecurity(t *testing.T, s *Server, doc document, op map[string]any, req *http.Request, path string) {
	t.Helper()
	security := doc.Security
	if v, ok := op["security"]; ok {
		list, _ := v.([]any)
		security = nil
		for _, req := range list {
			m, _ := req.(map[string]any)
			security = append(security, m)
		}
	}
	needsKey := len(security) > 0
	for _, req := range security {
		if len(req) == 0 {
			needsKey = false // {} in the list: anonymous is one way in
		}
	}
	rec := httptest.NewRecorder()
	s.api.ServeHTTP(rec, req)
	if got := rec.Code == http.StatusUnauthorized; got != needsKey {
		t.Errorf("%s %s without a key answers %d, but the document says it needs a key: %v", req.Method, req.URL.Path, rec.Code, needsKey)
	}
	responses, _ := op["responses"].(map[string]any)
	if _, listed := responses["401"]; needsKey && !listed {
		t.Errorf("%s %s needs a key, but its operation lists no 401", strings.ToUpper(req.Method), path)
	}
}

// TestRouteRules: the pattern rules of TestRoutesMatchDocument, and their
// refusals.
func TestRouteRules(t *testing.T) {
	tests := []struct {
		pattern, path string
		methods       []string
		subtree, ok   bool
	}{
		{"GET /sandboxes/{id}", "/sandboxes/{id}", []string{"get"}, false, true},
		{"/secrets", "/secrets", openAPIMethods, false, true},
		{"/secrets/", "/secrets/{path}", openAPIMethods, true, true},
		{"POST /secrets/", "/secrets/{path}", []string{"post"}, true, true},
		{"GET /files/{path...}", "", nil, false, false},
		{"GET /{$}", "", nil, false, false},
		{"example.com/", "", nil, false, false},
	}
	for _, tc := range tests {
		path, methods, subtree, ok := documentedAt(tc.pattern)
		if path != tc.path || !slices.Equal(methods, tc.methods) || subtree != tc.subtree || ok != tc.ok {
			t.Errorf("%q: got %q %v %v %v, want %q %v %v %v", tc.pattern, path, methods, subtree, ok, tc.path, tc.methods, tc.subtree, tc.ok)
		}
	}
}

// TestOpenAPIServed: GET /openapi.json through the real server answers the
// document, to a client without a key.
func TestOpenAPIServed(t *testing.T) {
	srv, _ := newTestServer(t)
	resp, err := http.Get(srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json without a key: %d %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("the body is not JSON: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") || doc.Paths["/openapi.json"] == nil {
		t.Errorf("openapi %q, %d paths: not this document", doc.OpenAPI, len(doc.Paths))
	}
	if string(body) != openapi.JSON {
		t.Error("the body is not api/openapi's document, byte for byte")
	}
}
