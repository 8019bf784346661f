package opensandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// mcpSide is one MCP server the table runs against, with the values its
// calls made (sandbox ids, an execution id, the expiry at creation), which
// later calls use and the comparison names rather than compares.
type mcpSide struct {
	name string
	cs   *mcp.ClientSession
	vals map[string]string
}

// mcpResult is what a tool call returned.
type mcpResult struct {
	out   map[string]any // the structured content
	text  string
	isErr bool
}

// mcpRow is one tool call, made through each server in turn.
type mcpRow struct {
	name string
	tool string
	args func(v map[string]string) map[string]any
	// isError: the call must fail (an isError result).
	isError bool
	// check judges one server's result as a user would, and may keep
	// values in v for later rows.
	check func(t *testing.T, v map[string]string, r mcpResult)
	// notYet, when set, says the answer is well formed but the effect
	// it looks for has not landed yet (it lands after the call that
	// caused it): the call is repeated while it says so.
	notYet func(r mcpResult) bool
	// mask are keys whose values differ from call to call by nature
	// (an execution's id); sorted are arrays whose order is not part of
	// the answer.
	mask, sorted []string
	// defaults are files (below the side's directory) whose owner, group
	// and mode the calls that made them left to the server: the servers'
	// defaults differ there (opensandbox-mcp's execd writes as root, mode
	// 755; hutch mcp as the sandbox's user, as E2B's API does; see
	// docs/mcp.md), so neither is compared.
	defaults []string
}

// testMCP makes every call of opensandbox-mcp's 19 tools through
// opensandbox-mcp (PyPI, pinned, over stdio) and through `hutch mcp` (the
// binary's MCP server over stdio) with opensandbox-mcp's parameters: both
// in the suite's network namespace, against its server, each on sandboxes of its own. Each result is
// checked as a user would check it, and hutch mcp's must hold everything
// opensandbox-mcp's does, equal after ids, tokens and times are
// normalised.
func (s *suite) testMCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	osbCmd := s.ns.Command(s.python, "-m", "opensandbox_mcp")
	osbCmd.Env = s.clientEnv()
	hutchCmd := s.ns.Command(s.srv.Bin, "mcp", "--api-url", s.srv.URL(), "--api-key", hutchtest.TestKey)
	hutchCmd.Env = hutchtest.CleanEnv()
	var sides []*mcpSide
	for _, c := range []struct {
		name string
		cmd  *exec.Cmd
	}{{"opensandbox-mcp", osbCmd}, {"hutch mcp", hutchCmd}} {
		stderr := hutchtest.LogWriter(t, c.name+": ")
		c.cmd.Stderr = stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "osbtest", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: c.cmd, TerminateDuration: 5 * time.Second}, nil)
		if err != nil {
			stderr.Close()
			t.Fatalf("%s: %v", c.name, err)
		}
		// The server ends with the session; its last lines are logged.
		t.Cleanup(func() { cs.Close(); stderr.Close() })
		tag := unique("mcp")
		sides = append(sides, &mcpSide{name: c.name, cs: cs, vals: map[string]string{
			"tag": tag, "dir": "/tmp/osb-" + tag, "e2b": s.e2bCreate(t, map[string]string{"osbtest-e2b": tag, "made": "e2b"}),
		}})
	}

	// The 19 tools, all of them in the table.
	tools, err := sides[0].cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	rows := s.mcpRows()
	var covered []string
	for _, r := range rows {
		if !slices.Contains(covered, r.tool) {
			covered = append(covered, r.tool)
		}
	}
	sort.Strings(covered)
	if len(names) != 19 || !slices.Equal(names, covered) {
		t.Errorf("opensandbox-mcp's tools %v (%d), the table calls %v", names, len(names), covered)
	}

	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			results := make([]mcpResult, len(sides))
			for i, side := range sides {
				args := row.args(side.vals)
				r := callTool(ctx, t, side, row.tool, args)
				for deadline := time.Now().Add(time.Minute); row.notYet != nil && row.notYet(r) && time.Now().Before(deadline); {
					time.Sleep(100 * time.Millisecond)
					r = callTool(ctx, t, side, row.tool, args)
				}
				results[i] = r
				switch {
				case row.isError && !r.isErr:
					t.Errorf("%s: %s succeeded (%v), want an error", side.name, row.tool, r.out)
				case !row.isError && r.isErr:
					t.Errorf("%s: %s failed: %s", side.name, row.tool, r.text)
				case row.check != nil:
					t.Run(side.name, func(t *testing.T) { row.check(t, side.vals, r) })
				}
			}
			if row.isError {
				return
			}
			// hutch mcp's answer holds opensandbox-mcp's.
			want := normalize(results[0].out, sides[0].vals, row)
			got := normalize(results[1].out, sides[1].vals, row)
			if diffs := subset("", want, got); len(diffs) > 0 {
				w, _ := json.Marshal(want)
				g, _ := json.Marshal(got)
				t.Errorf("hutch mcp's %s differs from opensandbox-mcp's:\n%s\nopensandbox-mcp: %s\nhutch mcp:       %s", row.tool, strings.Join(diffs, "\n"), w, g)
			}
		})
	}

	// Killed through MCP: gone from E2B's API too.
	for _, side := range sides {
		for _, k := range []string{"sbx", "img", "e2b"} {
			if id := side.vals[k]; id != "" {
				if st := s.e2bStatus(t, id); st != 404 {
					t.Errorf("%s: E2B's GET /sandboxes/%s (%s) after sandbox_kill: %d, want 404", side.name, id, k, st)
				}
			}
		}
	}
}

