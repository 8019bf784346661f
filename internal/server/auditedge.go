package server

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// The edge's part of the audit trail: what clients ask of a sandbox's envd
// (commands started, and how they ended; files written, moved, deleted)
// and of its MCP gateway (tool calls), read from the requests and answers
// as they pass, attributed to the key that owns the sandbox. The edge is
// where this is seen and trusted: a sandbox's own processes could tell
// the host anything.
//
// Reading Connect's envelopes by hand (5-byte header, then the message) is
// what connect-go does inside its handlers; it has no reader for a stream
// that passes through a proxy.

// mcpGatewayPort is the port of E2B's MCP gateway in a sandbox
// (internal/mcp/gateway.Port).
const mcpGatewayPort = 50005

// maxAuditBody is the most of a request body the edge reads before
// forwarding it; a larger one is forwarded and recorded unread.
const maxAuditBody = 256 << 10

// auditBodyBudget bounds the bytes of request bodies held for the audit
// trail at once, across all requests: without it, anyone could make the
// host hold maxAuditBody for each of thousands of connections (the edge
// reads before envd checks its token). A request that finds the budget
// spent is forwarded unread and recorded as such.
const auditBodyBudget = 64 << 20

// maxAuditMessage is the largest message of a stream the edge decodes;
// larger ones (a command's output) are skipped unread.
const maxAuditMessage = 1 << 20

// edgeAudit is what the edge records of one request: modify sees the
// answer's head, failed is called when no answer came, release gives back
// what the request holds of the body budget once it is answered.
type edgeAudit struct {
	modify  func(*http.Response) error
	failed  func()
	release func()
}

// done gives back the body budget the request held.
func (ea *edgeAudit) done() {
	if ea != nil && ea.release != nil {
		ea.release()
	}
}

// auditEdge returns what to record of r, sent to port of sandbox id; nil
// when nothing is recorded. The caller calls done once r is answered.
func (s *Server) auditEdge(r *http.Request, id string, port int) *edgeAudit {
	if s.audit == nil || r.Method != http.MethodPost {
		return nil
	}
	var held int64
	ea := s.auditFor(r, id, port, &held)
	if held > 0 {
		if ea == nil {
			ea = &edgeAudit{}
		}
		ea.release = func() { s.auditBodies.Release(held) }
	}
	return ea
}

func (s *Server) auditFor(r *http.Request, id string, port int, held *int64) *edgeAudit {
	owner, _ := s.mgr.Owner(id)
	switch {
	case port == envdapi.Port:
		switch p := path.Clean("/" + r.URL.Path); p {
		case "/process.Process/Start":
			return s.auditStart(r, owner, id, held)
		case "/filesystem.Filesystem/Remove", "/filesystem.Filesystem/Move", "/filesystem.Filesystem/MakeDir":
			return s.auditFS(r, owner, id, p, held)
		case "/files":
			return s.auditUpload(r, owner, id)
		}
	case port == mcpGatewayPort:
		return s.auditTools(r, owner, id, held)
	}
	return nil
}

// peekBody reads r's body, up to maxAuditBody, and puts it back whole for
// the proxy; ok is false when it is larger, unreadable, or the budget is
// spent. What it takes of the budget is added to *held, for release once
// the request is answered.
func (s *Server) peekBody(r *http.Request, held *int64) (body []byte, ok bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	want := int64(maxAuditBody + 1)
	if r.ContentLength >= 0 && r.ContentLength < want {
		want = r.ContentLength
	}
	if r.ContentLength > maxAuditBody || !s.auditBodies.TryAcquire(want) {
		return nil, false
	}
	*held += want
	b, err := io.ReadAll(io.LimitReader(r.Body, want))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	if err != nil || int64(len(b)) > maxAuditBody || (r.ContentLength < 0 && int64(len(b)) == want) {
		return nil, false
	}
	return b, true
}

// envdUser is the user an envd request acts as: its Basic authorization's
// name, or the query's username (signed /files URLs).
func envdUser(r *http.Request) string {
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Basic "); ok {
		if b, err := base64.StdEncoding.DecodeString(v); err == nil {
			name, _, _ := strings.Cut(string(b), ":")
			return name
		}
	}
	if u := r.URL.Query().Get("username"); u != "" {
		return u
	}
	return "(default)"
}

