package server

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/hutch-sandbox/hutch/api/gen/process"
)

func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// TestEnvelopeWatcher feeds a Connect stream through the watcher in chunks
// of every size, with a message too large to decode in the middle: the
// bytes pass unchanged, the small messages are seen whole and in order.
func TestEnvelopeWatcher(t *testing.T) {
	start, _ := proto.Marshal(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: 42}}}})
	big, _ := proto.Marshal(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: bytes.Repeat([]byte("x"), maxAuditMessage+10)}}}}})
	end, _ := proto.Marshal(&process.StartResponse{Event: &process.ProcessEvent{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: 3, Exited: true}}}})
	stream := bytes.Join([][]byte{envelope(0, start), envelope(0, big), envelope(0, end), envelope(2, []byte("{}"))}, nil)
	for _, chunk := range []int{1, 3, 5, 7, 4096, 1 << 20, len(stream)} {
		var seen []string
		w := &envelopeWatcher{ReadCloser: io.NopCloser(&chunked{b: stream, n: chunk}), onMessage: func(flags byte, msg []byte) {
			if flags&2 != 0 {
				seen = append(seen, "eos")
				return
			}
			var m process.StartResponse
			if err := proto.Unmarshal(msg, &m); err != nil {
				t.Fatalf("chunk %d: a message cut: %v", chunk, err)
			}
			switch {
			case m.GetEvent().GetStart() != nil:
				seen = append(seen, "start")
			case m.GetEvent().GetEnd() != nil:
				seen = append(seen, "end")
			default:
				seen = append(seen, "other")
			}
		}}
		out, err := io.ReadAll(w)
		if err != nil || !bytes.Equal(out, stream) {
			t.Fatalf("chunk %d: the stream changed passing through (err %v)", chunk, err)
		}
		if got := join(seen); got != "start end eos" {
			t.Errorf("chunk %d: saw %q, want the start, the end and the end of stream, the oversized message skipped", chunk, got)
		}
	}
}

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}

func join(s []string) string {
	var b bytes.Buffer
	for i, x := range s {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(x)
	}
	return b.String()
}

func TestDecodeRequest(t *testing.T) {
	cwd := "/tmp"
	req := &process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "echo hi"}, Cwd: &cwd}}
	pb, _ := proto.Marshal(req)
	js, _ := protojson.Marshal(req)
	for _, tc := range []struct {
		ct   string
		body []byte
		ok   bool
	}{
		{"application/connect+proto", envelope(0, pb), true},
		{"application/connect+json", envelope(0, js), true},
		{"application/proto", pb, true},
		{"application/json; charset=utf-8", js, true},
		{"application/connect+proto", envelope(0, pb)[:8], false},
		{"application/grpc", envelope(0, pb), false},
	} {
		h := http.Header{"Content-Type": {tc.ct}}
		var got process.StartRequest
		ok := decodeRequest(h, tc.body, &got) == nil
		if ok != tc.ok || (ok && (got.GetProcess().GetCmd() != "/bin/bash" || got.GetProcess().GetCwd() != "/tmp")) {
			t.Errorf("%s: ok %v, %v; want ok %v", tc.ct, ok, &got, tc.ok)
		}
	}
}

func TestCommandLineQuoting(t *testing.T) {
	line, found := commandLine("/bin/bash", []string{"-l", "-c", `GATEWAY_ACCESS_TOKEN=abc mcp-gateway --config '{"exa":{"apiKey":"exa-9999"}}'`}, nil)
	want := `/bin/bash -l -c 'GATEWAY_ACCESS_TOKEN=[redacted] mcp-gateway --config '\''{"exa":{"apiKey":"[redacted]"}}'\'''`
	if line != want || len(found) != 1 || found[0] != "exa-9999" {
		t.Errorf("commandLine = %s (found %q)\nwant %s", line, found, want)
	}
}

