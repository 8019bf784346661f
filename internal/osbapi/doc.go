// Package osbapi is the wire layer of Hutch's OpenSandbox-compatible
// lifecycle API (OpenSandbox's specs/sandbox-lifecycle.yml, served under
// /v1): the request and response bodies, the error envelope
// {"code": "<STRING>", "message": ...}, and the parsing of OpenSandbox's
// resource quantities ("500m", "2Gi"), so that the OpenSandbox SDKs and
// opensandbox-mcp talk to `hutch serve` unchanged.
//
// Like internal/e2bapi, it holds no handlers and no state: it turns bytes
// into Go values and back. Field names and JSON casing follow
// OpenSandbox's spec exactly; they live here and nowhere else.
package osbapi