// connectCodec is how a Connect request's or answer's messages are
// encoded.
type connectCodec struct {
	json, stream bool
	gzip         bool // messages (stream) or the body (unary) compressed
}

func codecOf(h http.Header) (connectCodec, bool) {
	ct, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	var c connectCodec
	switch ct {
	case "application/connect+proto":
		c.stream = true
	case "application/connect+json":
		c.stream, c.json = true, true
	case "application/proto":
	case "application/json":
		c.json = true
	default:
		return c, false
	}
	enc := h.Get("Content-Encoding")
	if c.stream {
		enc = h.Get("Connect-Content-Encoding")
	}
	switch enc {
	case "", "identity":
	case "gzip":
		c.gzip = true
	default:
		return c, false
	}
	return c, true
}

// unmarshal decodes one message.
func (c connectCodec) unmarshal(b []byte, compressed bool, m proto.Message) error {
	if compressed {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if b, err = io.ReadAll(io.LimitReader(zr, maxAuditMessage)); err != nil {
			return err
		}
	}
	if c.json {
		return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
	}
	return proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}

// decodeRequest decodes the one message of a unary or server-streaming
// request body.
func decodeRequest(h http.Header, body []byte, m proto.Message) bool {
	c, ok := codecOf(h)
	if !ok {
		return false
	}
	if !c.stream {
		return c.unmarshal(body, c.gzip, m) == nil
	}
	if len(body) < 5 {
		return false
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(len(body)-5) < uint64(n) {
		return false
	}
	return c.unmarshal(body[5:5+n], body[0]&1 != 0 && c.gzip, m) == nil
}

// auditStart records a command: command.start once envd says it started
// (or failed to), command.end with its exit when the stream carries it.
func (s *Server) auditStart(r *http.Request, owner, id string, held *int64) *edgeAudit {
	body, ok := s.peekBody(r, held)
	var req process.StartRequest
	detail := map[string]any{"user": envdUser(r)}
	secrets := s.gatewaySecrets.get(id)
	var line string
	if ok && decodeRequest(r.Header, body, &req) {
		cfg := req.GetProcess()
		var found []string
		line, found = commandLine(cfg.GetCmd(), cfg.GetArgs(), secrets)
		if len(found) > 0 {
			// A gateway's configuration: its values are its servers'
			// secrets, to be kept out of what its tools are asked.
			s.gatewaySecrets.add(id, found)
			secrets = append(secrets, found...)
		}
		detail["cmd"] = line
		if cfg.Cwd != nil {
			detail["cwd"] = cfg.GetCwd()
		}
		if env := audit.Env(cfg.GetEnvs(), secrets); len(env) > 0 {
			detail["envs"] = env
		}
		if req.Pty != nil {
			detail["pty"] = true
		}
		if req.Tag != nil {
			detail["tag"] = req.GetTag()
		}
	} else {
		detail["unparsed"] = true
	}
	var (
		once    sync.Once
		started time.Time
		pid     uint32
	)
	start := func(outcome, errText string) {
		once.Do(func() {
			started = time.Now()
			if errText != "" {
				detail["error"] = errText
			}
			if pid != 0 {
				detail["pid"] = pid
			}
			s.audit.Record(audit.Event{KeyID: owner, SandboxID: id, Kind: audit.KindCommand, Action: "command.start", Outcome: outcome, Detail: detail})
		})
	}
	end := func(e *process.ProcessEvent_EndEvent) {
		start(audit.OK, "")
		d := map[string]any{"cmd": line, "pid": pid, "exitCode": e.GetExitCode(), "exited": e.GetExited(),
			"status": e.GetStatus(), "durationMs": time.Since(started).Milliseconds()}
		outcome := audit.OK
		if e.Error != nil {
			d["error"] = e.GetError()
		}
		if !e.GetExited() || e.GetExitCode() != 0 {
			outcome = audit.Error
		}
		s.audit.Record(audit.Event{KeyID: owner, SandboxID: id, Kind: audit.KindCommand, Action: "command.end", Outcome: outcome, Detail: d})
	}
	return &edgeAudit{
		failed: func() { start(audit.Error, "the sandbox did not answer") },
		modify: func(resp *http.Response) error {
			c, ok := codecOf(resp.Header)
			if resp.StatusCode != http.StatusOK || !ok || !c.stream {
				start(audit.Error, "envd answered "+resp.Status)
				return nil
			}
			resp.Body = &envelopeWatcher{ReadCloser: resp.Body, onMessage: func(flags byte, msg []byte) {
				if flags&2 != 0 {
					// The end of the stream: an error, if it failed.
					var eos struct {
						Error *struct {
							Code    string `json:"code"`
							Message string `json:"message"`
						} `json:"error"`
					}
					if json.Unmarshal(msg, &eos) == nil && eos.Error != nil {
						start(audit.Error, eos.Error.Code+": "+eos.Error.Message)
					}
					return
				}
				var m process.StartResponse
				if c.unmarshal(msg, flags&1 != 0 && c.gzip, &m) != nil {
					return
				}
				switch ev := m.GetEvent(); {
				case ev.GetStart() != nil:
					pid = ev.GetStart().GetPid()
					start(audit.OK, "")
				case ev.GetEnd() != nil:
					end(ev.GetEnd())
				}
			}}
			return nil
		},
	}
}

// commandLine is a process's command line as a shell would read it, its
// secrets redacted one argument at a time (a `bash -c` script is one), and
// the gateway secrets it carried.
func commandLine(cmd string, args []string, secrets []string) (string, []string) {
	var (
		b     strings.Builder
		found []string
	)
	for i, a := range append([]string{cmd}, args...) {
		red, f := audit.CommandLine(a, secrets)
		found = append(found, f...)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shellQuote(red))
	}
	return b.String(), found
}

