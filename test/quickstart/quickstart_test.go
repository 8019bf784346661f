// Package quickstart runs E2B's MCP quick start as published (js/index.ts,
// from Docker's "E2B sandboxes" page, with the e2b JS SDK it was written
// for, 2.3.4, and tsx, as that page says) against the hutch binary built
// from this checkout, serving a domain over TLS (`hutch serve --domain
// hutch.localhost --tls-self-signed`) in a network namespace of the test's
// own: the client is configured only as a user would, by E2B_DOMAIN,
// E2B_API_KEY and NODE_EXTRA_CA_CERTS. Names under .localhost resolve to
// loopback (libnss-myhostname); nothing leaves the machine.
package quickstart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// bin is cmd/hutch built from this checkout, once.
var bin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, bin) }

// domain is the sandbox domain the server serves: api.<domain> and
// <port>-<id>.<domain> all resolve to loopback.
const domain = "hutch.localhost"

// nodeTimeout bounds one run of the quick start.
const nodeTimeout = 3 * time.Minute

// published and offline are the mcp block of index.ts as published and
// the test's substitute. The published servers (notion, githubOfficial)
// are fetched with npx when the gateway starts, which needs the internet;
// the test's sandboxes have none, so the run that must succeed names two
// servers the mcp-gateway template has installed instead. Nothing else of
// the script changes.
const (
	published = `      notion: {
        internalIntegrationToken: process.env
          .NOTION_INTEGRATION_TOKEN as string,
      },
      githubOfficial: {
        githubPersonalAccessToken: process.env.GITHUB_TOKEN as string,
      },
`
	offline = `      memory: {},
      sequentialThinking: {},
`
)

// TestPublishedQuickstart runs the quick start twice against one server:
//
//   - "preinstalled servers": index.ts with notion and githubOfficial
//     replaced by memory and sequentialThinking (catalog servers the
//     template has): it must print "Connection successful!" after `claude
//     mcp add` printed the gateway's URL. Just before the script's own
//     sbx.kill(), js/inspect.mjs (loaded with --import, see there) looks
//     as a user would: `claude mcp list` and ~/.claude.json in the
//     sandbox name the gateway's URL and token, and an MCP initialize and
//     tools/list at betaGetMcpUrl() with betaGetMcpToken() answer (401
//     without the token). Afterwards the sandbox is gone.
//   - "as published": index.ts verbatim (with placeholder tokens): the
//     sandbox cannot reach the npm registry, so the create fails, and the
//     error the script prints says why.
func TestPublishedQuickstart(t *testing.T) {
	testenv.RequireRoot(t, "hutch serve runs sandboxes: namespaces, cgroups and mounts")
	requireGatewayTemplate(t)
	js := hutchtest.JSPackage(t, "quickstart/js")
	srv := hutchtest.StartDomainServe(t, bin.Path(t), domain)
	env := userEnv(t, srv)

	t.Run("preinstalled servers", func(t *testing.T) {
		script := offlineScript(t, js)
		out := filepath.Join(t.TempDir(), "check.json")
		r := runScript(t, srv, js, append(env, "QUICKSTART_CHECK_OUT="+out,
			"NODE_OPTIONS=--import="+filepath.Join(js, "inspect.mjs")), script)
		if !strings.Contains(r.Stdout, "Connection successful!") {
			t.Fatalf("the quick start did not print \"Connection successful!\":\n%s", r)
		}
		rep := readReport(t, out)
		if rep.Error != "" {
			t.Fatalf("inspect.mjs: %s", rep.Error)
		}
		checkReport(t, rep, r.Stdout)
		for _, sb := range srv.RuntimeSandboxes() {
			if sb.ID == rep.SandboxID {
				t.Errorf("sandbox %s still runs after the script's sbx.kill()", rep.SandboxID)
			}
		}
	})

	t.Run("as published", func(t *testing.T) {
		r := runScript(t, srv, js, append(env, "NOTION_INTEGRATION_TOKEN=ntn_placeholder", "GITHUB_TOKEN=ghp_placeholder"), "index.ts")
		// The script catches the error and prints it (console.error): it
		// exits 0 either way.
		if strings.Contains(r.Stdout, "Connection successful!") {
			t.Fatalf("the published servers started in a sandbox without internet:\n%s", r)
		}
		all := r.Stdout + r.Stderr
		for _, want := range []string{"needs a download (npx", "cannot reach the internet"} {
			if !strings.Contains(all, want) {
				t.Errorf("the failed create does not say %q:\n%s", want, r)
			}
		}
	})
}

