package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	pb "github.com/hutch-sandbox/hutch/api/gen/process"
	"github.com/hutch-sandbox/hutch/api/gen/process/processconnect"
	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/e2bapi"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/internal/osbapi"
)

// The raw calls: what each protocol's clients send, from Go on a
// kept-alive connection, without an SDK. Both sides run the same
// process as the same user: execd's POST /command runs its command as
// `/bin/bash -c`, as root (internal/osbexecd), so envd's Start gets that
// too (E2B's SDKs send `/bin/bash -l -c` as "user": the cmdLogin row).

// rawUser is the sandbox user of the raw calls: execd's default.
const rawUser = "root"

// execd is one sandbox's execd endpoint as OpenSandbox's lifecycle API
// hands it out.
type execd struct {
	c     *http.Client
	base  string // http://host:port/v1/sandboxes/{id}/proxy/44772
	token string // X-EXECD-ACCESS-TOKEN
}

// newExecd asks s for sandbox id's execd endpoint (GET
// /v1/sandboxes/{id}/endpoints/44772), as the SDKs do.
func (b *bench) newExecd(ctx context.Context, s *server, hc *http.Client, id string) (*execd, error) {
	var ep osbapi.Endpoint
	if err := b.api(ctx, s, http.MethodGet, fmt.Sprintf("/v1/sandboxes/%s/endpoints/%d", id, osbapi.ExecdPort), nil, http.StatusOK, &ep); err != nil {
		return nil, err
	}
	return &execd{c: hc, base: "http://" + ep.Endpoint, token: ep.Headers[osbapi.HeaderExecdToken]}, nil
}

func (e *execd) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, body)
	if err != nil {
		return nil, err
	}
	if e.token != "" {
		req.Header.Set(osbapi.HeaderExecdToken, e.token)
	}
	return req, nil
}

