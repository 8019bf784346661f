// Package httperr answers the HTTP-level failures of Hutch's MCP endpoints
// (the `hutch mcp` streamable HTTP server and the in-sandbox gateway): a
// request refused before any JSON-RPC method ran, for its size, its
// credentials, its Origin or its shape. Both endpoints answer every such
// failure in one shape, a JSON-RPC error object with a meaningful HTTP
// status, through [Write]; [Handler] also turns the plain-text refusals that
// the MCP SDK and net/http write for them into that shape.
//
// What the MCP clients read of such an answer is its status. The official
// TypeScript client starts its authorization flow on 401 and its step-up on
// a 403 with insufficient_scope, and fails the request on anything else
// non-2xx with the body's text in its message; a version-negotiation probe
// that gets a 4xx falls back to the legacy era unless the body's error
// code is -32022, which no answer here uses. The clients take the body for
// the request's own JSON-RPC answer only when it carries the request's id
// (the TypeScript client from SDK 2 on, for 400; the Go client for any
// status), which an answer to a request refused before it was read cannot
// have.
package httperr

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// CodeUnauthorized is the JSON-RPC error code of a 401: the request has no
// valid bearer token. JSON-RPC leaves -32000 to -32099 to implementations;
// the gateway has always answered 401 with it.
const CodeUnauthorized = -32001

// Code is the JSON-RPC error code for an HTTP-level failure with status:
// CodeUnauthorized for 401, jsonrpc.CodeInternalError (-32603) for 5xx,
// and jsonrpc.CodeInvalidRequest (-32600) for the other refusals, whose
// cause the status and message tell.
func Code(status int) int64 {
	switch {
	case status == http.StatusUnauthorized:
		return CodeUnauthorized
	case status >= 500:
		return jsonrpc.CodeInternalError
	default:
		return jsonrpc.CodeInvalidRequest
	}
}

// Write answers a request to an MCP endpoint that failed at the HTTP level
// with status and a JSON-RPC error response,
// {"jsonrpc":"2.0","error":{"code":Code(status),"message":msg}} and a
// newline, as application/json. The response has no id: the request was
// not read as JSON-RPC, and the TypeScript client's schema accepts an
// error response without one but not with "id": null. Headers already set (a
// WWW-Authenticate, say) are kept; Write must be called before anything
// else is written to w. A write error means the client has gone, so Write
// returns nothing.
func Write(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(errorResponse{JSONRPC: "2.0", Error: &jsonrpc.Error{Code: Code(status), Message: msg}})
}

// errorResponse is a JSON-RPC error response without an id.
type errorResponse struct {
	JSONRPC string         `json:"jsonrpc"`
	Error   *jsonrpc.Error `json:"error"`
}

// Handler returns h with every failure it answers in plain text (or with
// no Content-Type) rewritten by [Write]: the status is kept and the text
// becomes the message. Answers h writes as JSON (JSON-RPC errors of its
// own, results), successes and event streams pass through untouched.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &rewriter{ResponseWriter: w}
		h.ServeHTTP(rw, r)
		rw.finish()
	})
}

// maxMessage bounds the text of a held-back failure kept as the message.
const maxMessage = 1 << 10

// rewriter holds back a plain-text failure until the handler returns.
type rewriter struct {
	http.ResponseWriter
	status  int  // non-zero once a failure is held back
	written bool // the final status went through to the client
	msg     bytes.Buffer
}

func (w *rewriter) WriteHeader(code int) {
	switch {
	case w.status != 0 || w.written:
		return // superfluous, as net/http has it
	case code >= 400 && plain(w.Header().Get("Content-Type")):
		w.status = code
		return
	case code >= 200:
		w.written = true
	}
	w.ResponseWriter.WriteHeader(code)
}

// plain reports whether a Content-Type is one a JSON-RPC client cannot read.
func plain(ct string) bool {
	return ct == "" || strings.HasPrefix(ct, "text/plain")
}

func (w *rewriter) Write(p []byte) (int, error) {
	if w.status == 0 && !w.written {
		w.WriteHeader(http.StatusOK)
	}
	if w.status != 0 {
		if room := maxMessage - w.msg.Len(); room > 0 {
			w.msg.Write(p[:min(len(p), room)])
		}
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// ReadFrom keeps the client's io.ReaderFrom path for answers that pass.
func (w *rewriter) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok && w.written {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{w}, r)
}

// FlushError flushes what passed through; a held-back failure waits for
// finish. http.ResponseController and the MCP SDK's event streams use it.
func (w *rewriter) FlushError() error {
	if w.status != 0 {
		return nil
	}
	w.written = true // a flush sends the headers, 200 if none was set
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for callers that only know http.Flusher.
func (w *rewriter) Flush() { _ = w.FlushError() }

// Unwrap lets http.ResponseController reach the client's writer.
func (w *rewriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the held-back failure, if any.
func (w *rewriter) finish() {
	if w.status != 0 {
		msg := strings.TrimSpace(w.msg.String())
		if msg == "" {
			msg = http.StatusText(w.status)
		}
		Write(w.ResponseWriter, w.status, msg)
	}
}