// requireGatewayTemplate fails the test unless the mcp-gateway template is
// built from this checkout's recipe (the one with the claude CLI).
func requireGatewayTemplate(t *testing.T) {
	t.Helper()
	store := template.Open(testenv.TemplatesDir())
	stale, err := store.Stale("mcp-gateway")
	if err != nil {
		t.Fatalf("the mcp-gateway template (scripts/setup.sh builds it): %v", err)
	}
	if stale {
		t.Fatalf("the mcp-gateway template in %s is not built from this checkout's recipe: run `hutch template build mcp-gateway`", testenv.TemplatesDir())
	}
}

// userEnv is what a user of the quick start sets: E2B_DOMAIN, E2B_API_KEY
// and NODE_EXTRA_CA_CERTS (the server's CA), from the server's DomainEnv,
// on an environment without any HUTCH_*, E2B_* or other CA variable.
func userEnv(t *testing.T, srv *hutchtest.Server) []string {
	t.Helper()
	var env []string
	for _, kv := range hutchtest.CleanEnv() {
		if !strings.HasPrefix(kv, "SSL_CERT_") && !strings.HasPrefix(kv, "NODE_") {
			env = append(env, kv)
		}
	}
	have := map[string]bool{}
	for _, kv := range srv.DomainEnv() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "E2B_DOMAIN" || k == "E2B_API_KEY" || k == "NODE_EXTRA_CA_CERTS" {
			env = append(env, kv)
			have[k] = true
		}
	}
	if len(have) != 3 {
		t.Fatalf("DomainEnv %q lacks one of E2B_DOMAIN, E2B_API_KEY, NODE_EXTRA_CA_CERTS", srv.DomainEnv())
	}
	return append(env, "NO_COLOR=1", "FORCE_COLOR=0")
}

// offlineScript writes index.ts with the offline servers into the JS
// package (where its imports resolve), removed when the test ends, and
// returns its name.
func offlineScript(t *testing.T, js string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(js, "index.ts"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), published); n != 1 {
		t.Fatalf("index.ts has the published mcp block %d times, want once", n)
	}
	f, err := os.CreateTemp(js, ".quickstart-offline-*.ts")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.WriteString(strings.Replace(string(b), published, offline, 1)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return filepath.Base(f.Name())
}

// runScript runs `tsx SCRIPT` (what the page's `npx tsx index.ts` runs)
// in the JS package, inside the server's network namespace, with env as
// its whole environment; it fails the test only when node cannot run or
// times out.
func runScript(t *testing.T, srv *hutchtest.Server, js string, env []string, script string) hutchtest.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	cmd := srv.NetnsCommand(filepath.Join(js, "node_modules", ".bin", "tsx"), script)
	cmd.Dir, cmd.Env = js, env
	// tsx runs the script in a child node: kill the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		t.Fatalf("tsx %s timed out after %v\nstdout:\n%s\nstderr:\n%s", script, nodeTimeout, &stdout, &stderr)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("tsx %s: %v", script, err)
	}
	r := hutchtest.Finished(t, cmd, err, stdout.String(), stderr.String())
	t.Logf("tsx %s: exit %d in %v\nstdout:\n%s\nstderr:\n%s", script, r.Code, time.Since(start).Round(time.Millisecond), r.Stdout, r.Stderr)
	return r
}

// report is what inspect.mjs found before the script killed the sandbox.
type report struct {
	SandboxID  string    `json:"sandboxId"`
	MCPURL     string    `json:"mcpUrl"`
	MCPToken   string    `json:"mcpToken"`
	Whoami     string    `json:"whoami"`
	MCPList    cmdResult `json:"mcpList"`
	ClaudeJSON string    `json:"claudeJson"`
	Initialize mcpReply  `json:"initialize"`
	ToolsList  mcpReply  `json:"toolsList"`
	NoToken    mcpReply  `json:"noToken"`
	Error      string    `json:"error"`
}

