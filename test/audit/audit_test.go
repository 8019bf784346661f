// Package audit_test drives a real `hutch serve` built from this checkout
// through the Go SDK, `hutch mcp` and the REST API, then reads the audit
// trail back as a user reads it — `hutch events` (table, --json, -f,
// filters) and GET /events (JSON and JSON lines) — and holds it to what the
// test did: every kind of event, the key and sandbox behind each, and no
// secret anywhere in it.
package audit_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/hutch-sandbox/hutch/api/gen/process"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) {
	testenv.RequireRootMain("hutch serve runs sandboxes: namespaces, cgroups and mounts")
	hutchtest.Main(m, hutchBin)
}

// secrets are values the test hands Hutch under secret names, or in a
// gateway's configuration: none may appear in the trail.
var secrets = []string{"ghp-secret-value-1", "k-secret-value-2", "tok-secret-value-3", "pw-secret-value-4"}

// event is an event as GET /events and hutch events --json print it.
type event struct {
	Seq       int64          `json:"seq"`
	Time      time.Time      `json:"time"`
	KeyID     string         `json:"keyID"`
	SandboxID string         `json:"sandboxID"`
	Kind      string         `json:"kind"`
	Action    string         `json:"action"`
	Outcome   string         `json:"outcome"`
	Detail    map[string]any `json:"detail"`
}

type fixture struct {
	srv          *hutchtest.Server
	bin          string
	user, userID string // a user key made with hutch keys create
}

