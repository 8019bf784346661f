package server

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// The edge's input surfaces that are functions of bytes a client sends:
// envd's Connect messages and envelopes as the audit trail reads them, a
// gateway's JSON-RPC, a signed /files URL. Seeds are added here; the
// fuzzer's finds go to testdata/fuzz (scripts/fuzz.sh, docs/security.md).

// FuzzDecodeRequest: any body with any Connect content type decodes or
// fails, never panics, and what decodes is one whole message.
func FuzzDecodeRequest(f *testing.F) {
	for _, ct := range []string{"application/connect+proto", "application/connect+json", "application/proto", "application/json"} {
		f.Add(ct, "", startRequest(f, "/bin/bash", "-c", "echo hi"))
	}
	f.Add("application/connect+proto", "gzip", []byte{1, 0, 0, 0, 3, 'a', 'b', 'c'})
	f.Add("application/connect+json", "", []byte("\x00\x00\x00\x00\x10{\"process\":{}}"))
	f.Fuzz(func(t *testing.T, ct, enc string, body []byte) {
		h := http.Header{"Content-Type": {ct}, "Connect-Content-Encoding": {enc}, "Content-Encoding": {enc}}
		var m process.StartRequest
		decodeRequest(h, body, &m)
	})
}

// FuzzEnvelopeWatcher: a stream passes through the watcher byte for byte,
// however it is framed and cut, and every message handed on is within its
// bounds.
func FuzzEnvelopeWatcher(f *testing.F) {
	f.Add(append(envelope(0, []byte("hello")), envelope(2, []byte("{}"))...), uint8(3))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 1, 2, 3}, uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		w := &envelopeWatcher{ReadCloser: io.NopCloser(&chunked{b: stream, n: int(chunk) + 1}), onMessage: func(flags byte, msg []byte) {
			if len(msg) > maxAuditMessage {
				t.Fatalf("a message of %d bytes handed on", len(msg))
			}
		}}
		out, err := io.ReadAll(w)
		if err != nil || !bytes.Equal(out, stream) {
			t.Fatalf("the stream changed passing through (err %v)", err)
		}
	})
}

// FuzzGatewayCalls: any request to a gateway yields at most
// maxToolEvents events, never a panic.
func FuzzGatewayCalls(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"token":"x"}}}`))
	f.Add([]byte(`[{"method":"tools/call"},{"method":"tools/call","params":7}]`))
	f.Add([]byte(`{"method":"tools/call","params":{"name":5,"arguments":"x"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		tee := &teeBody{keep: true, eof: true, buf: body, n: int64(len(body)), length: -1, max: maxAuditBody}
		if got := gatewayCalls(tee, []string{"secret-value"}); len(got) > maxToolEvents {
			t.Fatalf("%d events from one request", len(got))
		}
	})
}

// FuzzFileSignature: any query of a /files URL is refused or checked
// against a token without a panic, and only a URL signed with the token
// passes.
func FuzzFileSignature(f *testing.F) {
	const token = "tok-0123456789"
	good := url.Values{"path": {"/home/user/a"}, "username": {"user"}, "signature": {envdapi.Sign("/home/user/a", envdapi.OpRead, "user", token, 0)}}
	f.Add("GET", good.Encode())
	f.Add("POST", "path=x&signature=v1_abc&signature_expiration=notanumber")
	f.Fuzz(func(t *testing.T, method, raw string) {
		q, _ := url.ParseQuery(raw)
		sf, ok := fileSignature(method, q)
		if !ok {
			return
		}
		if sf.by(token) && q.Get("signature") != envdapi.SignExpiration(q.Get("path"), opOf(method), q.Get("username"), token, q.Get("signature_expiration")) {
			t.Fatalf("a signature the token did not make passes: %q", raw)
		}
	})
}

func opOf(method string) string {
	if method == http.MethodPost {
		return envdapi.OpWrite
	}
	return envdapi.OpRead
}

// startRequest is process.Process/Start's request for cmd, in Connect's
// streaming envelope, for seeds.
func startRequest(tb testing.TB, cmd string, args ...string) []byte {
	b, err := proto.Marshal(&process.StartRequest{Process: &process.ProcessConfig{Cmd: cmd, Args: args}})
	if err != nil {
		tb.Fatal(err)
	}
	return envelope(0, b)
}
