package remotecli

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPStdio: `hutch mcp` started by the official Go SDK's command
// transport, as an MCP client configuration starts it, runs a sandbox's
// life through its tools; a failing call is a result, not the end of the
// session; closing stdin ends the server.
func TestMCPStdio(t *testing.T) {
	f := newFixture(t)
	cmd := exec.Command(f.bin, append([]string{"mcp"}, f.flags()...)...)
	cmd.Env = f.env
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := cs.InitializeResult(); v == nil || v.ServerInfo.Name != "hutch" {
		t.Fatalf("server info = %+v", v)
	}
	call := func(tool string, args map[string]any) (map[string]any, string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: protocol error %v", tool, err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		var out map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		return out, text.String(), res.IsError
	}
	made, text, failed := call("sandbox_create", map[string]any{"metadata": map[string]string{"suite": "mcp-stdio"}})
	id, _ := made["sandbox_id"].(string)
	if failed || id == "" {
		t.Fatalf("sandbox_create: %s", text)
	}
	t.Cleanup(func() { f.hutch(t, "", "sandbox", "kill", id) })
	if out, text, failed := call("command_run", map[string]any{"sandbox_id": id, "command": "python3 -c 'print(6*7)'"}); failed || out["stdout"] != "42\n" || out["exit_code"] != 0.0 {
		t.Errorf("command_run: %v %s", out, text)
	}
	if _, text, failed := call("file_read", map[string]any{"sandbox_id": id, "path": "/no/such/file"}); !failed || !strings.Contains(text, "no such file") {
		t.Errorf("file_read of a missing file: isError %v, %q", failed, text)
	}
	// The session goes on after a failed call; the CLI sees what MCP made.
	if ls := f.ok(t, "sandbox", "ls", "-q", "--metadata", "hutch.mcp=true"); strings.TrimSpace(ls) != id {
		t.Errorf("hutch sandbox ls --metadata hutch.mcp=true = %q, want %s", ls, id)
	}
	if _, text, failed := call("sandbox_kill", map[string]any{"sandbox_id": id}); failed {
		t.Errorf("sandbox_kill: %s", text)
	}
	if _, text, failed := call("sandbox_get_info", map[string]any{"sandbox_id": id}); !failed || !strings.Contains(text, "not found") {
		t.Errorf("sandbox_get_info after kill: isError %v, %q", failed, text)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if cmd.ProcessState == nil || !cmd.ProcessState.Exited() || cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("hutch mcp after stdin closed: %v", cmd.ProcessState)
	}
}
