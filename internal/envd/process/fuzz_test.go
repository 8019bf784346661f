package process

// Fuzz tests of the Connect path of the process service: raw request bodies
// (the envelope framing of the Start stream, the JSON of unary calls) go
// through the generated connect-go handler into the service, in process.
//
// These run on the host, as root, without a sandbox: a Start that got as
// far as exec would run a fuzzed command on the host. So the service's
// default user is one that does not exist, every request acts as it (no
// Authorization header ever reaches the service), and every RPC resolves
// its user before anything else: each Start fails with unauthenticated
// before a process could be made. The fuzzers also check after every input
// that the service knows no process and that this process has no child.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/envd/permissions"
)

// fuzzUser is the default user of the fuzzed service; it must not exist.
const fuzzUser = "fuzz-no-such-user"

// connectCodes maps each Connect error code to its HTTP status (Connect
// protocol; spec §3.2).
var connectCodes = map[string]int{
	"canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
	"not_found": 404, "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429,
	"failed_precondition": 400, "aborted": 409, "out_of_range": 400, "unimplemented": 501,
	"internal": 500, "unavailable": 503, "data_loss": 500, "unauthenticated": 401,
}

// fuzzService returns the process service's handler, to be called directly
// (a panic then reaches the fuzzer instead of net/http's recovery), and the
// service, whose process table the fuzzers check.
func fuzzService(f *testing.F) (http.Handler, *Service) {
	if _, err := permissions.Lookup(fuzzUser); err == nil {
		f.Fatalf("user %q exists on this host: the fuzzers rely on it not existing", fuzzUser)
	}
	mux := http.NewServeMux()
	svc := Handle(mux, config.New("0.6.4", fuzzUser), slog.New(slog.DiscardHandler))
	guard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Only the default user, which does not exist, may be asked for.
		r.Header.Del("Authorization")
		mux.ServeHTTP(w, r)
	})
	return guard, svc
}