// TestGatewayCalls: the tool calls of a request to a gateway, read as the
// gateway's MCP SDK reads them (keys matched exactly), batches capped.
func TestGatewayCalls(t *testing.T) {
	tee := func(body string) *teeBody {
		return &teeBody{keep: true, eof: true, buf: []byte(body), n: int64(len(body)), length: -1, max: maxAuditBody}
	}
	batch := "["
	for i := 0; i < 20; i++ {
		if i > 0 {
			batch += ","
		}
		batch += `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}`
	}
	batch += "]"
	for _, tc := range []struct {
		name, body string
		want       []string // tool per event
	}{
		{"one", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory__read_graph","arguments":{"token":"x"}}}`, []string{"memory__read_graph"}},
		{"not a call", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil},
		{"METHOD is not method", `{"method":"tools/call","METHOD":"notifications/x","params":{"name":"a"}}`, []string{"a"}},
		{"NAME is not name", `{"method":"tools/call","params":{"name":"memory__delete_entities","NAME":"memory__read_graph"}}`, []string{"memory__delete_entities"}},
		{"a call and junk after it (the SDK reads the first value)", `{"method":"tools/call","params":{"name":"hidden"}} x`, []string{"hidden"}},
		{"two values", `{"method":"tools/call","params":{"name":"first"}}{}`, []string{"first"}},
		{"a batch and junk", `[{"method":"tools/call","params":{"name":"b"}}] junk`, []string{"b"}},
		{"a batch of 20", batch, []string{"echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo", "echo"}},
	} {
		got := gatewayCalls(tee(tc.body), nil)
		var tools []string
		for _, d := range got {
			tools = append(tools, d["tool"].(string))
		}
		if fmt.Sprint(tools) != fmt.Sprint(tc.want) {
			t.Errorf("%s: tools %v, want %v", tc.name, tools, tc.want)
		}
		if tc.name == "a batch of 20" && got[15]["batchCalls"] != 20 {
			t.Errorf("a batch of 20: the last event says %v calls, want 20", got[15]["batchCalls"])
		}
		if tc.name == "one" && fmt.Sprint(got[0]["arguments"]) != "map[token:[redacted]]" {
			t.Errorf("arguments %v, want the token redacted", got[0]["arguments"])
		}
	}
	if got := gatewayCalls(&teeBody{keep: true, over: true, n: 2 << 20, length: -1}, nil); len(got) != 1 || got[0]["unparsed"] != true {
		t.Errorf("a call not kept whole: %v, want one unparsed event", got)
	}
	if got := gatewayCalls(tee(`not json`), nil); len(got) != 1 || got[0]["unparsed"] != true {
		t.Errorf("a body that is no JSON: %v, want one unparsed event", got)
	}
}

// TestDecodeWhole: what the edge decodes is what envd decodes, or the
// call is refused: a body of two messages, a compressed message past
// 1 MiB (a prefix of it could name another command: protobuf merges a
// field that comes twice).
func TestDecodeWhole(t *testing.T) {
	pb, _ := proto.Marshal(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/usr/bin/true"}})
	two := append(envelope(0, pb), envelope(0, pb)...)
	if err := decodeRequest(http.Header{"Content-Type": {"application/connect+proto"}}, two, &process.StartRequest{}); err == nil {
		t.Error("two messages decoded")
	}
	evil, _ := proto.Marshal(&process.StartRequest{Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "evil"}}})
	pad := protowire.AppendTag(nil, 15, protowire.BytesType)
	pad = protowire.AppendBytes(pad, bytes.Repeat([]byte{0}, maxAuditBody))
	msg := append(append(append([]byte{}, pb...), pad...), evil...)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(msg)
	zw.Close()
	h := http.Header{"Content-Type": {"application/connect+proto"}, "Connect-Content-Encoding": {"gzip"}}
	var got process.StartRequest
	if err := decodeRequest(h, envelope(1, z.Bytes()), &got); !errors.Is(err, errTooLargeDecompressed) {
		t.Errorf("a 4 MiB+ compressed message: %v (decoded %v), want errTooLargeDecompressed", err, &got)
	}
}
