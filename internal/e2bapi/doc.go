// Package e2bapi is the wire layer of Hutch's E2B-compatible control-plane
// REST API (shared/specs/e2b-protocol.md §2): the request and response
// bodies, the JSON error envelope, the list-query syntax and the API-key
// headers that the official E2B SDKs speak, so that they talk to
// `hutch serve` unchanged.
//
// The package holds no handlers, no storage and no runtime. It only turns
// bytes into Go values and back, and every function here is safe for
// concurrent use. Handlers decode with [DecodeJSON], validate with the
// requests' Normalize/Validate methods, parse listings with
// [ParseListQuery], and answer failures with [Write], which maps
// [*StatusError] and the internal/errdefs classes to the E2B error body
// {"code": <HTTP status>, "message": ...}.
//
// Field names, JSON casing (including the one snake_case field,
// allow_internet_access) and required-ness follow the spec exactly; do not
// "tidy" them.
package e2bapi