// mcpRows is the table: a sandbox's life through the 19 tools.
func (s *suite) mcpRows() []mcpRow {
	sbx := func(extra map[string]any) func(v map[string]string) map[string]any {
		return func(v map[string]string) map[string]any {
			args := map[string]any{"sandbox_id": v["sbx"]}
			for k, x := range extra {
				if str, ok := x.(string); ok {
					x = strings.ReplaceAll(str, "$DIR", v["dir"])
				}
				args[k] = x
			}
			return args
		}
	}
	dirArgs := func(f func(d string) map[string]any) func(v map[string]string) map[string]any {
		return func(v map[string]string) map[string]any {
			args := f(v["dir"])
			args["sandbox_id"] = v["sbx"]
			return args
		}
	}
	run := func(command string, stdout, stderr []string, exit int) mcpRow {
		return mcpRow{tool: "command_run", args: sbx(map[string]any{"command": command}), mask: []string{"id"},
			check: wantExecution(stdout, stderr, exit)}
	}
	named := func(name string, r mcpRow) mcpRow { r.name = name; return r }
	status := func(want string) func(t *testing.T, v map[string]string, r mcpResult) {
		return func(t *testing.T, v map[string]string, r mcpResult) {
			if r.out["status"] != want {
				t.Errorf("status %v, want %q", r.out["status"], want)
			}
		}
	}
	content := func(want string) func(t *testing.T, v map[string]string, r mcpResult) {
		return func(t *testing.T, v map[string]string, r mcpResult) {
			if r.out["content"] != want {
				t.Errorf("content %q, want %q", r.out["content"], want)
			}
		}
	}
	// found checks a search found the files rel (below the side's
	// directory), and that m.txt, written with a mode, has it and root's
	// owner and group (the other files' are the servers' defaults).
	found := func(rel ...string) func(t *testing.T, v map[string]string, r mcpResult) {
		return func(t *testing.T, v map[string]string, r mcpResult) {
			var want, got []string
			for _, p := range rel {
				want = append(want, v["dir"]+p)
			}
			for _, e := range list(r.out["result"]) {
				got = append(got, str(e, "path"))
				if str(e, "path") == v["dir"]+"/m.txt" && (num(e, "mode") != 640 || str(e, "owner") != "root" || str(e, "group") != "root") {
					t.Errorf("m.txt: %v, want mode 640, owner and group root", e)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("found %q, want %q", got, want)
			}
		}
	}
	return []mcpRow{
		{name: "create from a template", tool: "sandbox_create",
			args: func(v map[string]string) map[string]any {
				return map[string]any{"image": template, "timeout_seconds": 300, "env": map[string]string{"OSB_ENV": "from-mcp"},
					"metadata": map[string]string{"osbtest": v["tag"]}, "resource": map[string]string{"cpu": "1", "memory": "1Gi"}}
			},
			check: func(t *testing.T, v map[string]string, r mcpResult) {
				v["sbx"], v["expires"] = str(r.out, "sandbox_id"), str(r.out, "info", "expires_at")
				if v["sbx"] == "" || str(r.out, "info", "id") != v["sbx"] || str(r.out, "info", "status", "state") != "Running" ||
					str(r.out, "info", "metadata", "osbtest") != v["tag"] {
					t.Errorf("sandbox_create: %v; want a Running sandbox with osbtest=%s", r.out, v["tag"])
				}
			}},
		{name: "create from a registry's image", tool: "sandbox_create",
			args: func(v map[string]string) map[string]any {
				return map[string]any{"image": s.image, "timeout_seconds": 300, "metadata": map[string]string{"osbtest": v["tag"]}}
			},
			check: func(t *testing.T, v map[string]string, r mcpResult) {
				v["img"] = str(r.out, "sandbox_id")
				if v["img"] == "" || str(r.out, "info", "status", "state") != "Running" || str(r.out, "info", "image", "image") != s.image {
					t.Errorf("sandbox_create: %v; want a Running sandbox of %s", r.out, s.image)
				}
			}},
		{name: "info", tool: "sandbox_get_info", args: sbx(nil), check: func(t *testing.T, v map[string]string, r mcpResult) {
			if str(r.out, "id") != v["sbx"] || str(r.out, "status", "state") != "Running" || str(r.out, "image", "image") != template {
				t.Errorf("sandbox_get_info: %v; want %s Running of %s", r.out, v["sbx"], template)
			}
		}},
		{name: "list by metadata", tool: "sandbox_list", sorted: []string{"sandbox_infos"},
			args: func(v map[string]string) map[string]any {
				return map[string]any{"filter": map[string]any{"metadata": map[string]string{"osbtest": v["tag"]}}}
			},
			check: func(t *testing.T, v map[string]string, r mcpResult) {
				var ids []string
				for _, i := range list(r.out["sandbox_infos"]) {
					ids = append(ids, str(i, "id"))
				}
				sort.Strings(ids)
				want := []string{v["sbx"], v["img"]}
				sort.Strings(want)
				if !slices.Equal(ids, want) {
					t.Errorf("listed %v, want %v", ids, want)
				}
			}},
		{name: "healthcheck", tool: "sandbox_healthcheck", args: sbx(nil), check: func(t *testing.T, v map[string]string, r mcpResult) {
			if r.out["healthy"] != true || r.out["sandbox_id"] != v["sbx"] {
				t.Errorf("sandbox_healthcheck: %v, want healthy", r.out)
			}
		}},
		{name: "metrics", tool: "sandbox_get_metrics", args: sbx(nil), check: func(t *testing.T, v map[string]string, r mcpResult) {
			// The sandbox's own: the CPU and memory it was created with.
			if num(r.out, "cpu_count") != 1 || num(r.out, "memory_total_in_mib") != 1024 || num(r.out, "memory_used_in_mib") <= 0 {
				t.Errorf("sandbox_get_metrics: %v; want 1 CPU, 1024 MiB (the create's resource) and memory in use", r.out)
			}
		}},
		{name: "endpoint of execd", tool: "sandbox_get_endpoint", args: sbx(map[string]any{"port": 44772}), check: func(t *testing.T, v map[string]string, r mcpResult) {
			if ep := str(r.out, "endpoint"); !strings.Contains(ep, v["sbx"]) || !strings.Contains(ep, "44772") || str(r.out, "headers", "X-EXECD-ACCESS-TOKEN") == "" {
				t.Errorf("sandbox_get_endpoint: %v; want the sandbox's port 44772 and X-EXECD-ACCESS-TOKEN", r.out)
			}
		}},
		{name: "renew", tool: "sandbox_renew", args: sbx(map[string]any{"timeout_seconds": 1200}), check: func(t *testing.T, v map[string]string, r mcpResult) {
			old, err1 := time.Parse(time.RFC3339Nano, v["expires"])
			renewed, err2 := time.Parse(time.RFC3339Nano, str(r.out, "expires_at"))
			if err1 != nil || err2 != nil || !renewed.After(old) {
				t.Errorf("sandbox_renew: %v; want an expiry after %s", r.out, v["expires"])
			}
		}},
		named("run", run("echo hello; echo oops >&2; echo $OSB_ENV", []string{"hello", "from-mcp"}, []string{"oops"}, 0)),
		named("run with an exit code", run("echo before; exit 3", []string{"before"}, nil, 3)),
		{name: "run in a directory", tool: "command_run", args: sbx(map[string]any{"command": "pwd", "working_directory": "/tmp"}),
			mask: []string{"id"}, check: wantExecution([]string{"/tmp"}, nil, 0)},
		{name: "run in the background", tool: "command_run", mask: []string{"id"},
			args: sbx(map[string]any{"command": "echo $$ > /tmp/osb-bg.pid; exec sleep 600", "background": true}),
			check: func(t *testing.T, v map[string]string, r mcpResult) {
				if v["exec"] = str(r.out, "id"); v["exec"] == "" {
					t.Errorf("command_run in the background: %v, want an execution id", r.out)
				}
			}},
		{name: "interrupt", tool: "command_interrupt",
			args: func(v map[string]string) map[string]any {
				return map[string]any{"sandbox_id": v["sbx"], "execution_id": v["exec"]}
			},
			check: status("interrupted")},
		{name: "interrupted command is gone", tool: "command_run", mask: []string{"id"},
			args:   sbx(map[string]any{"command": "test -s /tmp/osb-bg.pid && ! kill -0 $(cat /tmp/osb-bg.pid) 2>/dev/null; echo $?"}),
			notYet: func(r mcpResult) bool { return stdout(r.out) == "1\n" }, check: wantExecution([]string{"0"}, nil, 0)},
		{name: "create directories", tool: "file_create_directories", check: status("created"),
			args: dirArgs(func(d string) map[string]any {
				return map[string]any{"entries": []map[string]any{{"path": d + "/sub", "mode": 755}}}
			})},
		{name: "write", tool: "file_write", args: sbx(map[string]any{"path": "$DIR/a.txt", "content": "alpha beta alpha\n"}), check: status("written")},
		{name: "write with a mode", tool: "file_write", args: sbx(map[string]any{"path": "$DIR/m.txt", "content": "mode\n", "mode": 640}), check: status("written")},
		{name: "read", tool: "file_read", args: sbx(map[string]any{"path": "$DIR/a.txt"}), check: content("alpha beta alpha\n")},
		{name: "read a range", tool: "file_read", args: sbx(map[string]any{"path": "$DIR/a.txt", "range_header": "bytes=0-4"}), check: content("alpha")},
		{name: "search", tool: "file_search", sorted: []string{"result"}, defaults: []string{"/a.txt"},
			args: sbx(map[string]any{"path": "$DIR", "pattern": "*.txt"}), check: found("/a.txt", "/m.txt")},
		{name: "move", tool: "file_move", check: status("moved"),
			args: dirArgs(func(d string) map[string]any {
				return map[string]any{"entries": []map[string]any{{"source": d + "/a.txt", "destination": d + "/sub/b.txt"}}}
			})},
		{name: "search after the move", tool: "file_search", sorted: []string{"result"}, defaults: []string{"/sub/b.txt"},
			args: sbx(map[string]any{"path": "$DIR", "pattern": "*.txt"}), check: found("/m.txt", "/sub/b.txt")},
		{name: "replace", tool: "file_replace_contents",
			args: dirArgs(func(d string) map[string]any {
				return map[string]any{"entries": []map[string]any{{"path": d + "/sub/b.txt", "old_content": "alpha", "new_content": "omega"}}}
			}),
			check: func(t *testing.T, v map[string]string, r mcpResult) {
				res := list(r.out["result"])
				if len(res) != 1 || str(res[0], "path") != v["dir"]+"/sub/b.txt" || num(res[0], "replaced_count") != 2 {
					t.Errorf("file_replace_contents: %v; want 2 replaced in %s/sub/b.txt", r.out, v["dir"])
				}
			}},
		{name: "read after the replace", tool: "file_read", args: sbx(map[string]any{"path": "$DIR/sub/b.txt"}), check: content("omega beta omega\n")},
		{name: "delete a file", tool: "file_delete", args: dirArgs(func(d string) map[string]any {
			return map[string]any{"paths": []string{d + "/sub/b.txt"}}
		}), check: status("deleted")},
		{name: "read a deleted file", tool: "file_read", args: sbx(map[string]any{"path": "$DIR/sub/b.txt"}), isError: true},
		{name: "delete directories", tool: "file_delete_directories", args: dirArgs(func(d string) map[string]any {
			return map[string]any{"paths": []string{d}}
		}), check: status("deleted")},
		named("directories are gone", mcpRow{tool: "command_run", args: sbx(map[string]any{"command": "test -e $DIR; echo $?"}), mask: []string{"id"},
			check: wantExecution([]string{"1"}, nil, 0)}),
		{name: "read a host file through ../", tool: "file_read", args: sbx(map[string]any{"path": "/../../../.." + s.secret}), isError: true,
			check: func(t *testing.T, v map[string]string, r mcpResult) {
				if strings.Contains(r.text, s.secretText) {
					t.Errorf("the host's file reached the client: %s", r.text)
				}
			}},
		{name: "run in the image's sandbox", tool: "command_run", mask: []string{"id"},
			args: func(v map[string]string) map[string]any {
				return map[string]any{"sandbox_id": v["img"], "command": "cat /etc/osb-mark"}
			},
			check: wantExecution([]string{s.mark}, nil, 0)},
		{name: "connect to a sandbox made through E2B's API", tool: "sandbox_connect",
			args: func(v map[string]string) map[string]any { return map[string]any{"sandbox_id": v["e2b"]} },
			check: func(t *testing.T, v map[string]string, r mcpResult) {
				if str(r.out, "sandbox_id") != v["e2b"] || str(r.out, "info", "status", "state") != "Running" || str(r.out, "info", "metadata", "made") != "e2b" {
					t.Errorf("sandbox_connect: %v; want %s Running", r.out, v["e2b"])
				}
			}},
		{name: "run in the connected sandbox", tool: "command_run", mask: []string{"id"},
			args: func(v map[string]string) map[string]any {
				return map[string]any{"sandbox_id": v["e2b"], "command": "echo connected"}
			},
			check: wantExecution([]string{"connected"}, nil, 0)},
		{name: "info of an unknown sandbox", tool: "sandbox_get_info", isError: true,
			args: func(map[string]string) map[string]any { return map[string]any{"sandbox_id": "osbtest-no-such-sandbox"} }},
		{name: "kill", tool: "sandbox_kill", args: sbx(nil), check: status("killed")},
		{name: "kill the image's sandbox", tool: "sandbox_kill", check: status("killed"),
			args: func(v map[string]string) map[string]any { return map[string]any{"sandbox_id": v["img"]} }},
		{name: "kill the connected sandbox", tool: "sandbox_kill", check: status("killed"),
			args: func(v map[string]string) map[string]any { return map[string]any{"sandbox_id": v["e2b"]} }},
		{name: "info after the kill", tool: "sandbox_get_info", args: sbx(nil), isError: true},
	}
}

// callTool calls tool on side; a protocol error fails t (tools report
// their failures as results).
func callTool(ctx context.Context, t *testing.T, side *mcpSide, tool string, args map[string]any) mcpResult {
	t.Helper()
	res, err := side.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %s: protocol error: %v", side.name, tool, err)
	}
	var r mcpResult
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			r.text += tc.Text
		}
	}
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &r.out)
	r.isErr = res.IsError
	return r
}

