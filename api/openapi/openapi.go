// Package openapi holds the OpenAPI 3.1 document of Hutch's REST API, the
// control plane `hutch serve` answers at its listener: E2B's paths and
// JSON as Hutch serves them, and Hutch's own. `hutch serve` serves it at
// GET /openapi.json; users point their tools at that, and the hardening
// work fuzzes against it.
//
// It lives beside api/'s other wire contracts (envd's .proto files), not
// in the server, because it is a contract, written by hand in
// openapi.json, not generated from the handlers: what a client may rely
// on is decided here, and the server is held to it by tests. Those in
// internal/server fail when the router serves a route the document lacks
// or the document names one the router does not serve; this package's
// tests check that the document is valid OpenAPI 3.1.
package openapi

import _ "embed"

// JSON is the document, as served (a string: the server hands out the
// same bytes to every request, and nothing may change them).
//
//go:embed openapi.json
var JSON string