// run is POST /command {"command": cmd}: its event stream read until
// execution_complete (the clock stops there; the rest is read after).
func (e *execd) run(ctx context.Context, cmd string) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"command": cmd})
	req, err := e.request(ctx, http.MethodPost, "/command", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	t0 := time.Now()
	resp, err := e.c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return 0, fmt.Errorf("POST /command: %s: %s", resp.Status, harness.OneLine(string(msg)))
	}
	var d time.Duration
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimPrefix(sc.Text(), "data:")
		if strings.TrimSpace(line) == "" {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Error *struct {
				EValue string `json:"evalue"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return 0, fmt.Errorf("POST /command: event %q: %w", line, err)
		}
		switch ev.Type {
		case "execution_complete":
			d = time.Since(t0)
		case "error":
			return 0, fmt.Errorf("POST /command: %s exited with %s", cmd, ev.Error.EValue)
		}
		if d != 0 {
			break
		}
	}
	if d == 0 {
		if err := sc.Err(); err != nil {
			return 0, err
		}
		return 0, errors.New("POST /command: the stream ended without execution_complete")
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return d, nil
}

// upload is POST /files/upload of data to path as the SDKs send it: a
// "metadata" part ({path, owner, group, mode}; mode 755, the SDKs'
// default, or none when mode is 0) and a "file" part.
func (e *execd) upload(ctx context.Context, path string, data []byte, mode int) (time.Duration, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	meta := map[string]any{"path": path, "owner": nil, "group": nil}
	if mode != 0 {
		meta["mode"] = mode
	}
	metaJSON, _ := json.Marshal(meta)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	h.Set("Content-Type", "application/json")
	pw, _ := mw.CreatePart(h)
	pw.Write(metaJSON)
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, path[strings.LastIndexByte(path, '/')+1:]))
	h.Set("Content-Type", "application/octet-stream")
	pw, _ = mw.CreatePart(h)
	pw.Write(data)
	mw.Close()
	req, err := e.request(ctx, http.MethodPost, "/files/upload", &body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return timedDo(e.c, req, http.StatusOK, -1)
}

// download is GET /files/download?path=, read whole; it must be size
// bytes.
func (e *execd) download(ctx context.Context, path string, size int) (time.Duration, error) {
	req, err := e.request(ctx, http.MethodGet, "/files/download?"+url.Values{"path": {path}}.Encode(), nil)
	if err != nil {
		return 0, err
	}
	return timedDo(e.c, req, http.StatusOK, size)
}

// timedDo sends req and reads the answer whole, timed from sending it to
// its last byte; the answer must be want, and size bytes long unless
// size is -1.
func timedDo(c *http.Client, req *http.Request, want, size int) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(io.Discard, resp.Body, make([]byte, 256<<10))
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != want {
		return 0, fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status)
	}
	if size >= 0 && n != int64(size) {
		return 0, fmt.Errorf("%s %s: %d bytes, want %d", req.Method, req.URL.Path, n, size)
	}
	return d, nil
}

// envd is one sandbox's envd reached through hutch serve's edge as E2B's
// SDKs reach it with E2B_SANDBOX_URL: the routing headers
// E2b-Sandbox-Id and E2b-Sandbox-Port and the access token on every
// request.
type envd struct {
	c    *http.Client
	base string // the server's URL
	proc processconnect.ProcessClient
}

// routed adds the routing headers and envd's access token.
type routed struct {
	rt        http.RoundTripper
	id, token string
}

func (r *routed) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("E2b-Sandbox-Id", r.id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(envdapi.Port))
	if r.token != "" {
		req.Header.Set(envdapi.HeaderAccessToken, r.token)
	}
	return r.rt.RoundTrip(req)
}

// newEnvd is sandbox id's envd through s, on transport rt.
func newEnvd(s *server, rt http.RoundTripper, id, token string) *envd {
	hc := &http.Client{Transport: &routed{rt: rt, id: id, token: token}}
	return &envd{c: hc, base: s.url, proc: processconnect.NewProcessClient(hc, s.url)}
}

// basicUser selects envd's user for an RPC, as E2B's SDKs and execd's
// translation do.
func basicUser(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"))
}

// run is process.Process/Start of cmd with args as user, timed to its
// end event (harness.StartProcess: the rest of the stream is read after).
func (e *envd) run(ctx context.Context, user, cmd string, args ...string) (time.Duration, error) {
	d, _, err := harness.StartProcessAs(ctx, e.proc, &pb.ProcessConfig{Cmd: cmd, Args: args}, basicUser(user))
	return d, err
}

// upload is POST /files?path= with a multipart "file" part, as E2B's
// SDKs send a file they hold in memory, and as execd's translation
// sends envd its uploads.
func (e *envd) upload(ctx context.Context, path string, data []byte) (time.Duration, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	pw, _ := mw.CreateFormFile("file", path)
	pw.Write(data)
	mw.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/files?"+url.Values{"path": {path}, "username": {rawUser}}.Encode(), &body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return timedDo(e.c, req, http.StatusOK, -1)
}

// download is GET /files?path=, read whole; it must be size bytes.
func (e *envd) download(ctx context.Context, path string, size int) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/files?"+url.Values{"path": {path}, "username": {rawUser}}.Encode(), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	return timedDo(e.c, req, http.StatusOK, size)
}

// createE2B is POST /v2/sandboxes of base (E2B's SDKs' create: the
// answer carries envd's access token).
func (b *bench) createE2B(ctx context.Context, s *server) (*e2bapi.Sandbox, error) {
	timeout := int32(3600)
	var sb e2bapi.Sandbox
	err := b.api(ctx, s, http.MethodPost, "/v2/sandboxes", e2bapi.NewSandboxV2{TemplateID: "base", Timeout: &timeout}, http.StatusCreated, &sb)
	return &sb, err
}

// createOSB is POST /v1/sandboxes of base; withSDKDefaults adds what
// OpenSandbox's Python SDK sends when its caller gives only the image:
// resourceLimits cpu 1 and memory 2Gi, entrypoint `tail -f /dev/null`.
func (b *bench) createOSB(ctx context.Context, s *server, withSDKDefaults bool) (string, error) {
	timeout := int64(3600)
	req := osbapi.CreateSandboxRequest{Image: &osbapi.ImageSpec{URI: "base"}, Timeout: &timeout}
	if withSDKDefaults {
		req.ResourceLimits = map[string]string{"cpu": "1", "memory": "2Gi"}
		req.Entrypoint = []string{"tail", "-f", "/dev/null"}
	}
	var sb osbapi.CreateSandboxResponse
	if err := b.api(ctx, s, http.MethodPost, "/v1/sandboxes", req, http.StatusAccepted, &sb); err != nil {
		return "", err
	}
	return sb.ID, nil
}