// shellQuote quotes a for a POSIX shell when it needs it.
func shellQuote(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// auditFS records a file removed, moved or made through envd's filesystem
// service.
func (s *Server) auditFS(r *http.Request, owner, id, rpc string, held *int64) *edgeAudit {
	body, ok := s.peekBody(r, held)
	detail := map[string]any{"user": envdUser(r)}
	var action string
	switch rpc {
	case "/filesystem.Filesystem/Remove":
		action = "file.delete"
		var m filesystem.RemoveRequest
		if ok && decodeRequest(r.Header, body, &m) {
			detail["path"] = m.GetPath()
		}
	case "/filesystem.Filesystem/Move":
		action = "file.move"
		var m filesystem.MoveRequest
		if ok && decodeRequest(r.Header, body, &m) {
			detail["path"], detail["destination"] = m.GetSource(), m.GetDestination()
		}
	default:
		action = "file.mkdir"
		var m filesystem.MakeDirRequest
		if ok && decodeRequest(r.Header, body, &m) {
			detail["path"] = m.GetPath()
		}
	}
	if _, known := detail["path"]; !known {
		detail["unparsed"] = true
	}
	return s.recordOnAnswer(owner, id, audit.KindFile, action, detail, nil)
}

// auditUpload records files written through envd's /files: the paths its
// answer lists.
func (s *Server) auditUpload(r *http.Request, owner, id string) *edgeAudit {
	detail := map[string]any{"user": envdUser(r)}
	if p := r.URL.Query().Get("path"); p != "" {
		detail["path"] = p
	}
	return s.recordOnAnswer(owner, id, audit.KindFile, "file.write", detail, func(resp *http.Response) {
		if resp.StatusCode != http.StatusOK {
			return
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		var written []struct {
			Path string `json:"path"`
		}
		if err != nil || json.Unmarshal(b, &written) != nil {
			return
		}
		var paths []string
		for _, w := range written {
			paths = append(paths, w.Path)
		}
		if len(paths) > 0 {
			detail["paths"] = paths
		}
	})
}

// auditTools records the MCP tool calls a request to a sandbox's gateway
// carries (one JSON-RPC message or a batch).
func (s *Server) auditTools(r *http.Request, owner, id string, held *int64) *edgeAudit {
	body, ok := s.peekBody(r, held)
	if !ok || len(body) == 0 {
		return nil
	}
	type call struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string `json:"name"`
			Arguments any    `json:"arguments"`
		} `json:"params"`
	}
	var calls []call
	if body = bytes.TrimSpace(body); len(body) > 0 && body[0] == '[' {
		json.Unmarshal(body, &calls)
	} else {
		var c call
		if json.Unmarshal(body, &c) == nil {
			calls = []call{c}
		}
	}
	secrets := s.gatewaySecrets.get(id)
	var tools []map[string]any
	for _, c := range calls {
		if c.Method != "tools/call" {
			continue
		}
		d := map[string]any{"tool": c.Params.Name, "via": "gateway"}
		if c.Params.Arguments != nil {
			d["arguments"] = audit.JSON(c.Params.Arguments, secrets)
		}
		tools = append(tools, d)
	}
	if len(tools) == 0 {
		return nil
	}
	record := func(outcome string, status int) {
		for _, d := range tools {
			if status != 0 {
				d["status"] = status
			}
			s.audit.Record(audit.Event{KeyID: owner, SandboxID: id, Kind: audit.KindMCP, Action: "tool.call", Outcome: outcome, Detail: d})
		}
	}
	return &edgeAudit{
		failed: func() { record(audit.Error, 0) },
		modify: func(resp *http.Response) error {
			outcome := audit.OK
			if resp.StatusCode >= 400 {
				outcome = audit.Error
			}
			record(outcome, resp.StatusCode)
			return nil
		},
	}
}

