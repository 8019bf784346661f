package openapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pb33f/jsonschema/v6"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/schema_validation"
)

// methods are the operations a path item may have.
var methods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// decoded is the document as plain JSON values.
func decoded(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal([]byte(JSON), &doc); err != nil {
		t.Fatalf("openapi.json is not JSON: %v", err)
	}
	return doc
}

// TestValidOpenAPI31: the document is OpenAPI 3.1, valid against the
// specification's own JSON Schema (pb33f's validator embeds it), and
// libopenapi builds a model of it, every reference resolved.
func TestValidOpenAPI31(t *testing.T) {
	doc, err := libopenapi.NewDocument([]byte(JSON))
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", v)
	}
	if ok, errs := schema_validation.ValidateOpenAPIDocument(doc); !ok {
		for _, e := range errs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  at %s (%s): %s", f.FieldPath, f.KeywordLocation, f.Reason)
			}
		}
	}
	if _, err := doc.BuildV3Model(); err != nil {
		t.Errorf("building the model: %v", err)
	}
	if _, errs := validator.NewValidator(doc); len(errs) > 0 {
		t.Errorf("making a validator: %v", errs)
	}
}

// TestSchemasAreJSONSchema: the OpenAPI meta-schema does not look inside
// Schema Objects (3.1's are JSON Schema 2020-12), so each is compiled
// here, which checks it against the 2020-12 meta-schema and resolves its
// references.
func TestSchemasAreJSONSchema(t *testing.T) {
	raw, err := jsonschema.UnmarshalJSON(strings.NewReader(JSON))
	if err != nil {
		t.Fatal(err)
	}
	const url = "https://hutch.invalid/openapi.json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(url, raw); err != nil {
		t.Fatal(err)
	}
	var ptrs []string
	walk(raw.(map[string]any), "", func(ptr, key string, v any) bool {
		if key == "schema" || strings.HasPrefix(ptr, "/components/schemas/") && strings.Count(ptr, "/") == 3 {
			ptrs = append(ptrs, ptr)
			return false
		}
		return true
	})
	if len(ptrs) < 20 {
		t.Fatalf("found only %d schemas: %v", len(ptrs), ptrs)
	}
	for _, p := range ptrs {
		if _, err := c.Compile(url + "#" + p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestReferencesResolve: every $ref is local and names something.
func TestReferencesResolve(t *testing.T) {
	doc := decoded(t)
	n := 0
	walk(doc, "", func(ptr, key string, v any) bool {
		if key != "$ref" {
			return true
		}
		n++
		ref, _ := v.(string)
		if _, ok := resolve(doc, ref); !ok {
			t.Errorf("%s: %q names nothing", ptr, ref)
		}
		return false
	})
	if n == 0 {
		t.Fatal("no references at all")
	}
}

// TestOperations checks what the OpenAPI schema cannot: operationIds are
// unique, every path template's parameters are declared, and every error
// answer (4xx, 5xx, default) is one of Hutch's error bodies (errorBodies),
// its example's code what that body's code is. The one exception is a
// default marked x-hutch-passthrough: the answer of a sandbox's own
// service, which the proxy passes on as it comes.
func TestOperations(t *testing.T) {
	doc := decoded(t)
	paths := doc["paths"].(map[string]any)
	ids := map[string]string{}
	param := regexp.MustCompile(`\{([^}]+)\}`)
	for path, v := range paths {
		item := v.(map[string]any)
		for _, m := range methods {
			o, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			where := strings.ToUpper(m) + " " + path
			id, _ := o["operationId"].(string)
			if id == "" {
				t.Errorf("%s: no operationId", where)
			} else if other, dup := ids[id]; dup {
				t.Errorf("%s: operationId %q is also %s's", where, id, other)
			}
			ids[id] = where

			declared := map[string]bool{}
			for _, list := range []any{item["parameters"], o["parameters"]} {
				ps, _ := list.([]any)
				for _, p := range ps {
					p = deref(t, doc, p)
					pm := p.(map[string]any)
					if pm["in"] == "path" {
						declared[pm["name"].(string)] = true
					}
				}
			}
			for _, sub := range param.FindAllStringSubmatch(path, -1) {
				if !declared[sub[1]] {
					t.Errorf("%s: path parameter %q is not declared", where, sub[1])
				}
			}

			responses, _ := o["responses"].(map[string]any)
			if len(responses) == 0 {
				t.Errorf("%s: no responses", where)
			}
			for code, r := range responses {
				status, _ := strconv.Atoi(code)
				if code != "default" && status < 400 {
					continue
				}
				rm := deref(t, doc, r).(map[string]any)
				if rm["x-hutch-passthrough"] == true {
					if code != "default" {
						t.Errorf("%s: answer %s is marked x-hutch-passthrough, which only a default may be", where, code)
					}
					continue
				}
				content, _ := rm["content"].(map[string]any)
				media, _ := content["application/json"].(map[string]any)
				schema, _ := media["schema"].(map[string]any)
				ref, _ := schema["$ref"].(string)
				codeOK, known := errorBodies[ref]
				if len(content) != 1 || !known {
					t.Errorf("%s: answer %s is not only application/json in one of %v", where, code, slices.Sorted(maps.Keys(errorBodies)))
					continue
				}
				if ex, ok := media["example"].(map[string]any); ok && code != "default" && !codeOK(ex["code"], code) {
					t.Errorf("%s: answer %s's example has code %v, which %s's code is not", where, code, ex["code"], ref)
				}
			}
		}
	}
}

// errorBodies are the error bodies Hutch answers with, and what each one's
// code is in an answer of a status: E2B's {code, message} (the status
// itself, which the JS SDK reads), the edge router's for a sandbox it
// cannot reach (the status too), and OpenSandbox's {code, message} of
// the /v1 operations (a name, "<SCOPE>::<WHAT>").
var errorBodies = map[string]func(code any, status string) bool{
	"#/components/schemas/Error":            statusCode,
	"#/components/schemas/EdgeError":        statusCode,
	"#/components/schemas/OpenSandboxError": func(code any, _ string) bool { s, _ := code.(string); return osbCode.MatchString(s) },
}

// statusCode reports whether code, a JSON number, is status.
func statusCode(code any, status string) bool { return fmt.Sprint(code) == status }

// osbCode is the form of OpenSandbox's error codes.
var osbCode = regexp.MustCompile(`^[A-Z]+::[A-Z][A-Z_]*$`)

// walk calls f on each member of the JSON tree under v, depth first, with
// its JSON pointer and key; f returns whether to go into the value.
func walk(v any, ptr string, f func(ptr, key string, v any) bool) {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := ptr + "/" + strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
			if f(p, k, v[k]) {
				walk(v[k], p, f)
			}
		}
	case []any:
		for i, e := range v {
			p := ptr + "/" + strconv.Itoa(i)
			if f(p, "", e) {
				walk(e, p, f)
			}
		}
	}
}

// resolve finds a local reference ("#/a/b") in doc.
func resolve(doc map[string]any, ref string) (any, bool) {
	ptr, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, false
	}
	var cur any = doc
	for _, tok := range strings.Split(ptr, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// deref follows v's $ref, if it has one.
func deref(t *testing.T, doc map[string]any, v any) any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	ref, ok := m["$ref"].(string)
	if !ok {
		return v
	}
	r, ok := resolve(doc, ref)
	if !ok {
		t.Fatalf("%q names nothing", ref)
	}
	return r
}
