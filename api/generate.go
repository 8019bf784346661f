// Package api holds the wire contracts of Hutch's in-sandbox daemon: the
// .proto files of E2B's envd services process.Process and
// filesystem.Filesystem (written from shared/specs/e2b-protocol.md §3), and
// under gen/ the Go code generated from them. Regenerate with
// `go generate ./api`; CI fails when the committed code is stale.
package api

//go:generate go tool buf generate
