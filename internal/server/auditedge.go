package server

import (
	"bytes"
	"compress/gzip"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
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

// codeInterpreterPort is where E2B's code-interpreter SDKs send code (to
// the code-interpreter-v1 template's server), and codeInterpreterUser the
// user whose listener it must be, or root's.
const (
	codeInterpreterPort = 49999
	codeInterpreterUser = "user"
)

// maxAuditBody is the most of a request body the edge reads before
// forwarding it. A larger call to envd's process or filesystem service is
// refused (413): it would run unrecorded. A larger MCP call is forwarded
// and recorded unread.
const maxAuditBody = 4 << 20

// The bytes of request bodies held at once to read them for the trail:
// in all, and for the sandboxes of one key. Bodies are read only from
// requests that carry the sandbox's envd token (or, for a gateway, its
// bearer token when known), so only a sandbox's owner spends its key's
// share; when a key's share or the whole is spent, envd calls are refused
// (429, to retry) rather than run unrecorded (review of issue 22: holding
// the budget with slow bodies hid everyone's commands).
const (
	auditBodyBudget = 64 << 20
	auditKeyBudget  = 16 << 20
)

// gatewayBodyBudget and gatewayKeyBudget bound the MCP gateway calls kept
// at once to record them, in all and for the sandboxes of one key. Anyone
// may send those (the gateway checks its token only as it answers), so
// this budget is apart from envd's: spending it makes calls be recorded
// unread, and refuses nobody; the share per key keeps one tenant's slow
// calls from doing that to the others' (review of issue 22, round 3).
const (
	gatewayBodyBudget = 32 << 20
	gatewayKeyBudget  = 8 << 20
)

// maxAuditMessage is the largest message of a stream the edge decodes;
// larger ones (a command's output) are skipped unread.
const maxAuditMessage = 1 << 20

// edgeAudit is what the edge does for the trail with one request: refuse
// it (refusal), or forward it and record it — modify sees the answer's
// head, failed is called when no answer came — and release what it holds
// of the body budget once it is answered (done).
type edgeAudit struct {
	refusal *envdRefusal
	modify  func(*http.Response) error
	failed  func()
	release func()
}

// envdRefusal is the edge's own answer to an envd call it will not
// forward: a Connect error.
type envdRefusal struct {
	status        int
	code, message string
	retryAfter    bool
}

func (e *envdRefusal) write(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	if e.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(map[string]string{"code": e.code, "message": e.message})
}

// done gives back the body budget the request held.
func (ea *edgeAudit) done() {
	if ea != nil && ea.release != nil {
		ea.release()
	}
}

// bodyBudget bounds the request bodies held for the trail, in all and per
// key.
type bodyBudget struct {
	all    *semaphore.Weighted
	perKey int64
	mu     sync.Mutex
	byKey  map[string]int64
}

func newBodyBudget(all, perKey int64) *bodyBudget {
	return &bodyBudget{all: semaphore.NewWeighted(all), perKey: perKey, byKey: map[string]int64{}}
}

// take reserves n bytes for key, false when its share or the whole is
// spent.
func (b *bodyBudget) take(key string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byKey[key]+n > b.perKey || !b.all.TryAcquire(n) {
		return false
	}
	b.byKey[key] += n
	return true
}

func (b *bodyBudget) give(key string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all.Release(n)
	if b.byKey[key] -= n; b.byKey[key] <= 0 {
		delete(b.byKey, key)
	}
}

// auditEdge returns what to do for the trail with r, sent to port of
// sandbox id; nil when nothing is recorded. Requests that do not prove
// themselves to the sandbox (envd's token, a signed URL, the gateway's
// bearer token) are not recorded: the sandbox refuses them, and anyone
// could send them. The caller writes the refusal, if any, or forwards r
// and calls done once it is answered.
func (s *Server) auditEdge(r *http.Request, id string, port int) *edgeAudit {
	if s.audit == nil || r.Method != http.MethodPost {
		return nil
	}
	owner, envdToken, ok := s.mgr.Principal(id)
	if !ok {
		return nil
	}
	a := &edgeAuditor{s: s, r: r, owner: owner, id: id}
	var ea *edgeAudit
	switch {
	case port == envdapi.Port:
		if envdToken != "" && !validEnvdToken(r, envdToken) && !signedURL(r, envdToken, time.Now()) {
			return nil
		}
		switch p := path.Clean("/" + r.URL.Path); p {
		case "/process.Process/Start":
			ea = a.start()
		case "/filesystem.Filesystem/Remove", "/filesystem.Filesystem/Move", "/filesystem.Filesystem/MakeDir":
			ea = a.fs(p)
		case "/files":
			ea = a.upload()
		}
	case port == mcpGatewayPort:
		ea = a.tools()
	}
	if a.held > 0 {
		if ea == nil {
			ea = &edgeAudit{}
		}
		held := a.held
		ea.release = func() { s.auditBodies.give(owner, held) }
	}
	return ea
}

// validEnvdToken reports whether r carries envd's access token.
func validEnvdToken(r *http.Request, token string) bool {
	got := r.Header.Get(envdapi.HeaderAccessToken)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// edgeAuditor reads one request for the trail.
type edgeAuditor struct {
	s         *Server
	r         *http.Request
	owner, id string
	held      int64 // bytes of the body budget taken
}

// peek results.
const (
	peeked = iota
	tooLarge
	noBudget
	unreadable
)

// peek reads the request's body, up to maxAuditBody, and puts it back
// whole for the proxy.
func (a *edgeAuditor) peek() ([]byte, int) {
	r := a.r
	if r.Body == nil || r.Body == http.NoBody {
		return nil, peeked
	}
	if r.ContentLength > maxAuditBody {
		return nil, tooLarge
	}
	want := int64(maxAuditBody + 1)
	if r.ContentLength >= 0 {
		want = r.ContentLength
	}
	if !a.s.auditBodies.take(a.owner, want) {
		return nil, noBudget
	}
	a.held += want
	b, err := io.ReadAll(io.LimitReader(r.Body, want))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
	switch {
	case err != nil:
		return nil, unreadable
	case int64(len(b)) > maxAuditBody:
		return nil, tooLarge
	}
	return b, peeked
}

// refuseUnread is the refusal of an envd call whose body the edge could
// not read (peek's result), or nil.
func refuseUnread(result int) *envdRefusal {
	switch result {
	case tooLarge:
		return &envdRefusal{status: http.StatusRequestEntityTooLarge, code: "resource_exhausted",
			message: fmt.Sprintf("the request is larger than %d bytes: the edge reads each process and filesystem call for the audit trail", maxAuditBody)}
	case noBudget:
		return &envdRefusal{status: http.StatusTooManyRequests, code: "resource_exhausted", retryAfter: true,
			message: "too many large process and filesystem calls at once for this key: retry"}
	case unreadable:
		return &envdRefusal{status: http.StatusBadRequest, code: "invalid_argument", message: "the request body could not be read"}
	}
	return nil
}

// refuseProtocol refuses an envd call in a protocol the edge does not
// read: gRPC, gRPC-Web, or an unknown encoding would run unrecorded.
func refuseProtocol() *edgeAudit {
	return &edgeAudit{refusal: &envdRefusal{status: http.StatusUnsupportedMediaType, code: "unimplemented",
		message: "envd's process and filesystem calls go through hutch serve in the Connect protocol only (what E2B's SDKs speak), proto or JSON, uncompressed or gzip: the edge reads each one for the audit trail"}}
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

// errTooLargeDecompressed is a compressed message larger than
// maxAuditBody once decompressed.
var errTooLargeDecompressed = fmt.Errorf("larger than %d bytes decompressed", maxAuditBody)

// unmarshal decodes one message. A compressed one is decompressed whole
// or not at all: decoding a prefix of what envd decodes in full would
// record another message than the one that runs (protobuf merges a field
// that comes twice; review of issue 22).
func (c connectCodec) unmarshal(b []byte, compressed bool, m proto.Message) error {
	if compressed {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if b, err = io.ReadAll(io.LimitReader(zr, maxAuditBody+1)); err != nil {
			return err
		}
		if len(b) > maxAuditBody {
			return errTooLargeDecompressed
		}
	}
	if c.json {
		return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
	}
	return proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, m)
}

// decodeRequest decodes the one message of a unary or server-streaming
// request body, which must be that message and nothing more.
func decodeRequest(h http.Header, body []byte, m proto.Message) error {
	c, ok := codecOf(h)
	if !ok {
		return errors.New("not the Connect protocol")
	}
	if !c.stream {
		return c.unmarshal(body, c.gzip, m)
	}
	if len(body) < 5 {
		return errors.New("no message")
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(len(body)-5) != uint64(n) {
		return errors.New("not exactly one message")
	}
	return c.unmarshal(body[5:], body[0]&1 != 0 && c.gzip, m)
}

// refuseUndecodable refuses a call whose message the edge could not
// decode (decodeRequest's err): envd would run something unrecorded, or
// nothing.
func refuseUndecodable(err error, name string) *edgeAudit {
	if errors.Is(err, errTooLargeDecompressed) {
		return &edgeAudit{refusal: refuseUnread(tooLarge)}
	}
	return &edgeAudit{refusal: &envdRefusal{status: http.StatusBadRequest, code: "invalid_argument", message: "the request is not one " + name + " message: " + err.Error()}}
}

// start records a command: command.start once envd says it started (or
// failed to), command.end with its exit when the stream carries it.
func (a *edgeAuditor) start() *edgeAudit {
	s, r, owner, id := a.s, a.r, a.owner, a.id
	c, ok := codecOf(r.Header)
	if !ok || !c.stream {
		return refuseProtocol()
	}
	body, result := a.peek()
	if ref := refuseUnread(result); ref != nil {
		return &edgeAudit{refusal: ref}
	}
	var req process.StartRequest
	if err := decodeRequest(r.Header, body, &req); err != nil {
		return refuseUndecodable(err, "StartRequest")
	}
	detail := map[string]any{"user": envdUser(r)}
	secrets := s.gatewaySecrets.get(id)
	cfg := req.GetProcess()
	line, found := commandLine(cfg.GetCmd(), cfg.GetArgs(), secrets)
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
	var (
		once sync.Once
		pid  uint32
	)
	// A command's duration counts from its request: envd's start and end
	// events of a short one often come in one read.
	started := time.Now()
	start := func(outcome, errText string) {
		once.Do(func() {
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
			rc, ok := codecOf(resp.Header)
			if resp.StatusCode != http.StatusOK || !ok || !rc.stream {
				start(audit.Error, "envd answered "+resp.Status)
				return nil
			}
			resp.Body = &envelopeWatcher{ReadCloser: resp.Body,
				onEnd: func() { start(audit.Error, "the stream ended before the process started") },
				onMessage: func(flags byte, msg []byte) {
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
					if rc.unmarshal(msg, flags&1 != 0 && rc.gzip, &m) != nil {
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

// fs records a file removed, moved or made through envd's filesystem
// service.
func (a *edgeAuditor) fs(rpc string) *edgeAudit {
	r := a.r
	if _, ok := codecOf(r.Header); !ok {
		return refuseProtocol()
	}
	body, result := a.peek()
	if ref := refuseUnread(result); ref != nil {
		return &edgeAudit{refusal: ref}
	}
	detail := map[string]any{"user": envdUser(r)}
	var (
		action string
		m      proto.Message
	)
	switch rpc {
	case "/filesystem.Filesystem/Remove":
		action, m = "file.delete", &filesystem.RemoveRequest{}
	case "/filesystem.Filesystem/Move":
		action, m = "file.move", &filesystem.MoveRequest{}
	default:
		action, m = "file.mkdir", &filesystem.MakeDirRequest{}
	}
	if err := decodeRequest(r.Header, body, m); err != nil {
		return refuseUndecodable(err, string(m.ProtoReflect().Descriptor().Name()))
	}
	switch m := m.(type) {
	case *filesystem.RemoveRequest:
		detail["path"] = m.GetPath()
	case *filesystem.MoveRequest:
		detail["path"], detail["destination"] = m.GetSource(), m.GetDestination()
	case *filesystem.MakeDirRequest:
		detail["path"] = m.GetPath()
	}
	return a.recordOnAnswer(audit.KindFile, action, detail, nil)
}

// upload records files written through envd's /files: the paths its
// answer lists.
func (a *edgeAuditor) upload() *edgeAudit {
	r := a.r
	detail := map[string]any{"user": envdUser(r)}
	if p := r.URL.Query().Get("path"); p != "" {
		detail["path"] = p
	}
	return a.recordOnAnswer(audit.KindFile, "file.write", detail, func(resp *http.Response) {
		if resp.StatusCode != http.StatusOK {
			return
		}
		// envd's answer lists what it wrote: a multipart upload of many
		// files makes a long one.
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxAuditBody))
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

// tools records the MCP tool calls a request to a sandbox's gateway
// carries (one JSON-RPC message or a batch). The request is not read
// ahead: its bytes are kept as the gateway reads them (up to
// maxAuditBody, while the gateways' budget lasts), and recorded once the
// gateway has answered — only if it accepted the call, so that nobody
// without its token writes to the trail (review of issue 22). A call the
// edge could not keep whole is recorded as unread.
func (a *edgeAuditor) tools() *edgeAudit {
	s, r, owner, id := a.s, a.r, a.owner, a.id
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	want := int64(maxAuditBody)
	if r.ContentLength >= 0 && r.ContentLength < want {
		want = r.ContentLength
	}
	tee := &teeBody{ReadCloser: r.Body, max: maxAuditBody, length: r.ContentLength}
	release := func() {}
	if r.ContentLength <= maxAuditBody && s.gatewayBodies.take(owner, want) {
		tee.keep = true // before the proxy reads: no lock needed yet
		release = func() { s.gatewayBodies.give(owner, want) }
	}
	r.Body = tee
	record := func(outcome string, status int) {
		if status == http.StatusUnauthorized || status == http.StatusForbidden {
			return // the gateway refused it: nothing happened
		}
		for _, d := range gatewayCalls(tee, s.gatewaySecrets.get(id)) {
			if status != 0 {
				d["status"] = status
			}
			s.audit.Record(audit.Event{KeyID: owner, SandboxID: id, Kind: audit.KindMCP, Action: "tool.call", Outcome: outcome, Detail: d})
		}
	}
	return &edgeAudit{
		release: release,
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

// maxToolEvents is the most tool calls one request records; a batch with
// more records that many and says how many it held.
const maxToolEvents = 16

// gatewayCalls reads the tool calls of a request to a gateway from what
// tee kept: one event detail each. Keys are matched exactly, as the MCP
// SDK the gateway is built on matches them (encoding/json's
// case-insensitive match would read "METHOD" as "method": review of
// issue 22).
func gatewayCalls(tee *teeBody, secrets []string) []map[string]any {
	kept, n, whole := tee.kept()
	unparsed := []map[string]any{{"via": "gateway", "unparsed": true, "bytes": n}}
	if !whole {
		return unparsed
	}
	// The first JSON value, and nothing after it read, as the MCP SDK's
	// decoder reads a message: a call followed by junk runs there, and
	// must be recorded here (review of issue 22, round 3).
	body := bytes.TrimSpace(kept)
	dec := json.NewDecoder(bytes.NewReader(body))
	var msgs []json.RawMessage
	if len(body) > 0 && body[0] == '[' {
		if dec.Decode(&msgs) != nil {
			return unparsed
		}
	} else {
		var one json.RawMessage
		if dec.Decode(&one) != nil {
			return unparsed
		}
		msgs = []json.RawMessage{one}
	}
	var out []map[string]any
	calls := 0
	for _, raw := range msgs {
		var msg map[string]json.RawMessage
		var method string
		if json.Unmarshal(raw, &msg) != nil || json.Unmarshal(msg["method"], &method) != nil || method != "tools/call" {
			continue
		}
		calls++
		if len(out) == maxToolEvents {
			continue
		}
		var params map[string]json.RawMessage
		json.Unmarshal(msg["params"], &params)
		var name string
		json.Unmarshal(params["name"], &name)
		d := map[string]any{"tool": name, "via": "gateway"}
		var args any
		if json.Unmarshal(params["arguments"], &args) == nil && args != nil {
			d["arguments"] = audit.JSON(args, secrets)
		}
		out = append(out, d)
	}
	if calls > len(out) && len(out) > 0 {
		out[len(out)-1]["batchCalls"] = calls
	}
	return out
}

// teeBody keeps what is read through it, up to max bytes, when keep.
// The proxy's transport reads it while the answer may already be read:
// a mutex guards what it kept.
type teeBody struct {
	io.ReadCloser
	max    int
	length int64 // the request's Content-Length, -1 unknown

	mu         sync.Mutex
	keep, over bool
	eof        bool
	buf        []byte
	n          int64
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n += int64(n)
	if t.keep && !t.over {
		if len(t.buf)+n > t.max {
			t.over, t.buf = true, nil
		} else {
			t.buf = append(t.buf, p[:n]...)
		}
	}
	if err == io.EOF {
		t.eof = true
	}
	return n, err
}

// kept is the whole body, false when it was not kept whole (yet).
func (t *teeBody) kept() ([]byte, int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	whole := t.keep && !t.over && (t.eof || t.length >= 0 && t.n == t.length)
	return t.buf, t.n, whole
}

// recordOnAnswer records one event when the answer's head comes (after
// look, which may add to detail), or as failed when none does.
func (a *edgeAuditor) recordOnAnswer(kind, action string, detail map[string]any, look func(*http.Response)) *edgeAudit {
	s, owner, id := a.s, a.owner, a.id
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
// onMessage as they go by, and calls onEnd when the stream ends or is
// closed.
type envelopeWatcher struct {
	io.ReadCloser
	onMessage func(flags byte, msg []byte)
	onEnd     func()
	ended     sync.Once
	buf       []byte
	skip      uint64 // bytes of an oversized message still to pass
}

func (w *envelopeWatcher) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	w.feed(p[:n])
	if err != nil {
		w.end()
	}
	return n, err
}

// Close ends the stream.
func (w *envelopeWatcher) Close() error {
	w.end()
	return w.ReadCloser.Close()
}

func (w *envelopeWatcher) end() {
	if w.onEnd != nil {
		w.ended.Do(w.onEnd)
	}
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
// calls' arguments are redacted of them too. Bounded: each sandbox keeps
// its first maxSandboxSecrets distinct values of up to maxSecretLen bytes
// (a tenant's --config strings must not grow the server, nor slow every
// redaction: review of issue 22), and the book forgets the least recently
// added sandbox first.
type secretBook struct {
	mu    sync.Mutex
	by    map[string][]string
	order []string
}

const (
	// maxSecretBook is the most sandboxes a secretBook remembers.
	maxSecretBook = 4096
	// maxSandboxSecrets and maxSecretLen bound what one sandbox keeps.
	maxSandboxSecrets = 64
	maxSecretLen      = 1 << 10
)

func newSecretBook() *secretBook { return &secretBook{by: map[string][]string{}} }

func (b *secretBook) add(id string, secrets []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	have, ok := b.by[id]
	if !ok {
		b.order = append(b.order, id)
		if len(b.order) > maxSecretBook {
			delete(b.by, b.order[0])
			b.order = b.order[1:]
		}
	}
	for _, v := range secrets {
		if len(have) == maxSandboxSecrets {
			break
		}
		if len(v) <= maxSecretLen && !slices.Contains(have, v) {
			have = append(have, v)
		}
	}
	b.by[id] = have
}

func (b *secretBook) get(id string) []string {
	if id == "" {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.by[id]...)
}
