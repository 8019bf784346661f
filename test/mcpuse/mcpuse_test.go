// Package mcpuse runs mcp-use's SandboxConnector (Python, from PyPI,
// pinned in requirements.txt) unmodified against a real `hutch serve`, as
// a remote user meets it: TLS on a domain, the SDK finding it by
// E2B_DOMAIN alone (e2b 1.x, the only one the connector works with,
// knows no other way). The connector starts a `base` sandbox, runs `npx
// -y supergateway ... --stdio "npx -y @modelcontextprotocol/server-memory"`
// in it, with no network (the template has them installed), and speaks
// legacy SSE to https://3000-<id>.<domain>.
package mcpuse

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, hutchBin) }

// scriptTimeout bounds connector.py: a sandbox, supergateway's start
// (the connector waits up to 30 s for it), four MCP requests, cleanup.
const scriptTimeout = 3 * time.Minute

// result is the line connector.py prints.
type result struct {
	Sandbox string   `json:"sandbox"`
	Tools   []string `json:"tools"`
	Graph   struct {
		Entities []struct {
			Name         string   `json:"name"`
			EntityType   string   `json:"entityType"`
			Observations []string `json:"observations"`
		} `json:"entities"`
	} `json:"graph"`
}

// TestSandboxConnector lists server-memory's tools through the
// connector, creates an entity and reads the graph back (one server
// process behind supergateway keeps it), closes, and checks through the
// API that the connector's sandbox is gone.
func TestSandboxConnector(t *testing.T) {
	testenv.RequireRoot(t, "hutch serve runs sandboxes: namespaces, cgroups and mounts")
	python := hutchtest.PythonVenv(t, "requirements.txt")
	s := hutchtest.StartDomainServe(t, hutchBin.Path(t), hutchtest.DomainTestDomain)

	cmd := s.NetnsCommand(python, "connector.py")
	cmd.Env = append(hutchtest.CleanEnv(s.DomainEnv()...),
		// mcp-use reports usage to PostHog and Scarf unless told not to
		// (there is no network here to reach them anyway).
		"MCP_USE_ANONYMIZED_TELEMETRY=false")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(scriptTimeout, func() { cmd.Process.Kill() })
	defer timer.Stop()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("connector.py: %v (the base template must come from this checkout's recipe, with supergateway: hutch template build base)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var got result
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("connector.py's last line: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}

	wantTools := []string{"add_observations", "create_entities", "create_relations", "delete_entities",
		"delete_observations", "delete_relations", "open_nodes", "read_graph", "search_nodes"}
	if diff := cmp.Diff(wantTools, got.Tools); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if len(got.Graph.Entities) != 1 || got.Graph.Entities[0].Name != "hutch" ||
		got.Graph.Entities[0].EntityType != "sandbox" || !cmp.Equal(got.Graph.Entities[0].Observations, []string{"speaks E2B"}) {
		t.Errorf("read_graph after create_entities = %+v, want the one entity hutch (sandbox, [speaks E2B])", got.Graph)
	}
	if got.Sandbox == "" {
		t.Fatal("connector.py named no sandbox")
	}

	// Closing killed the sandbox: the API no longer knows it.
	req, _ := http.NewRequest("GET", s.URL()+"/sandboxes/"+got.Sandbox, nil)
	req.Header.Set("X-API-KEY", hutchtest.TestKey)
	resp, err := s.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /sandboxes/%s after the connector closed: %s, want 404", got.Sandbox, resp.Status)
	}
	if ids := s.APISandboxes(); len(ids) != 0 {
		t.Errorf("sandboxes left running after the connector closed: %v", ids)
	}
}
