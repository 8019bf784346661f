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
	methods = openAPIMethods
	if method != "" {
		methods = []string{strings.ToLower(method)}
	}
	if path == "/{$}" {
		// The root exactly (the console's page): "/" to OpenAPI, which
		// has no subtrees.
		return "/", methods, false, true
	}
	if !strings.HasPrefix(path, "/") || strings.Contains(path, "...}") || strings.Contains(path, "{$}") {
		return "", nil, false, false
	}
	if strings.HasSuffix(path, "/") {
		return path + "{path}", methods, true, true
	}
	return path, methods, false, true
}

// itemPath is the document's path item for a path documentedAt mapped a
// pattern to, and whether the document has it: the path itself, or, for
// a subtree's "/prefix/{path}", the one "/prefix/{name}" the document
// has, whatever its wildcard's name (OpenAPI's "/prefix/{a}" and
// "/prefix/{b}" are one path: a subtree shares the item of the
// one-segment routes under its prefix). When there is none it returns
// path itself, for messages.
func (doc document) itemPath(path string, subtree bool) (string, bool) {
	if _, ok := doc.Paths[path]; ok || !subtree {
		return path, ok
	}
	prefix := strings.TrimSuffix(path, "{path}")
	for p := range doc.Paths {
		if pre, ok := subtreePrefix(p); ok && pre == prefix {
			return p, true
		}
	}
	return path, false
}

// subtreePrefix splits a path "/prefix/{name}" (one wildcard, the whole
// last segment) into "/prefix/"; ok is false for any other path.
func subtreePrefix(path string) (prefix string, ok bool) {
	i := strings.LastIndexByte(path, '/')
	last := path[i+1:]
	if i < 0 || len(last) < 3 || last[0] != '{' || last[len(last)-1] != '}' || strings.ContainsAny(last[1:len(last)-1], "{}") {
		return "", false
	}
	return path[:i+1], true
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
//     has all eight. To OpenAPI "/prefix/{path}" and "/prefix/{id}" are
//     one path (a document may not hold both), so when one-segment routes
//     under the prefix are served too ("GET /templates/{templateID}"),
//     the subtree shares their path item, under their wildcard's name:
//     paths["/templates/{templateID}"] has the template's GET and DELETE,
//     its other six operations are the subtree's, and it is marked;
//   - "/{$}", the root exactly, is paths["/"];
//   - "/", the catch-all, is not a route: it is the 404 of every path
//     nothing else serves, which the document's description states.
//
// A path item is marked "x-hutch-subtree" exactly when a subtree pattern
// is documented at it.
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
	subtrees := map[string]string{} // path item -> the subtree pattern documented at it
	for _, pattern := range s.patterns {
		if pattern == "/" {
			continue
		}
		path, methods, subtree, ok := documentedAt(pattern)
		if !ok {
			t.Errorf("pattern %q: no rule maps it to the OpenAPI document (see this test)", pattern)
			continue
		}
		path, ok = doc.itemPath(path, subtree)
		if !ok {
			t.Errorf("the router serves %q, but api/openapi/openapi.json has no path %q", pattern, path)
			continue
		}
		if subtree {
			subtrees[path] = pattern
		}
		item := doc.Paths[path]
		for _, m := range methods {
			if _, ok := item[m]; !ok {
				t.Errorf("the router serves %q, but api/openapi/openapi.json has no %s %s", pattern, strings.ToUpper(m), path)
			}
		}
	}
	for path, item := range doc.Paths {
		if marked := item[subtreeMark] == true; marked != (subtrees[path] != "") {
			if marked {
				t.Errorf("path %q: %s, but no subtree pattern of the router is documented at it", path, subtreeMark)
			} else {
				t.Errorf("path %q: the router's subtree %q is documented at it, but it is not marked %s", path, subtrees[path], subtreeMark)
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
			prefix, ok := subtreePrefix(path)
			if !ok {
				t.Errorf("path %q: %s, but not \"/prefix/{name}\"", path, subtreeMark)
				continue
			}
			urls = append(urls, wildcard.ReplaceAllString(prefix, "x1")+"x1/x2/x3")
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
				at, _, subtree, _ := documentedAt(pattern)
				if at, _ = doc.itemPath(at, subtree); at != path {
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
		{"GET /{$}", "/", []string{"get"}, false, true},
		{"GET /a/{$}", "", nil, false, false},
		{"example.com/", "", nil, false, false},
	}
	for _, tc := range tests {
		path, methods, subtree, ok := documentedAt(tc.pattern)
		if path != tc.path || !slices.Equal(methods, tc.methods) || subtree != tc.subtree || ok != tc.ok {
			t.Errorf("%q: got %q %v %v %v, want %q %v %v %v", tc.pattern, path, methods, subtree, ok, tc.path, tc.methods, tc.subtree, tc.ok)
		}
	}

	// A subtree's path item is "/prefix/{path}", or the one-segment
	// routes' item under the same prefix, whatever its wildcard's name.
	doc := document{Paths: map[string]map[string]any{
		"/secrets/{path}": {}, "/templates/{templateID}": {}, "/templates/{templateID}/tags": {}, "/templates/tags": {},
	}}
	items := []struct {
		path    string
		subtree bool
		item    string
		ok      bool
	}{
		{"/secrets/{path}", true, "/secrets/{path}", true},
		{"/templates/{path}", true, "/templates/{templateID}", true},
		{"/templates/{path}", false, "/templates/{path}", false},
		{"/templates/{templateID}", false, "/templates/{templateID}", true},
		{"/volumes/{path}", true, "/volumes/{path}", false},
	}
	for _, tc := range items {
		if item, ok := doc.itemPath(tc.path, tc.subtree); item != tc.item || ok != tc.ok {
			t.Errorf("itemPath(%q, %v) = %q %v, want %q %v", tc.path, tc.subtree, item, ok, tc.item, tc.ok)
		}
	}
	for path, want := range map[string]string{"/secrets/{path}": "/secrets/", "/templates/{templateID}": "/templates/", "/templates/tags": "", "/a/{b}c": "", "/a/{b{c}}": "", "/{x}": "/"} {
		if got, ok := subtreePrefix(path); got != want || ok != (want != "") {
			t.Errorf("subtreePrefix(%q) = %q %v, want %q", path, got, ok, want)
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