type cmdResult struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

type mcpReply struct {
	Status  int             `json:"status"`
	Message json.RawMessage `json:"message"`
}

func readReport(t *testing.T, path string) report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("inspect.mjs wrote no report (did the script reach sbx.kill()?): %v", err)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("inspect.mjs report: %v\n%s", err, b)
	}
	return r
}

// claudeServer is an entry of mcpServers in ~/.claude.json.
type claudeServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// checkReport checks what the quick start printed and what inspect.mjs
// found against the sandbox's gateway URL and token.
func checkReport(t *testing.T, rep report, stdout string) {
	t.Helper()
	wantURL := "https://50005-" + rep.SandboxID + "." + domain + "/mcp"
	if rep.SandboxID == "" || rep.MCPURL != wantURL || rep.MCPToken == "" {
		t.Fatalf("betaGetMcpUrl() = %q (sandbox %q, token %q), want %q", rep.MCPURL, rep.SandboxID, rep.MCPToken, wantURL)
	}
	for _, want := range []string{
		"MCP Gateway URL: " + wantURL,
		// claude's own words, from `claude mcp add`.
		"Added HTTP MCP server e2b-mcp-gateway with URL: " + wantURL,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the quick start's output lacks %q", want)
		}
	}

	// In the sandbox, as its user: claude lists the gateway (its health
	// check cannot reach the sandbox's public URL from inside; that is
	// not what is checked) and its configuration holds URL and token.
	if rep.Whoami != "user\n/home/user\n" {
		t.Errorf("commands ran as %q, want user with HOME /home/user", rep.Whoami)
	}
	if rep.MCPList.ExitCode != 0 || !strings.Contains(rep.MCPList.Stdout, "e2b-mcp-gateway: "+wantURL+" (HTTP)") {
		t.Errorf("claude mcp list does not list e2b-mcp-gateway at %s: %+v", wantURL, rep.MCPList)
	}
	var cfg struct {
		Projects map[string]struct {
			MCPServers map[string]claudeServer `json:"mcpServers"`
		} `json:"projects"`
	}
	if err := json.Unmarshal([]byte(rep.ClaudeJSON), &cfg); err != nil {
		t.Fatalf("/home/user/.claude.json: %v\n%s", err, rep.ClaudeJSON)
	}
	want := claudeServer{Type: "http", URL: wantURL, Headers: map[string]string{"Authorization": "Bearer " + rep.MCPToken}}
	if diff := cmp.Diff(want, cfg.Projects["/home/user"].MCPServers["e2b-mcp-gateway"]); diff != "" {
		t.Errorf("/home/user/.claude.json projects[/home/user].mcpServers[e2b-mcp-gateway] (-want +got):\n%s", diff)
	}

	// From outside, with the token: initialize and tools/list.
	var init struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
			ServerInfo      struct {
				Name string `json:"name"`
			} `json:"serverInfo"`
		} `json:"result"`
	}
	if err := json.Unmarshal(rep.Initialize.Message, &init); rep.Initialize.Status != 200 || err != nil || init.Result.ProtocolVersion == "" || init.Result.ServerInfo.Name == "" {
		t.Errorf("initialize at %s: status %d, %s", wantURL, rep.Initialize.Status, rep.Initialize.Message)
	}
	var list struct {
		Result struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"result"`
	}
	if err := json.Unmarshal(rep.ToolsList.Message, &list); rep.ToolsList.Status != 200 || err != nil {
		t.Fatalf("tools/list at %s: status %d, %.500s", wantURL, rep.ToolsList.Status, rep.ToolsList.Message)
	}
	var names []string
	for _, tool := range list.Result.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"memory__create_entities", "memory__read_graph", "sequentialThinking__sequentialthinking"} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s; has %v", want, names)
		}
	}
	if rep.NoToken.Status != 401 {
		t.Errorf("initialize without the token: status %d, want 401: %s", rep.NoToken.Status, rep.NoToken.Message)
	}
}