// envelope frames payload as one Connect envelope.
func envelope(flags byte, payload []byte) []byte {
	b := make([]byte, 5, 5+len(payload))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// checkNothingStarted fails when the service has a process or this test
// process has a child: no fuzzed input may ever start one.
func checkNothingStarted(t *testing.T, svc *Service) {
	t.Helper()
	svc.mu.Lock()
	n := len(svc.procs)
	svc.mu.Unlock()
	if n != 0 {
		t.Fatalf("the service started %d processes", n)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, f := range tasks {
		if b, err := os.ReadFile(f); err == nil && len(bytes.TrimSpace(b)) > 0 {
			t.Fatalf("this process has children: %s", b)
		}
	}
}

// checkUnaryError asserts a Connect unary error: a non-200 status matching
// a known code string in a JSON body {"code": "...", "message": "..."}.
func checkUnaryError(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	body := rec.Body.Bytes()
	if rec.Code == http.StatusOK {
		t.Fatalf("status 200 (%s), want a Connect error", body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("status %d, Content-Type %q (%s), want a JSON Connect error", rec.Code, ct, body)
	}
	var e struct {
		Code    *string `json:"code"`
		Message string  `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Code == nil {
		t.Fatalf("status %d: error body %q is not a Connect error (%v)", rec.Code, body, err)
	}
	status, ok := connectCodes[*e.Code]
	if !ok {
		t.Fatalf("unknown Connect code %q in %s", *e.Code, body)
	}
	if status != rec.Code {
		t.Fatalf("code %q with HTTP status %d, want %d", *e.Code, rec.Code, status)
	}
}

// checkStream asserts a Connect server-stream reply: HTTP 200 with
// application/connect+json and well-formed envelopes ending in exactly one
// end-of-stream envelope, or a unary-style Connect error. Since no process
// can start, there must be no message before the end of the stream, and
// the end of the stream must carry an error.
func checkStream(t *testing.T, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code != http.StatusOK {
		checkUnaryError(t, rec)
		return
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/connect+json" {
		t.Fatalf("stream reply with Content-Type %q", ct)
	}
	b := rec.Body.Bytes()
	var frames int
	for {
		if len(b) < 5 {
			t.Fatalf("stream ended without an end-of-stream envelope (%d bytes left: %q)", len(b), b)
		}
		flags, n := b[0], binary.BigEndian.Uint32(b[1:5])
		if uint64(n) > uint64(len(b)-5) {
			t.Fatalf("envelope of %d bytes with %d left", n, len(b)-5)
		}
		payload := b[5 : 5+n]
		b = b[5+n:]
		frames++
		switch flags {
		case 0x00:
			t.Fatalf("message envelope %q: nothing can have started", payload)
		case 0x02:
		default:
			t.Fatalf("envelope flags %#x", flags)
		}
		if len(b) != 0 {
			t.Fatalf("%d bytes after the end-of-stream envelope", len(b))
		}
		var end struct {
			Error *struct {
				Code    *string `json:"code"`
				Message string  `json:"message"`
			} `json:"error"`
			Metadata map[string][]string `json:"metadata"`
		}
		if err := json.Unmarshal(payload, &end); err != nil {
			t.Fatalf("end-of-stream payload %q: %v", payload, err)
		}
		if end.Error == nil || end.Error.Code == nil {
			t.Fatalf("end-of-stream %q without an error: a Start as an unknown user must fail", payload)
		}
		if _, ok := connectCodes[*end.Error.Code]; !ok {
			t.Fatalf("unknown Connect code %q in %s", *end.Error.Code, payload)
		}
		return
	}
}

func FuzzStart(f *testing.F) {
	h, svc := fuzzService(f)
	msg := func(s string) []byte { return envelope(0, []byte(s)) }
	for _, seed := range [][]byte{
		msg(`{"process":{"cmd":"/bin/bash","args":["-l","-c","true"]},"stdin":false}`),
		msg(`{"process":{"cmd":"/bin/true","cwd":"/tmp","envs":{"A":"b"}},"pty":{"size":{"cols":80,"rows":24}}}`),
		msg(`{}`),
		msg(`{"process":{"cmd":""}}`),
		msg(`{"process":{"cmd":1}}`),
		msg(`not json`),
		envelope(1, []byte(`{}`)), // compressed, with no compression negotiated
		envelope(2, []byte(`{}`)), // end of stream from the client
		append(msg(`{}`), msg(`{}`)...),
		msg(`{}`)[:7],
		{0, 0xff, 0xff, 0xff, 0xff},
		nil,
	} {
		f.Add(seed, "60000", "50")
	}
	f.Add(msg(`{"process":{"cmd":"/bin/true"}}`), "", "")
	f.Add(msg(`{"process":{"cmd":"/bin/true"}}`), "-1", "x")
	f.Add(msg(`{"process":{"cmd":"/bin/true"}}`), "99999999999999999999", "0")
	f.Fuzz(func(t *testing.T, body []byte, timeoutMs, keepalive string) {
		req := httptest.NewRequest(http.MethodPost, "/process.Process/Start", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/connect+json")
		req.Header.Set("Connect-Protocol-Version", "1")
		// Header values the client could not send are not worth fuzzing.
		if timeoutMs != "" && validHeaderValue(timeoutMs) {
			req.Header.Set("Connect-Timeout-Ms", timeoutMs)
		}
		if keepalive != "" && validHeaderValue(keepalive) {
			req.Header.Set("Keepalive-Ping-Interval", keepalive)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		checkStream(t, rec)
		checkNothingStarted(t, svc)
	})
}

// fuzzUnary fuzzes the JSON body of one unary method.
func fuzzUnary(f *testing.F, method string, seeds ...string) {
	h, svc := fuzzService(f)
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(nil))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"unknown":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/process.Process/"+method, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		// Every call acts as a user that does not exist: always an error.
		checkUnaryError(t, rec)
		checkNothingStarted(t, svc)
	})
}

func FuzzList(f *testing.F) {
	fuzzUnary(f, "List", `{}`, `{"a":`)
}

func FuzzSendSignal(f *testing.F) {
	fuzzUnary(f, "SendSignal",
		`{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}`,
		`{"process":{"tag":"x"},"signal":15}`,
		`{"process":{"pid":-1},"signal":"SIGNAL_SIGHUP"}`,
		`{"process":{"pid":1,"tag":"both"}}`)
}

func FuzzSendInput(f *testing.F) {
	fuzzUnary(f, "SendInput",
		`{"process":{"pid":1},"input":{"stdin":"aGkK"}}`,
		`{"process":{"pid":1},"input":{"pty":"aGkK"}}`,
		`{"process":{"pid":1},"input":{"stdin":"not base64!"}}`,
		`{"process":{"pid":4294967296},"input":{}}`)
}

// validHeaderValue reports whether s can be sent as an HTTP header value.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
