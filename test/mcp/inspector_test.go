package mcp

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// inspector runs the MCP Inspector's CLI (`mcp-inspector --cli`, the bin
// of @modelcontextprotocol/inspector) with a HOME of its own (it writes
// ~/.mcp-inspector) and returns its run.
func (f *fixture) inspector(t *testing.T, args ...string) nodeRun {
	t.Helper()
	cli := filepath.Join(f.js, "node_modules", ".bin", "mcp-inspector")
	return f.node(t, "", []string{"HOME=" + t.TempDir()}, append([]string{cli, "--cli"}, args...)...)
}

// inspectorResult is the Inspector's --format json output.
type inspectorResult struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// inspectorOK runs the Inspector, wants exit 0 and a result, and returns
// the result.
func (f *fixture) inspectorOK(t *testing.T, args ...string) json.RawMessage {
	t.Helper()
	r := f.inspector(t, args...)
	if r.Code != 0 {
		t.Fatalf("mcp-inspector --cli %s: %s", strings.Join(args, " "), r)
	}
	var out inspectorResult
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.Result == nil {
		t.Fatalf("mcp-inspector --cli %s: no JSON result (%v): %s", strings.Join(args, " "), err, r)
	}
	// Its stderr is status and, with --strict, a schema portability report
	// ending in a count of errors and warnings: log that line.
	if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); lines[len(lines)-1] != "" {
		t.Logf("mcp-inspector: %s", lines[len(lines)-1])
	}
	return out.Result
}

