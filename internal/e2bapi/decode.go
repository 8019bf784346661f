package e2bapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
)

// DefaultMaxBodyBytes is the body limit [DecodeJSON] applies when given a
// limit ≤ 0. Create bodies are a few KiB at most; 1 MiB leaves room for
// large envVars.
const DefaultMaxBodyBytes int64 = 1 << 20

// DecodeJSON reads r's body, at most maxBytes of it (≤ 0 means
// [DefaultMaxBodyBytes]), and decodes it into v, which must be a pointer to
// one of this package's request types (or any struct).
//
// The body must be exactly one JSON object, optionally surrounded by
// whitespace; it may arrive with Content-Length or chunked. Content-Type is
// not checked (the SDKs send application/json, curl users often don't).
//
// Unknown fields are ignored, never rejected: the SDKs send fields Hutch
// does not model or has not heard of yet (iam, volumeMounts, whatever the
// next SDK adds), and rejecting them would break unchanged clients. Known
// fields with the wrong JSON type are rejected. Note that encoding/json
// matches field names case-insensitively.
//
// Every error is a [*StatusError]: 413 when the body is (or declares
// itself, by Content-Length) larger than the limit, answered before any of
// it is read; a *StatusError the body's reader returned, as it is; 400 for an empty body, malformed JSON, a non-object, trailing data,
// or a wrong type (e.g. "timeout: expected an integer number of seconds, got
// string"). Errors returned by a type's UnmarshalJSON that are already a
// *StatusError pass through unchanged. DecodeJSON does not validate values;
// call the request's Normalize or Validate method.
func DecodeJSON(r *http.Request, v any, maxBytes int64) error {
	return decode(r, v, maxBytes, false)
}

// DecodeOptionalJSON is [DecodeJSON] for bodies the SDKs may leave out
// entirely (connect, pause, refresh, resume): an empty or absent body leaves
// v untouched and returns nil.
func DecodeOptionalJSON(r *http.Request, v any, maxBytes int64) error {
	return decode(r, v, maxBytes, true)
}

func decode(r *http.Request, v any, maxBytes int64, optional bool) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		if r.ContentLength > maxBytes {
			// Declared too large: refused before a byte is read.
			return TooLarge(maxBytes)
		}
		// A nil ResponseWriter is allowed: it only loses the hint that makes
		// net/http close the connection after the response.
		b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return TooLarge(maxBytes)
			}
			var se *StatusError
			if errors.As(err, &se) {
				return se // the body's own answer (too slow, say)
			}
			return BadRequest("could not read the request body")
		}
		body = b
	}
	return DecodeBytes(body, v, optional)
}

// DecodeBytes decodes a body already in memory with the rules of
// [DecodeJSON]; optional selects the behaviour of [DecodeOptionalJSON] for an
// empty body. It has no size limit of its own.
func DecodeBytes(body []byte, v any, optional bool) error {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		if optional {
			return nil
		}
		return BadRequest("request body is empty; expected a JSON object")
	}
	if trimmed[0] != '{' {
		return BadRequest("request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("malformed JSON: unexpected data after the object")
	}
	return nil
}

// jsonError turns an encoding/json error into a 400 that says what was wrong
// without Go type names.
func jsonError(err error) error {
	var se *StatusError
	if errors.As(err, &se) {
		return se
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return BadRequestf("malformed JSON at byte %d: %s", syntax.Offset, syntax.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return BadRequest("malformed JSON: the body ends inside the object")
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		field := typ.Field
		if field == "" {
			field = "body"
		}
		return BadRequestf("%s: expected %s, got %s", field, expectation(field, typ.Type), typ.Value)
	}
	return BadRequest("malformed JSON")
}

// expectation describes, for people, the JSON a Go type accepts.
func expectation(field string, t reflect.Type) string {
	switch field {
	case "timeout", "duration":
		return "an integer number of seconds"
	}
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "another type"
}