// wantExecution checks a command_run's Execution: its output lines (however
// execd split them into messages) and exit code.
func wantExecution(stdout, stderr []string, exit int) func(t *testing.T, v map[string]string, r mcpResult) {
	return func(t *testing.T, v map[string]string, r mcpResult) {
		gotOut, gotErr := textLines(r.out, "stdout"), textLines(r.out, "stderr")
		if !slices.Equal(gotOut, stdout) || !slices.Equal(gotErr, stderr) || r.out["exit_code"] != float64(exit) {
			t.Errorf("stdout %q stderr %q exit %v; want %q %q %d\n%v", gotOut, gotErr, r.out["exit_code"], stdout, stderr, exit, r.out)
		}
	}
}

// stdout is an Execution's standard output, its messages joined.
func stdout(out map[string]any) string {
	var b strings.Builder
	for _, m := range list(get(out, "logs", "stdout")) {
		b.WriteString(str(m, "text"))
	}
	return b.String()
}

// textLines are the non-empty lines of an Execution's stdout or stderr.
func textLines(out map[string]any, stream string) []string {
	var lines []string
	for _, m := range list(get(out, "logs", stream)) {
		for _, l := range strings.Split(str(m, "text"), "\n") {
			if l != "" {
				lines = append(lines, l)
			}
		}
	}
	return lines
}