func (f *fixture) hutch(t *testing.T, key string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(f.bin, args...)
	cmd.Env = append(hutchtest.CleanEnv(), "HUTCH_API_URL="+f.srv.URL(), "HUTCH_API_KEY="+key, "HUTCH_DATA_DIR="+f.srv.DataDir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("hutch %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), err
}

// api makes a REST call with key and returns the status and body.
func (f *fixture) api(t *testing.T, key, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, f.srv.URL()+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// events reads the trail with hutch events --json and the flags given.
func (f *fixture) events(t *testing.T, key string, flags ...string) []event {
	t.Helper()
	out, err := f.hutch(t, key, append([]string{"events", "--json"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	return parseLines(t, out)
}

func parseLines(t *testing.T, out string) []event {
	t.Helper()
	var evs []event
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("a line of JSON lines that is not JSON: %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// find returns the events of action (and, when not empty, sandbox id).
func find(evs []event, action, id string) []event {
	var out []event
	for _, e := range evs {
		if e.Action == action && (id == "" || e.SandboxID == id) {
			out = append(out, e)
		}
	}
	return out
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{bin: hutchBin.Path(t)}
	f.srv = hutchtest.StartServe(t, f.bin, "--metrics-api")
	stdout, err := f.hutch(t, "", "keys", "create", "--name", "agent")
	if err != nil {
		t.Fatal(err)
	}
	f.user = strings.TrimSpace(stdout)
	status, body := f.api(t, f.user, http.MethodGet, "/api-keys", nil)
	var keys []struct {
		ID, Role string
		Current  bool
	}
	if err := json.Unmarshal(body, &keys); status != http.StatusOK || err != nil || len(keys) != 1 || !keys[0].Current || keys[0].Role != "user" {
		t.Fatalf("GET /api-keys with a user key: %d %s, want only itself, role user", status, body)
	}
	f.userID = keys[0].ID
	return f
}

// TestTrailOfAnAgent: what an agent does with a user key — a sandbox with
// secret env vars, commands (one failing, one with a secret on its command
// line), files written, renamed, removed, a directory made, a timeout set,
// a tool call through hutch mcp, the kill — is in the trail, each event
// with the key and sandbox, and no secret is.
func TestTrailOfAnAgent(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	cfg := sdk.Config{APIURL: f.srv.URL(), APIKey: f.user}
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfg, Envs: map[string]string{"GITHUB_TOKEN": secrets[0], "PLAIN": "visible"}, Metadata: map[string]string{"agent": "a1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Kill(context.Background())
	// The admin's own sandbox: not the user's to see.
	other, err := sdk.Create(ctx, sdk.CreateOptions{Config: sdk.Config{APIURL: f.srv.URL(), APIKey: hutchtest.TestKey}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Kill(context.Background())

	// -f follows: started now, it must print the commands below as they
	// happen.
	follow := exec.Command(f.bin, "events", "-f", "--json", "--sandbox", sbx.ID)
	follow.Env = append(hutchtest.CleanEnv(), "HUTCH_API_URL="+f.srv.URL(), "HUTCH_API_KEY="+f.user)
	followOut, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()

	if _, err := sbx.Commands.Run(ctx, "echo hello", &sdk.RunOptions{Cwd: "/tmp", User: "root", Envs: map[string]string{"API_KEY": secrets[1], "COLOR": "blue"}}); err != nil {
		t.Fatal(err)
	}
	if res, err := sbx.Commands.Run(ctx, "exit 3", nil); err == nil || res != nil && res.ExitCode != 3 {
		t.Fatalf("exit 3: %+v, %v; want exit code 3", res, err)
	}
	if _, err := sbx.Commands.Run(ctx, "MY_TOKEN="+secrets[2]+" true", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.Files.Write(ctx, "/home/user/a.txt", []byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.Files.Rename(ctx, "/home/user/a.txt", "/home/user/b.txt", nil); err != nil {
		t.Fatal(err)
	}
	if err := sbx.Files.Remove(ctx, "/home/user/b.txt", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.Files.MakeDir(ctx, "/home/user/d", nil); err != nil {
		t.Fatal(err)
	}
	if err := sbx.SetTimeout(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}

	// A tool call through hutch mcp, acting with the user key.
	cl := mcp.NewClient(&mcp.Implementation{Name: "audit-test", Version: "1"}, nil)
	mcpCmd := exec.Command(f.bin, "mcp", "--api-url", f.srv.URL(), "--api-key", f.user)
	mcpCmd.Env = hutchtest.CleanEnv()
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: mcpCmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "command_run", Arguments: map[string]any{
		"sandbox_id": sbx.ID, "command": "echo from-mcp", "envs": map[string]string{"SERVICE_PASSWORD": secrets[3]}}})
	if err != nil || res.IsError {
		t.Fatalf("command_run through hutch mcp: %v %+v", err, res)
	}
	cs.Close()

	// -f printed the first command's start and end as they came.
	lines := bufio.NewScanner(followOut)
	var seen []string
	deadline := time.AfterFunc(30*time.Second, func() { follow.Process.Kill() })
	for lines.Scan() {
		var e event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("hutch events -f --json printed %q: %v", lines.Text(), err)
		}
		seen = append(seen, e.Action)
		if e.Action == "command.end" {
			break
		}
	}
	deadline.Stop()
	if !strings.Contains(strings.Join(seen, " "), "command.start command.end") {
		t.Errorf("hutch events -f printed %v, want the command's start and end", seen)
	}

	if err := sbx.Kill(ctx); err != nil {
		t.Fatal(err)
	}

	evs := f.events(t, f.user, "--sandbox", sbx.ID)
	for _, e := range evs {
		if e.KeyID != f.userID || e.SandboxID != sbx.ID {
			t.Errorf("event %s: key %q sandbox %q, want the user key %s and %s", e.Action, e.KeyID, e.SandboxID, f.userID, sbx.ID)
		}
	}
	for _, want := range []struct {
		action string
		n      int
	}{
		{"sandbox.create", 1}, {"sandbox.timeout", 1}, {"sandbox.kill", 1},
		{"command.start", 4}, {"command.end", 4}, // three of the SDK's, one of hutch mcp's
		{"file.write", 1}, {"file.move", 1}, {"file.delete", 1}, {"file.mkdir", 1},
		{"tool.call", 1},
	} {
		if got := len(find(evs, want.action, "")); got != want.n {
			t.Errorf("%d %s events, want %d", got, want.action, want.n)
		}
	}
	if t.Failed() {
		t.Fatalf("the trail:\n%s", dump(evs))
	}
	create := find(evs, "sandbox.create", "")[0]
	if env, _ := create.Detail["envVars"].(map[string]any); env["GITHUB_TOKEN"] != "[redacted]" || env["PLAIN"] != "visible" {
		t.Errorf("sandbox.create envVars %v: want GITHUB_TOKEN redacted, PLAIN kept", create.Detail["envVars"])
	}
	starts := find(evs, "command.start", "")
	first := starts[0].Detail
	if !strings.Contains(fmt.Sprint(first["cmd"]), "echo hello") || first["cwd"] != "/tmp" || first["user"] != "root" {
		t.Errorf("first command.start %v: want its command line, cwd /tmp and user root", first)
	}
	if env, _ := first["envs"].(map[string]any); env["API_KEY"] != "[redacted]" || env["COLOR"] != "blue" {
		t.Errorf("command envs %v: want API_KEY redacted, COLOR kept", first["envs"])
	}
	ends := find(evs, "command.end", "")
	if ends[0].Outcome != "ok" || ends[0].Detail["exitCode"] != 0.0 || ends[0].Detail["durationMs"] == nil {
		t.Errorf("first command.end %+v: want ok, exit 0 and a duration", ends[0])
	}
	if ends[1].Outcome != "error" || ends[1].Detail["exitCode"] != 3.0 {
		t.Errorf("second command.end %+v: want error, exit 3", ends[1])
	}
	if !strings.Contains(fmt.Sprint(starts[2].Detail["cmd"]), "MY_TOKEN=[redacted] true") {
		t.Errorf("third command.start cmd %v: want MY_TOKEN's value redacted", starts[2].Detail["cmd"])
	}
	if w := find(evs, "file.write", "")[0]; fmt.Sprint(w.Detail["paths"]) != "[/home/user/a.txt]" || w.Kind != "file" {
		t.Errorf("file.write %+v: want kind file, paths [/home/user/a.txt]", w)
	}
	if m := find(evs, "file.move", "")[0]; m.Detail["path"] != "/home/user/a.txt" || m.Detail["destination"] != "/home/user/b.txt" {
		t.Errorf("file.move %v", m.Detail)
	}
	tool := find(evs, "tool.call", "")[0]
	args, _ := tool.Detail["arguments"].(map[string]any)
	envs, _ := args["envs"].(map[string]any)
	if tool.Kind != "mcp" || tool.Detail["tool"] != "command_run" || envs["SERVICE_PASSWORD"] != "[redacted]" || args["command"] != "echo from-mcp" {
		t.Errorf("tool.call %+v: want kind mcp, tool command_run, its arguments with SERVICE_PASSWORD redacted", tool)
	}

	// No secret anywhere: the JSON lines export of everything, as the
	// admin reads it.
	status, export := f.apiAccept(t, hutchtest.TestKey, "/events?limit=100000", "application/x-ndjson")
	if status != http.StatusOK {
		t.Fatalf("export: %d %s", status, export)
	}
	all := parseLines(t, string(export))
	if len(all) < len(evs)+1 || len(find(all, "sandbox.create", other.ID)) != 1 {
		t.Errorf("the admin's export has %d events: want the user's %d and the admin's own create", len(all), len(evs))
	}
	for _, s := range secrets {
		if bytes.Contains(export, []byte(s)) {
			t.Errorf("the export holds the secret %q", s)
		}
	}
	for _, s := range append(secrets, f.user, hutchtest.TestKey) {
		out, _ := f.hutch(t, hutchtest.TestKey, "events")
		if strings.Contains(out, s) {
			t.Errorf("hutch events prints %q", s)
		}
	}

	// The user sees its own events only; the admin filters by key.
	if mine := f.events(t, f.user); len(find(mine, "sandbox.create", other.ID)) != 0 {
		t.Errorf("the user key reads the admin's sandbox.create")
	}
	if _, err := f.hutch(t, f.user, "events", "--key", "key_0000000000000000"); err == nil || !strings.Contains(err.Error(), "own events") {
		t.Errorf("a user key asking for another key's events: %v, want refused", err)
	}
	if byKey := f.events(t, hutchtest.TestKey, "--key", f.userID); len(byKey) < len(evs) || len(find(byKey, "sandbox.create", other.ID)) != 0 {
		t.Errorf("the admin's --key %s: %d events, want the user's %d and none of its own", f.userID, len(byKey), len(evs))
	}
	if cmds := f.events(t, f.user, "--kind", "command"); len(cmds) != 8 {
		t.Errorf("--kind command: %d events, want 8", len(cmds))
	}
	if recent := f.events(t, f.user, "--since", "1h"); len(recent) == 0 {
		t.Errorf("--since 1h: nothing")
	}
	if future := f.events(t, f.user, "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)); len(future) != 0 {
		t.Errorf("--since an hour ahead: %d events", len(future))
	}
	// What was written is counted, by kind.
	status, body := f.api(t, hutchtest.TestKey, http.MethodGet, "/metrics", nil)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if status != http.StatusOK || err != nil {
		t.Fatalf("GET /metrics: %d, %v", status, err)
	}
	counted := map[string]float64{}
	for _, m := range fams["hutch_audit_events_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			counted[l.GetValue()] = m.GetCounter().GetValue()
		}
	}
	if counted["command"] < 8 || counted["file"] < 4 || counted["mcp"] < 1 || counted["api"] < 4 {
		t.Errorf("hutch_audit_events_total by kind: %v; want at least the test's 8 command, 4 file, 1 mcp and 4 api events", counted)
	}
	if lost := fams["hutch_audit_events_lost_total"].GetMetric(); len(lost) != 1 || lost[0].GetCounter().GetValue() != 0 {
		t.Errorf("hutch_audit_events_lost_total: %v, want 0", lost)
	}
	// The table, as a person reads it.
	table, err := f.hutch(t, f.user, "events", "--sandbox", sbx.ID)
	if err != nil || !regexp.MustCompile(`(?m)command\.end\s+error\s+cmd=.*exit 3`).MatchString(table) {
		t.Errorf("hutch events table (%v):\n%s\nwant a line for the failed command", err, table)
	}
}

func (f *fixture) apiAccept(t *testing.T, key, path, accept string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.srv.URL()+path, nil)
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode == http.StatusOK && ct != accept {
		t.Errorf("Content-Type %q, want %q", ct, accept)
	}
	return resp.StatusCode, b
}

func dump(evs []event) string {
	var b strings.Builder
	for _, e := range evs {
		d, _ := json.Marshal(e.Detail)
		fmt.Fprintf(&b, "\t%s %s %s %s\n", e.Action, e.Outcome, e.SandboxID, d)
	}
	return b.String()
}

// TestKeysAndBadInput: API keys through the REST API — only an admin key
// makes them, each key sees what its role allows, a revoked key is
// refused — recorded in the trail; and bad queries of /events get clear
// errors in E2B's error shape.
func TestKeysAndBadInput(t *testing.T) {
	f := newFixture(t)
	if status, body := f.api(t, f.user, http.MethodPost, "/api-keys", map[string]any{"name": "x"}); status != http.StatusForbidden || !strings.Contains(string(body), "admin") {
		t.Errorf("a user key making a key: %d %s, want 403", status, body)
	}
	status, body := f.api(t, hutchtest.TestKey, http.MethodPost, "/api-keys", map[string]any{"name": "ci", "role": "user"})
	var made struct{ ID, Key, Role string }
	if err := json.Unmarshal(body, &made); status != http.StatusCreated || err != nil || !strings.HasPrefix(made.Key, "e2b_") || made.Role != "user" {
		t.Fatalf("the admin making a key: %d %s", status, body)
	}
	if status, _ := f.api(t, made.Key, http.MethodGet, "/v2/sandboxes", nil); status != http.StatusOK {
		t.Fatalf("the new key lists sandboxes: %d", status)
	}
	status, body = f.api(t, hutchtest.TestKey, http.MethodGet, "/api-keys", nil)
	if status != http.StatusOK || !strings.Contains(string(body), made.ID) || strings.Contains(string(body), made.Key) {
		t.Errorf("the admin's list: %d %s, want the new key by id and never its secret", status, body)
	}
	if status, _ := f.api(t, f.user, http.MethodDelete, "/api-keys/"+made.ID, nil); status != http.StatusNotFound {
		t.Errorf("a user key revoking another key: %d, want 404", status)
	}
	if status, _ := f.api(t, hutchtest.TestKey, http.MethodDelete, "/api-keys/"+made.ID, nil); status != http.StatusNoContent {
		t.Fatalf("revoke: %d", status)
	}
	if status, _ := f.api(t, made.Key, http.MethodGet, "/v2/sandboxes", nil); status != http.StatusUnauthorized {
		t.Errorf("the revoked key: %d, want 401", status)
	}
	evs := f.events(t, hutchtest.TestKey, "--kind", "api")
	creates := find(evs, "key.create", "")
	if len(creates) != 3 || len(find(evs, "key.revoke", "")) != 2 {
		t.Fatalf("key events: %s\nwant three key.create (the CLI's, then the API's refused and done) and two key.revoke (one refused)", dump(evs))
	}
	if cli := creates[0]; cli.Detail["via"] != "hutch keys create" || cli.Detail["apiKeyID"] != f.userID || cli.KeyID != "" {
		t.Errorf("the CLI's key.create %+v: want via hutch keys create, the user key's id, no key behind it", cli)
	}
	if refused := creates[1]; refused.Outcome != "error" || refused.KeyID != f.userID || refused.Detail["status"] != 403.0 {
		t.Errorf("the user key's key.create %+v: want an error (403) by the user key", refused)
	}
	if done := creates[2]; done.Outcome != "ok" || done.Detail["apiKeyID"] != made.ID || done.Detail["role"] != "user" {
		t.Errorf("the admin's key.create %+v: want ok, the new key's id and role", done)
	}

	for _, tc := range []struct{ query, want string }{
		{"since=yesterday", "RFC 3339"},
		{"limit=0", "1 to 1000"},
		{"limit=5000", "1 to 1000"},
		{"after=-1", "seq"},
		{"order=sideways", "newest"},
	} {
		status, body := f.api(t, f.user, http.MethodGet, "/events?"+tc.query, nil)
		var e struct {
			Code    int
			Message string
		}
		if json.Unmarshal(body, &e) != nil || status != http.StatusBadRequest || e.Code != 400 || !strings.Contains(e.Message, tc.want) {
			t.Errorf("GET /events?%s: %d %s, want a 400 saying %q", tc.query, status, body, tc.want)
		}
	}
	if status, body := f.api(t, f.user, http.MethodPost, "/events", map[string]any{"kind": "command", "action": "x"}); status != http.StatusBadRequest {
		t.Errorf("a client reporting a command: %d %s, want 400", status, body)
	}
	if status, body := f.api(t, f.user, http.MethodPost, "/events", map[string]any{"kind": "mcp", "action": "tool.call", "sandboxID": "nosuchsandbox"}); status != http.StatusNotFound {
		t.Errorf("a report on a sandbox not the key's: %d %s, want 404", status, body)
	}
}

// TestTrailHolds: what an outside review of the trail tried. Calls that
// prove nothing (no key, a wrong envd token) write nothing to it; envd
// calls the edge cannot read (gRPC-Web, a body past 4 MiB) are refused
// rather than run unrecorded; a reported action must be a plain name; and
// a client's bytes reach `hutch events` escaped.
func TestTrailHolds(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	sbx, err := sdk.Create(ctx, sdk.CreateOptions{Config: sdk.Config{APIURL: f.srv.URL(), APIKey: f.user}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Kill(context.Background())
	count := func() int { return len(f.events(t, hutchtest.TestKey, "--since", "1h")) }
	before := count()

	// No key: refused, and nothing recorded, whatever the path holds.
	for _, path := range []string{"/sandboxes/%1b%5b2K%1b%5b31mFORGED", "/sandboxes/" + strings.Repeat("B", 4000)} {
		if status, _ := f.api(t, "", http.MethodDelete, path, nil); status != http.StatusUnauthorized {
			t.Errorf("DELETE %.40s… without a key: %d, want 401", path, status)
		}
	}
	// envd calls with a wrong token: refused by envd, nothing recorded.
	start := func(token, contentType string, body []byte) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL()+"/process.Process/Start", bytes.NewReader(body))
		req.Header.Set("E2b-Sandbox-Id", sbx.ID)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-Access-Token", token)
		req.Header.Set("Content-Type", contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	msg := startRequest("/bin/bash", "-c", "touch /tmp/ran")
	if status := start("wrong-token", "application/connect+proto", msg); status != http.StatusUnauthorized {
		t.Errorf("Start with a wrong token: %d, want envd's 401", status)
	}
	if after := count(); after != before {
		t.Errorf("%d events recorded for calls that proved nothing: %s", after-before, dump(f.events(t, hutchtest.TestKey, "--since", "1h")[before:]))
	}

	// The right token, in a protocol the edge does not read, or too
	// large to read: refused, and the command does not run.
	if status := start(sbx.EnvdAccessToken, "application/grpc-web+proto", msg); status != http.StatusUnsupportedMediaType {
		t.Errorf("Start over gRPC-Web: %d, want 415", status)
	}
	big := startRequest("/bin/bash", "-c", "touch /tmp/ran; : "+strings.Repeat("x", 4<<20))
	if status := start(sbx.EnvdAccessToken, "application/connect+proto", big); status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 4 MiB Start: %d, want 413", status)
	}
	if res, err := sbx.Commands.Run(ctx, "test -e /tmp/ran && echo ran || echo not", nil); err != nil || strings.TrimSpace(res.Stdout) != "not" {
		t.Errorf("a refused command ran: %+v, %v", res, err)
	}

	// A reported action is a plain name.
	if status, body := f.api(t, f.user, http.MethodPost, "/events", map[string]any{"kind": "mcp", "action": "\x1b[2Kx"}); status != http.StatusBadRequest {
		t.Errorf("an action with an escape: %d %s, want 400", status, body)
	}
	// What a client chose, printed: escaped, never raw.
	if _, err := sbx.Commands.Run(ctx, "echo '\x1b[31mred\tand\nnew line'", nil); err != nil {
		t.Fatal(err)
	}
	table, err := f.hutch(t, f.user, "events", "--sandbox", sbx.ID)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(table, "\x1b") || strings.Count(table, "\n") != len(f.events(t, f.user, "--sandbox", sbx.ID))+1 {
		t.Errorf("hutch events printed a client's control characters raw:\n%q", table)
	}
}

// startRequest is process.Process/Start's request for cmd, in Connect's
// streaming envelope.
func startRequest(cmd string, args ...string) []byte {
	msg, err := proto.Marshal(&process.StartRequest{Process: &process.ProcessConfig{Cmd: cmd, Args: args}})
	if err != nil {
		panic(err)
	}
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	return append(env, msg...)
}