// checkToolList checks an Inspector tools/list result: every tool, each
// with a description and an object input schema.
func checkToolList(t *testing.T, via string, result json.RawMessage) {
	t.Helper()
	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			InputSchema map[string]any `json:"inputSchema"`
			Annotations map[string]any `json:"annotations"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(result, &list); err != nil {
		t.Fatalf("%s: tools/list: %v\n%s", via, err, result)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema["type"] != "object" || tool.Annotations == nil {
			t.Errorf("%s: tool %s lacks a description, object inputSchema or annotations: %+v", via, tool.Name, tool)
		}
	}
	for _, want := range allTools {
		if !slices.Contains(names, want) {
			t.Errorf("%s: tools/list lacks %s; has %v", via, want, names)
		}
	}
}

// allTools are 27 of the 29 tools of `hutch mcp` (as test/mcp/js/lib.mjs
// TOOLS): the code interpreter's two, run_code and create_code_context,
// need a code-interpreter-v1 sandbox and are driven by test/sdk
// TestMCPRunCode.
var allTools = []string{
	"sandbox_create", "sandbox_connect", "sandbox_kill", "sandbox_get_info", "sandbox_list",
	"sandbox_renew", "sandbox_healthcheck", "sandbox_get_metrics", "sandbox_get_endpoint",
	"sandbox_pause", "sandbox_resume", "sandbox_snapshot", "sandbox_fork",
	"command_run", "command_start", "command_output", "command_interrupt",
	"file_read", "file_write", "file_delete", "file_list", "file_search",
	"file_create_directories", "file_delete_directories", "file_move",
	"file_replace_contents", "file_edit",
}

// toolResult is a tools/call result.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func decodeToolResult(t *testing.T, raw json.RawMessage) toolResult {
	t.Helper()
	var r toolResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("tools/call result: %v\n%s", err, raw)
	}
	if r.IsError {
		t.Fatalf("tools/call returned isError: %s", raw)
	}
	if len(r.Content) == 0 || r.Content[0].Type != "text" {
		t.Errorf("tools/call result has no text content: %s", raw)
	}
	return r
}

// TestInspectorCLI: the MCP Inspector's headless CLI lists the tools of
// `hutch mcp` over stdio (configured by -e HUTCH_API_URL/HUTCH_API_KEY)
// and over HTTP (bearer key in --header), with --strict schema checks,
// and calls tools over both; a wrong key is refused.
func TestInspectorCLI(t *testing.T) {
	f := newFixture(t)
	m := f.startHTTP(t)
	stdio := []string{"-e", "HUTCH_API_URL=" + f.srv.URL(), "-e", "HUTCH_API_KEY=" + hutchtest.TestKey}
	stdioCmd := []string{"--", f.bin, "mcp", "--transport", "stdio"}
	// --stored-auth-only: never start an interactive OAuth login.
	bearer := []string{m.URL, "--header", "Authorization: Bearer " + hutchtest.TestKey, "--stored-auth-only"}

	// tools/list, both ways, in both protocol eras (legacy: initialize and
	// 2025-11-25; modern: 2026-07-28, stateless); --strict exits 6 on a
	// schema portability error.
	for _, era := range []string{"legacy", "modern"} {
		checkToolList(t, "stdio "+era, f.inspectorOK(t, append(append(stdio, "--protocol-era", era, "--method", "tools/list", "--format", "json", "--strict"), stdioCmd...)...))
		checkToolList(t, "http "+era, f.inspectorOK(t, append(bearer, "--protocol-era", era, "--method", "tools/list", "--format", "json", "--strict")...))
	}

	// tools/call: make a sandbox over stdio, find it over HTTP, kill it.
	created := decodeToolResult(t, f.inspectorOK(t, append(append(stdio, "--method", "tools/call", "--tool-name", "sandbox_create",
		"--tool-args-json", `{"metadata":{"via":"inspector"}}`, "--format", "json"), stdioCmd...)...))
	var sbx struct {
		SandboxID string `json:"sandbox_id"`
	}
	if err := json.Unmarshal(created.StructuredContent, &sbx); err != nil || sbx.SandboxID == "" {
		t.Fatalf("sandbox_create: no sandbox_id (%v): %s", err, created.StructuredContent)
	}
	for _, era := range []string{"legacy", "modern"} {
		listed := decodeToolResult(t, f.inspectorOK(t, append(bearer, "--protocol-era", era, "--method", "tools/call", "--tool-name", "sandbox_list", "--format", "json")...))
		var list struct {
			Sandboxes []struct {
				SandboxID string            `json:"sandbox_id"`
				Metadata  map[string]string `json:"metadata"`
			} `json:"sandboxes"`
		}
		if err := json.Unmarshal(listed.StructuredContent, &list); err != nil {
			t.Fatalf("sandbox_list: %v: %s", err, listed.StructuredContent)
		}
		found := false
		for _, s := range list.Sandboxes {
			found = found || (s.SandboxID == sbx.SandboxID && s.Metadata["via"] == "inspector")
		}
		if !found {
			t.Errorf("sandbox_list over HTTP (%s era) lacks %s (metadata via=inspector): %s", era, sbx.SandboxID, listed.StructuredContent)
		}
	}
	decodeToolResult(t, f.inspectorOK(t, append(bearer, "--method", "tools/call", "--tool-name", "sandbox_kill",
		"--tool-arg", "sandbox_id="+sbx.SandboxID, "--format", "json")...))

	// A tool error is the Inspector's tool_is_error (exit 5), not a crash.
	r := f.inspector(t, append(bearer, "--method", "tools/call", "--tool-name", "sandbox_get_info",
		"--tool-arg", "sandbox_id="+sbx.SandboxID, "--format", "json")...)
	if r.Code != 5 || !strings.Contains(r.Stderr, "tool_is_error") {
		t.Errorf("sandbox_get_info of a killed sandbox: want the Inspector's exit 5 (tool_is_error): %s", r)
	}

	// A wrong key: refused, which the Inspector reports as auth_required
	// (exit 3).
	r = f.inspector(t, m.URL, "--header", "Authorization: Bearer e2b_"+strings.Repeat("0", 40), "--stored-auth-only", "--method", "tools/list", "--format", "json")
	if r.Code != 3 {
		t.Errorf("tools/list with a wrong key: want the Inspector's exit 3 (auth_required): %s", r)
	}
}