// volatile are keys whose values are the moment's (times, usage,
// tokens), or the client's: opensandbox-mcp's SDK gives a create
// without one the entrypoint ["tail", "-f", "/dev/null"], which a Hutch
// sandbox does not need.
var volatile = []string{"timestamp", "execution_time_in_millis", "execution_time", "cpu_used_percentage", "memory_used_in_mib",
	"X-EXECD-ACCESS-TOKEN", "created_at", "modified_at", "expires_at", "last_transition_at", "entrypoint"}

// normalize is out with what may differ between two servers' equal
// answers made equal: the values the side made (ids, its tag and
// directory) by their names, volatile keys and the row's masked keys as
// "<masked>" (present, whatever their value; null stays null, which
// subset does not require), the owner, group and mode of the row's
// files of default attributes masked too, the row's unordered arrays
// sorted, and an Execution's messages joined into one text per stream
// (execd may split output anywhere).
func normalize(out any, vals map[string]string, row mcpRow) any {
	var walk func(key string, x any) any
	walk = func(key string, x any) any {
		if x != nil && (slices.Contains(volatile, key) || slices.Contains(row.mask, key)) {
			return "<masked>"
		}
		switch x := x.(type) {
		case map[string]any:
			m := map[string]any{}
			for k, v := range x {
				m[k] = walk(k, v)
			}
			if p, ok := m["path"].(string); ok && slices.ContainsFunc(row.defaults, func(rel string) bool { return p == "<dir>"+rel }) {
				for _, k := range []string{"owner", "group", "mode"} {
					if m[k] != nil {
						m[k] = "<masked>"
					}
				}
			}
			return m
		case []any:
			if key == "stdout" || key == "stderr" {
				var b strings.Builder
				for _, msg := range x {
					b.WriteString(str(msg, "text"))
				}
				return walk("", b.String())
			}
			a := make([]any, len(x))
			for i, v := range x {
				a[i] = walk("", v)
			}
			if slices.Contains(row.sorted, key) {
				sort.Slice(a, func(i, j int) bool {
					bi, _ := json.Marshal(a[i])
					bj, _ := json.Marshal(a[j])
					return string(bi) < string(bj)
				})
			}
			return a
		case string:
			// Longest first: a directory holds its tag.
			keys := make([]string, 0, len(vals))
			for k := range vals {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return len(vals[keys[i]]) > len(vals[keys[j]]) })
			for _, k := range keys {
				if vals[k] != "" && k != "expires" {
					x = strings.ReplaceAll(x, vals[k], "<"+k+">")
				}
			}
			return x
		}
		return x
	}
	return walk("", out)
}

