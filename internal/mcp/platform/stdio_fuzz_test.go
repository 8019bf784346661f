package platform

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/server/servertest"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/sdk"
)

// stdioWait bounds one session: a tool call an input makes runs at most
// this long before the session is closed under it. An input may take two
// sessions, and Go's fuzzer takes an input that runs for 10 s for a hang
// (the worker panics).
const stdioWait = 3 * time.Second

// stdioInit opens a session as a client does.
var stdioInit = []string{
	`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
}

// stdioSession runs one session of srv over newline-delimited JSON, as
// `hutch mcp` serves its stdio: stdioInit, then the lines of input, then
// a ping with id "after". It reads the server's responses until every id
// of want and "after" is answered, the server ends the session, or
// stdioWait passes, and returns them, by id, as JSON.
func stdioSession(t *testing.T, srv *mcp.Server, input []byte, want map[string]bool) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stdioWait)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ss, err := srv.Connect(ctx, &mcp.IOTransport{Reader: inR, Writer: outW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	var b bytes.Buffer
	for _, l := range stdioInit {
		b.WriteString(l + "\n")
	}
	b.Write(input)
	b.WriteString("\n" + `{"jsonrpc":"2.0","id":"after","method":"ping"}` + "\n")
	go func() {
		inW.Write(b.Bytes()) // fails once the server has closed its side
		// The MCP SDK reads a stream of JSON values, not lines: after a
		// value left open it waits for the rest, as it should. The client
		// then hangs up, as a client would.
		if unfinished(b.Bytes()) {
			inW.Close()
		}
	}()
	// The session ends at stdioWait: the reader below then sees EOF.
	go func() {
		<-ctx.Done()
		ss.Close()
		outW.Close()
	}()
	responses := map[string]string{}
	sc := bufio.NewScanner(outR)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		// A line is a message or, answering a batch, an array of them.
		var msgs []json.RawMessage
		if json.Unmarshal(sc.Bytes(), &msgs) != nil {
			msgs = []json.RawMessage{sc.Bytes()}
		}
		for _, raw := range msgs {
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("the server wrote a line that is not JSON-RPC (%v): %q", err, sc.Bytes())
			}
			if m.Method == "" && m.ID != nil {
				responses[canonID(m.ID)] = string(raw)
			}
		}
		if responses[`"after"`] != "" && answeredAll(responses, want) {
			break
		}
	}
	return responses
}

// unfinished reports whether stream ends inside a JSON value, with no
// syntax error before.
func unfinished(stream []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(stream))
	for {
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return errors.Is(err, io.ErrUnexpectedEOF)
		}
	}
}

// canonID is a JSON-RPC id in one spelling ("\u0026" is "&").
func canonID(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func answeredAll(responses map[string]string, want map[string]bool) bool {
	for id := range want {
		if _, ok := responses[id]; !ok {
			return false
		}
	}
	return true
}

// FuzzPlatformStdio: `hutch mcp`'s stdio transport, the one MCP clients
// start it with, fed arbitrary bytes after a client's initialize: the
// server never panics; when the session lives on to answer the ping that
// follows the input, each line of the input that is a JSON-RPC call got
// its response; and when the input made the server end the session (the
// MCP SDK ends a session on a line it cannot read), a new session on the
// same server works. The control plane, the kept sandbox ("SBX") and the
// seeds are FuzzPlatformRPC's.
func FuzzPlatformStdio(f *testing.F) {
	for _, s := range platformSeeds() {
		f.Add([]byte(s))
	}
	f.Add([]byte("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}"))
	f.Add([]byte("not json\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"))
	cp := servertest.StartWith(f, 1, servertest.Options{MaxPerKey: 3, Templates: testenv.PrivateTemplates(f)})
	kept := newKeptSandbox(f, cp)
	srv := NewServer(Options{Client: func(context.Context, *mcp.CallToolRequest) (*sdk.Client, error) { return kept.c, nil }})
	f.Fuzz(func(t *testing.T, input []byte) {
		input = kept.use(t, input)
		defer kept.check(t, input)
		// The calls in the input, by id; true for a tools/call, which may
		// rightly run longer than the session waits (a command's timeout).
		want := map[string]bool{}
		for _, line := range bytes.Split(input, []byte("\n")) {
			if m, err := jsonrpc.DecodeMessage(line); err == nil {
				if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
					id, _ := json.Marshal(req.ID.Raw())
					want[canonID(id)] = req.Method == "tools/call"
				}
			}
		}
		responses := stdioSession(t, srv, input, want)
		if _, alive := responses[`"after"`]; !alive {
			if again := stdioSession(t, srv, nil, nil); again[`"after"`] == "" {
				t.Fatalf("after the input %q ended a session, a new session is not answered", input)
			}
			return
		}
		for id, toolCall := range want {
			if _, ok := responses[id]; !ok && !toolCall {
				t.Fatalf("the call with id %s in %q got no response within %v (responses: %v)", id, input, stdioWait, responses)
			}
		}
	})
}
