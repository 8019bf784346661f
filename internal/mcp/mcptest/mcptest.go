// Package mcptest checks the answers of an MCP streamable-HTTP endpoint to
// arbitrary request bodies, for the fuzz targets of Hutch's two MCP
// servers (`hutch mcp`'s platform tools and the in-sandbox gateway): the
// property both must keep is the same, so it is written once.
package mcptest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// callTimeout bounds one request: a tool call the input makes (a command
// in a sandbox, an upstream server's tool) is cancelled after it, as a
// client that gives up cancels it. CheckPost makes two requests, and Go's
// fuzzer takes an input that runs for 10 s for a hang (the worker panics).
const callTimeout = 4 * time.Second

// message is a JSON-RPC message as a client reads it.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    *int64  `json:"code"`
		Message *string `json:"message"`
	} `json:"error"`
}

// CheckPost posts body to the MCP endpoint h serves at path, as a client
// does (JSON, accepting JSON and event streams, with header added), and
// checks the answer: no 5xx and no panic; whatever the body holds is
// JSON-RPC 2.0, a response with a result or an error with a code and a
// message, or a server's request or notification on an event stream; a
// request with an id (a call) answered with a 2xx gets its response, with
// its id. Then it checks that the endpoint still serves: a tools/list gets
// its tools. It returns the status of the answer to body.
func CheckPost(t testing.TB, h http.Handler, path string, header http.Header, body []byte) int {
	t.Helper()
	status, msgs := post(t, h, path, header, body)
	if status >= 500 {
		t.Fatalf("POST %q: status %d, answer %s", body, status, show(msgs))
	}
	if status < 300 {
		if m, err := jsonrpc.DecodeMessage(body); err == nil {
			if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
				id, _ := json.Marshal(req.ID.Raw())
				if !answered(msgs, id) {
					t.Fatalf("POST %q: status %d with no response to id %s: %s", body, status, id, show(msgs))
				}
			}
		}
	}
	after, msgs := post(t, h, path, header, []byte(`{"jsonrpc":"2.0","id":"after","method":"tools/list"}`))
	if after != http.StatusOK || !answered(msgs, []byte(`"after"`)) || msgs[len(msgs)-1].Error != nil || !bytes.Contains(msgs[len(msgs)-1].Result, []byte(`"name"`)) {
		t.Fatalf("after POST %q the endpoint no longer lists its tools: status %d, %s", body, after, show(msgs))
	}
	return status
}

// answered reports whether msgs hold a response with id (compared as
// JSON values: "\u0026" is "&").
func answered(msgs []message, id []byte) bool {
	for _, m := range msgs {
		if m.Method == "" && canon(m.ID) == canon(id) {
			return true
		}
	}
	return false
}

// canon is a JSON value in one spelling.
func canon(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return "invalid " + string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func show(msgs []message) string {
	b, _ := json.Marshal(msgs)
	return string(b)
}

// post sends one request and returns its status and the JSON-RPC messages
// of its body, failing t if the body is not JSON-RPC.
func post(t testing.TB, h http.Handler, path string, header http.Header, body []byte) (int, []message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	out := w.Body.Bytes()
	if len(bytes.TrimSpace(out)) == 0 {
		return res.StatusCode, nil
	}
	var raws [][]byte
	switch ct := res.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/json"):
		var batch []json.RawMessage
		if json.Unmarshal(out, &batch) == nil {
			for _, m := range batch {
				raws = append(raws, m)
			}
		} else {
			raws = append(raws, out)
		}
	case strings.HasPrefix(ct, "text/event-stream"):
		sc := bufio.NewScanner(bytes.NewReader(out))
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				raws = append(raws, []byte(strings.TrimSpace(d)))
			}
		}
	default:
		t.Fatalf("POST %q: status %d, Content-Type %q, body %q", body, res.StatusCode, ct, out)
	}
	var msgs []message
	for _, raw := range raws {
		var m message
		if err := json.Unmarshal(raw, &m); err != nil || m.JSONRPC != "2.0" {
			t.Fatalf("POST %q: status %d, a message that is not JSON-RPC 2.0 (%v): %s", body, res.StatusCode, err, raw)
		}
		isResponse := m.Method == ""
		if isResponse && (m.Result == nil) == (m.Error == nil) {
			t.Fatalf("POST %q: status %d, a response with neither or both of result and error: %s", body, res.StatusCode, raw)
		}
		if m.Error != nil && (m.Error.Code == nil || m.Error.Message == nil) {
			t.Fatalf("POST %q: status %d, an error without a code or a message: %s", body, res.StatusCode, raw)
		}
		msgs = append(msgs, m)
	}
	return res.StatusCode, msgs
}