// recordOnAnswer records one event when the answer's head comes (after
// look, which may add to detail), or as failed when none does.
func (s *Server) recordOnAnswer(owner, id, kind, action string, detail map[string]any, look func(*http.Response)) *edgeAudit {
	return &edgeAudit{
		failed: func() {
			s.audit.Record(audit.Event{KeyID: owner, SandboxID: id, Kind: kind, Action: action, Outcome: audit.Error, Detail: detail})
		},
		modify: func(resp *http.Response) error {
			if look != nil {
				look(resp)
			}
			detail["status"] = resp.StatusCode
			outcome := audit.OK
			if resp.StatusCode >= 400 {
				outcome = audit.Error
			}
			s.audit.Record(audit.Event{KeyID: owner, SandboxID: id, Kind: kind, Action: action, Outcome: outcome, Detail: detail})
			return nil
		},
	}
}

// envelopeWatcher passes a Connect stream through unchanged and hands each
// of its messages (up to maxAuditMessage; larger ones are skipped) to
// onMessage as they go by.
type envelopeWatcher struct {
	io.ReadCloser
	onMessage func(flags byte, msg []byte)
	buf       []byte
	skip      uint64 // bytes of an oversized message still to pass
}

func (w *envelopeWatcher) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	w.feed(p[:n])
	return n, err
}

func (w *envelopeWatcher) feed(b []byte) {
	if w.skip > 0 {
		k := min(w.skip, uint64(len(b)))
		w.skip -= k
		b = b[k:]
	}
	w.buf = append(w.buf, b...)
	for len(w.buf) >= 5 {
		n := uint64(binary.BigEndian.Uint32(w.buf[1:5]))
		if n > maxAuditMessage {
			have := uint64(len(w.buf) - 5)
			if have >= n {
				w.buf = w.buf[5+n:]
				continue
			}
			w.skip = n - have
			w.buf = w.buf[:0]
			return
		}
		if uint64(len(w.buf)-5) < n {
			return
		}
		w.onMessage(w.buf[0], w.buf[5:5+n])
		w.buf = w.buf[5+n:]
	}
	if len(w.buf) == 0 {
		w.buf = nil
	}
}

// secretBook keeps, per sandbox, the values of its MCP gateway's
// configuration, seen when the gateway was started, so that its tool
// calls' arguments are redacted of them too. Bounded; it forgets the
// least recently added sandbox first.
type secretBook struct {
	mu    sync.Mutex
	by    map[string][]string
	order []string
}

// maxSecretBook is the most sandboxes a secretBook remembers.
const maxSecretBook = 4096

func newSecretBook() *secretBook { return &secretBook{by: map[string][]string{}} }

func (b *secretBook) add(id string, secrets []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.by[id]; !ok {
		b.order = append(b.order, id)
		if len(b.order) > maxSecretBook {
			delete(b.by, b.order[0])
			b.order = b.order[1:]
		}
	}
	b.by[id] = append(b.by[id], secrets...)
}

func (b *secretBook) get(id string) []string {
	if id == "" {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.by[id]...)
}