// subset lists where got does not hold want: every key of want's maps in
// got's with an equal value, arrays of the same length holding each other
// element by element, other values equal.
func subset(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v, want an object", orRoot(path), got)}
		}
		var diffs []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				if wv != nil {
					diffs = append(diffs, fmt.Sprintf("%s.%s: missing, want %v", path, k, wv))
				}
				continue
			}
			diffs = append(diffs, subset(path+"."+k, wv, gv)...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v, want %v", orRoot(path), got, want)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, subset(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return []string{fmt.Sprintf("%s: %v, want %v", orRoot(path), got, want)}
	}
	return nil
}

func orRoot(path string) string {
	if path == "" {
		return "(result)"
	}
	return path
}

// get is the value at keys in nested objects, nil when absent.
func get(x any, keys ...string) any {
	for _, k := range keys {
		m, ok := x.(map[string]any)
		if !ok {
			return nil
		}
		x = m[k]
	}
	return x
}

// str is the string at keys, "" when absent or not a string.
func str(x any, keys ...string) string {
	s, _ := get(x, keys...).(string)
	return s
}

// num is the number at keys, 0 when absent or not a number.
func num(x any, keys ...string) float64 {
	n, _ := get(x, keys...).(float64)
	return n
}

// list is the array x, nil when it is not one.
func list(x any) []any {
	a, _ := x.([]any)
	return a
}
