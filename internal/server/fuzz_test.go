package server

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/osbapi"
	"github.com/hutch-sandbox/hutch/internal/sandbox"
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

// FuzzOSBCreate: any body of OpenSandbox's POST /v1/sandboxes decodes or
// is refused in its error shape with a 4xx, and what passes is within
// the bounds the manager is told: a timeout in range, resources parsed,
// env names a process can have.
func FuzzOSBCreate(f *testing.F) {
	for _, s := range []string{
		`{"image":{"uri":"base"},"timeout":600,"resourceLimits":{"cpu":"1","memory":"2Gi"},"entrypoint":["tail","-f","/dev/null"]}`,
		`{"snapshotId":"snap","timeout":null,"env":{"A":"1"},"metadata":{"k":"v"}}`,
		`{"image":{"uri":"python:3.12","auth":{"username":"u","password":"p"}},"networkPolicy":{"defaultAction":"deny","egress":[{"action":"allow","target":"pypi.org"}]}}`,
		`{"image":{"uri":"base"},"resourceLimits":{"cpu":"500m","memory":"1.5Gi","gpu":"0"},"platform":{"os":"linux","arch":"amd64"}}`,
		`{"image":{"uri":"base"},"timeout":59}`,
		`{"image":`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, _ := http.NewRequest(http.MethodPost, "/v1/sandboxes", bytes.NewReader(body))
		var req osbapi.CreateSandboxRequest
		err := osbapi.DecodeJSON(r, &req, osbMaxBody, false)
		var cr sandbox.CreateRequest
		if err == nil {
			cr, err = osbCreateRequest(&req)
		}
		if err != nil {
			if se := osbapi.Of(err); se.Status != 400 && se.Status != 413 || !strings.Contains(se.Code, "::") {
				t.Fatalf("refused with %d %q (%v), want a 400 or 413 in OpenSandbox's shape", se.Status, se.Code, err)
			}
			return
		}
		if cr.Timeout < osbapi.MinTimeout*time.Second || cr.Timeout > osbapi.MaxTimeout*time.Second ||
			cr.Resources.CPUMillis < 0 || cr.Resources.MemoryMB < 0 || !cr.Secure {
			t.Fatalf("passed out of bounds: %+v", cr)
		}
		for k := range cr.Envs {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				t.Fatalf("passed env name %q", k)
			}
		}
	})
}
