package platform

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/sdk"
)

// The tools in OpenSandbox's shape (opensandbox-mcp 1.1.1's arguments)
// against the same tools in Hutch's: the same effect on the sandbox,
// checked in the sandbox, and OpenSandbox's results.

// toolCall is one tool call; "{d}" in its string arguments is the
// directory of the shape under test.
type toolCall struct {
	tool string
	args map[string]any
}

// inDir replaces "{d}" with dir in every string of v, at any depth.
func inDir(v any, dir string) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, "{d}", dir)
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			out[k] = inDir(e, dir)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = inDir(e, dir)
		}
		return out
	case []string:
		out := make([]string, len(v))
		for i, e := range v {
			out[i] = strings.ReplaceAll(e, "{d}", dir)
		}
		return out
	}
	return v
}

// inRel replaces "{rel}" with rel, the directory relative to
// /home/user, in the top-level strings of args.
func inRel(args map[string]any, rel string) map[string]any {
	out := map[string]any{}
	for k, v := range args {
		if s, ok := v.(string); ok {
			v = strings.ReplaceAll(s, "{rel}", rel)
		}
		out[k] = v
	}
	return out
}

// structured decodes a result's structured content into a map.
func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return out
}

// inSandbox runs a shell command in the sandbox as root and returns its
// standard output; it fails the test if the command fails.
func inSandbox(t *testing.T, sbx *sdk.Sandbox, cmd string) string {
	t.Helper()
	res, err := sbx.Commands.Run(context.Background(), cmd, &sdk.RunOptions{User: "root", Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("%s: %v (%+v)", cmd, err, res)
	}
	return res.Stdout
}

// rootFile makes {d}/t a sticky directory anyone may write in, holding
// a file of root's.
const rootFile = "mkdir -m 1777 {d}/t && echo old > {d}/t/f && chmod 600 {d}/t/f"

// TestOpenSandboxShapeSameEffect calls each file and command tool in
// Hutch's shape in one directory and in OpenSandbox's in another, from
// the same start, and checks both directories come out as they should:
// alike, and as the check command expects.
func TestOpenSandboxShapeSameEffect(t *testing.T) {
	h := newHutch(t)
	cs := h.session(t, h.keyA)
	id := ok[SandboxInfo](t, cs, "sandbox_create", map[string]any{"timeout_seconds": 900}).SandboxID
	c, err := sdk.NewClient(sdk.Config{APIURL: h.url, APIKey: h.keyA})
	if err != nil {
		t.Fatal(err)
	}
	sbx, err := c.Connect(context.Background(), id, sdk.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name  string
		setup string // shell, run in the directory first
		hutch []toolCall
		osb   []toolCall
		check string // shell, run in the directory after: its output must be want, for both shapes
		want  string
		// osbResult, if set, is the last OpenSandbox call's structured
		// result.
		osbResult map[string]any
	}{{
		name:      "file_write text",
		hutch:     []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "héllo\n"}}},
		osb:       []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "héllo\n", "encoding": "utf-8", "mode": 644}}},
		check:     "cat f; stat -c %a f",
		want:      "héllo\n644\n",
		osbResult: map[string]any{"status": "written", "path": "{d}/f", "bytes": 7.0},
	}, {
		name:  "file_write mode, owner and group",
		hutch: []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x"}}, {"command_run", map[string]any{"command": "chown root:root {d}/f && chmod 600 {d}/f", "user": "root"}}},
		osb:   []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x", "mode": 600, "owner": "root", "group": "root"}}},
		check: "stat -c '%a %U %G' f",
		want:  "600 root root\n",
	}, {
		name:  "file_write in OpenSandbox's shape makes 755 root:root by default, as its execd does",
		hutch: []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x"}}, {"command_run", map[string]any{"command": "chown root:root {d}/f && chmod 755 {d}/f", "user": "root"}}},
		osb:   []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x", "encoding": "utf-8"}}},
		check: "stat -c '%a %U %G' f",
		want:  "755 root root\n",
	}, {
		name:  "file_write in OpenSandbox's shape with an owner and no group",
		hutch: []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x"}}, {"command_run", map[string]any{"command": "chown user:root {d}/f && chmod 640 {d}/f", "user": "root"}}},
		osb:   []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x", "owner": "user", "mode": 640}}},
		check: "stat -c '%a %U %G' f",
		want:  "640 user root\n",
	}, {
		name:  "file_write in neither shape writes as the sandbox's default user",
		hutch: []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x"}}},
		osb:   []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "x"}}},
		check: "stat -c '%a %U %G' f",
		want:  "644 user user\n",
	}, {
		// Root's file in a sticky directory, a path relative to the
		// default user's home, and nothing left beside the file.
		name: "file_write in OpenSandbox's shape over a file of root's in a sticky directory",
		hutch: []toolCall{{"command_run", map[string]any{"command": rootFile, "user": "root"}},
			{"command_run", map[string]any{"command": "echo new > {d}/t/f && chmod 755 {d}/t/f", "user": "root"}}},
		osb: []toolCall{{"command_run", map[string]any{"command": rootFile, "user": "root"}},
			{"file_write", map[string]any{"path": "{rel}/t/f", "content": "new\n", "mode": 755}}},
		check:     "cat t/f; stat -c '%a %U %G' t/f; ls -A t",
		want:      "new\n755 root root\nf\n",
		osbResult: map[string]any{"status": "written", "path": "{d}/t/f", "bytes": 4.0},
	}, {
		name:  "file_write latin-1",
		hutch: []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "6Q==", "encoding": "base64"}}},
		osb:   []toolCall{{"file_write", map[string]any{"path": "{d}/f", "content": "é", "encoding": "latin-1", "mode": 644}}},
		check: "od -An -tx1 f",
		want:  " e9\n",
	}, {
		name:  "file_delete",
		setup: "touch a b c",
		hutch: []toolCall{{"file_delete", map[string]any{"path": "{d}/a"}}, {"file_delete", map[string]any{"path": "{d}/b"}}},
		osb:   []toolCall{{"file_delete", map[string]any{"paths": []string{"{d}/a", "{d}/b"}}}},
		check: "ls", want: "c\n",
		osbResult: map[string]any{"status": "deleted"},
	}, {
		name:  "file_delete_directories",
		setup: "mkdir -p x/y y z && touch x/y/f",
		hutch: []toolCall{{"file_delete_directories", map[string]any{"path": "{d}/x"}}, {"file_delete_directories", map[string]any{"path": "{d}/y"}}},
		osb:   []toolCall{{"file_delete_directories", map[string]any{"paths": []string{"{d}/x", "{d}/y"}}}},
		check: "ls", want: "z\n",
		osbResult: map[string]any{"status": "deleted"},
	}, {
		name: "file_create_directories with modes and owners",
		hutch: []toolCall{{"file_create_directories", map[string]any{"path": "{d}/a/b"}}, {"file_create_directories", map[string]any{"path": "{d}/c"}},
			{"command_run", map[string]any{"command": "chmod 755 {d}/a/b && chown root {d}/c && chmod 700 {d}/c", "user": "root"}}},
		osb:   []toolCall{{"file_create_directories", map[string]any{"entries": []any{map[string]any{"path": "{d}/a/b"}, map[string]any{"path": "{d}/c", "mode": 700, "owner": "root"}}}}},
		check: "stat -c '%n %F %a %U' a/b c", want: "a/b directory 755 user\nc directory 700 root\n",
		osbResult: map[string]any{"status": "created"},
	}, {
		name:  "file_move",
		setup: "echo 1 > a && echo 2 > b",
		hutch: []toolCall{{"file_move", map[string]any{"source": "{d}/a", "destination": "{d}/n/a2"}}, {"file_move", map[string]any{"source": "{d}/b", "destination": "{d}/b2"}}},
		osb: []toolCall{{"file_move", map[string]any{"entries": []any{
			map[string]any{"source": "{d}/a", "destination": "{d}/n/a2"}, map[string]any{"src": "{d}/b", "dest": "{d}/b2"}}}}},
		check: "find . -type f | sort | xargs cat; find . -type f | sort", want: "2\n1\n./b2\n./n/a2\n",
		osbResult: map[string]any{"status": "moved"},
	}, {
		name:  "file_replace_contents",
		setup: "printf 'x=1\\nx=1\\n' > f && echo y > g",
		hutch: []toolCall{{"file_replace_contents", map[string]any{"path": "{d}/f", "old_text": "x=1", "new_text": "x=2"}}},
		osb: []toolCall{{"file_replace_contents", map[string]any{"entries": []any{
			map[string]any{"path": "{d}/f", "old_content": "x=1", "new_content": "x=2"}, map[string]any{"path": "{d}/g", "old_content": "zzz", "new_content": "q"}}}}},
		check: "cat f g", want: "x=2\nx=2\ny\n",
		osbResult: map[string]any{"result": []any{map[string]any{"path": "{d}/f", "replaced_count": 2.0}, map[string]any{"path": "{d}/g", "replaced_count": 0.0}}},
	}, {
		name:  "command_run in a directory",
		hutch: []toolCall{{"command_run", map[string]any{"command": "pwd > where; echo err >&2; exit 3", "cwd": "{d}"}}},
		osb:   []toolCall{{"command_run", map[string]any{"command": "pwd > where; echo err >&2; exit 3", "working_directory": "{d}"}}},
		check: "cat where | xargs basename", want: "{name}\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			results := map[string]map[string]any{}
			for _, shape := range []struct {
				name  string
				calls []toolCall
			}{{"hutch", tc.hutch}, {"osb", tc.osb}} {
				dir := fmt.Sprintf("/home/user/%s%d", shape.name, i)
				inSandbox(t, sbx, fmt.Sprintf("mkdir %s && cd %s && %s && chown -R user:user %s", dir, dir, cmpOr(tc.setup, "true"), dir))
				for _, call := range shape.calls {
					args := inDir(inRel(call.args, strings.TrimPrefix(dir, "/home/user/")), dir).(map[string]any)
					args["sandbox_id"] = id
					res := call0(t, cs, call.tool, args)
					results[shape.name] = structured(t, res)
				}
				want := strings.ReplaceAll(tc.want, "{name}", fmt.Sprintf("%s%d", shape.name, i))
				if got := inSandbox(t, sbx, "cd "+dir+" && "+tc.check); got != want {
					t.Errorf("%s shape: %s = %q, want %q", shape.name, tc.check, got, want)
				}
			}
			if tc.osbResult != nil {
				want := inDir(tc.osbResult, fmt.Sprintf("/home/user/osb%d", i))
				if d := cmp.Diff(want, results["osb"]); d != "" {
					t.Errorf("OpenSandbox's result (-want +got):\n%s", d)
				}
			}
		})
	}
}

// call0 calls a tool that must succeed.
func call0(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res := call(t, cs, tool, args)
	if res.IsError {
		t.Fatalf("%s(%v) failed: %s", tool, args, text(res))
	}
	return res
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestOpenSandboxShapeResults: what the tools answer to calls in
// OpenSandbox's shape, beside what Hutch's shape gets.
func TestOpenSandboxShapeResults(t *testing.T) {
	h := newHutch(t)
	cs := h.session(t, h.keyA)
	id := ok[SandboxInfo](t, cs, "sandbox_create", map[string]any{"timeout_seconds": 900}).SandboxID
	c, err := sdk.NewClient(sdk.Config{APIURL: h.url, APIKey: h.keyA})
	if err != nil {
		t.Fatal(err)
	}
	sbx, err := c.Connect(context.Background(), id, sdk.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inSandbox(t, sbx, "cd /home/user && seq 1 1000 > lines && head -c 20000000 /dev/zero | tr '\\0' a > big && printf 'caf\\xc3\\xa9' > utf && chown user lines big utf")

	t.Run("file_read", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args map[string]any
			want string
		}{
			{"whole", map[string]any{"path": "utf", "encoding": "utf-8"}, "café"},
			{"whole, latin-1", map[string]any{"path": "utf", "encoding": "latin-1"}, "cafÃ©"},
			{"first bytes", map[string]any{"path": "lines", "range_header": "bytes=0-5"}, "1\n2\n3\n"},
			{"from a byte on", map[string]any{"path": "lines", "range_header": "bytes=3884-"}, "999\n1000\n"},
			{"the last bytes", map[string]any{"path": "lines", "range_header": "bytes=-5"}, "1000\n"},
			{"past the end, cut", map[string]any{"path": "lines", "range_header": "bytes=3888-99999"}, "1000\n"},
			// 20 MB: more than file_read reads whole (10 MiB); the range
			// is all that is read.
			{"the end of a large file", map[string]any{"path": "big", "range_header": "bytes=19999990-19999999"}, "aaaaaaaaaa"},
			{"a range as base64", map[string]any{"path": "utf", "range_header": "bytes=3-4", "encoding": "base64"}, "w6k="},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tc.args["sandbox_id"] = id
				res := call0(t, cs, "file_read", tc.args)
				want := map[string]any{"path": tc.args["path"], "content": tc.want}
				if d := cmp.Diff(want, structured(t, res)); d != "" || text(res) != tc.want {
					t.Errorf("structured (-want +got):\n%s\ntext %q", d, text(res))
				}
			})
		}
		// Hutch's shape, for the same lines: text and line numbers.
		if res := call0(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "lines", "offset": 1, "limit": 3}); text(res) != "1\n2\n3\n" || structured(t, res)["content"] != nil {
			t.Errorf("Hutch's shape: %q %v", text(res), structured(t, res))
		}
		for _, tc := range []struct {
			args map[string]any
			want string
		}{
			{map[string]any{"path": "big", "encoding": "utf-8"}, "range_header"},
			{map[string]any{"path": "lines", "range_header": "bytes=5000-"}, "past the end"},
			{map[string]any{"path": "lines", "range_header": "bytes=0-1,5-6"}, "not a byte range"},
			{map[string]any{"path": "big", "range_header": "bytes=0-"}, "more than"},
			{map[string]any{"path": "utf", "range_header": "bytes=0-3"}, "not valid utf-8"},
			{map[string]any{"path": "lines", "encoding": "klingon"}, "encoding"},
		} {
			tc.args["sandbox_id"] = id
			fails(t, cs, "file_read", tc.args, tc.want)
		}
	})

	t.Run("command_run", func(t *testing.T) {
		res := structured(t, call0(t, cs, "command_run", map[string]any{"sandbox_id": id, "command": "echo out; echo err >&2; exit 3", "working_directory": "/tmp"}))
		logs, _ := res["logs"].(map[string]any)
		errInfo, _ := res["error"].(map[string]any)
		if res["exit_code"] != 3.0 || res["complete"] != nil || errInfo["name"] != "CommandExecError" || errInfo["value"] != "3" ||
			fmt.Sprint(logs["stdout"]) != fmt.Sprint([]any{map[string]any{"text": "out\n", "timestamp": logs["stdout"].([]any)[0].(map[string]any)["timestamp"]}}) ||
			!strings.Contains(fmt.Sprint(logs["stderr"]), "err\n") || res["stdout"] != nil {
			t.Errorf("a failing command in OpenSandbox's shape: %v", res)
		}
		res = structured(t, call0(t, cs, "command_run", map[string]any{"sandbox_id": id, "command": "true", "background": false}))
		if res["exit_code"] != 0.0 || res["complete"] == nil || res["error"] != nil {
			t.Errorf("a command that succeeds: %v", res)
		}
		// In the background, then interrupted by execution_id.
		res = structured(t, call0(t, cs, "command_run", map[string]any{"sandbox_id": id, "command": "sleep 300", "background": true}))
		cmdID, _ := res["id"].(string)
		if cmdID == "" || res["exit_code"] != nil || res["complete"] == nil {
			t.Fatalf("a background command: %v", res)
		}
		running := func() bool {
			procs, err := sbx.Commands.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return slices.ContainsFunc(procs, func(p sdk.ProcessInfo) bool { return p.Tag == tagOf(cmdID) })
		}
		if !running() {
			t.Fatal("the background command does not run")
		}
		if out := structured(t, call0(t, cs, "command_interrupt", map[string]any{"sandbox_id": id, "execution_id": cmdID})); out["status"] != "interrupted" {
			t.Errorf("command_interrupt = %v", out)
		}
		for deadline := time.Now().Add(10 * time.Second); running() && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		}
		if running() {
			t.Error("the background command runs on after command_interrupt")
		}
	})

	t.Run("file_search", func(t *testing.T) {
		inSandbox(t, sbx, "mkdir -p /home/user/s/d && touch /home/user/s/a.py /home/user/s/d/b.py /home/user/s/c.go && chmod 640 /home/user/s/a.py")
		res := structured(t, call0(t, cs, "file_search", map[string]any{"sandbox_id": id, "path": "/home/user/s", "pattern": "*.py"}))
		var got []string
		for _, e := range res["result"].([]any) {
			e := e.(map[string]any)
			got = append(got, fmt.Sprintf("%s %s %v %s", e["path"], e["type"], e["mode"], e["owner"]))
		}
		slices.Sort(got)
		want := []string{"/home/user/s/a.py file 640 root", "/home/user/s/d/b.py file 644 root"}
		if !slices.Equal(got, want) || len(res["matches"].([]any)) != 2 {
			t.Errorf("file_search: %v, want result %v and matches", res, want)
		}
	})

	t.Run("batches stop at the first failure", func(t *testing.T) {
		inSandbox(t, sbx, "mkdir -p /home/user/b/dir && touch /home/user/b/1 /home/user/b/2 && chown -R user /home/user/b")
		fails(t, cs, "file_delete", map[string]any{"sandbox_id": id, "paths": []string{"/home/user/b/1", "/home/user/b/dir", "/home/user/b/2"}}, "paths[1] (/home/user/b/dir)")
		if got := inSandbox(t, sbx, "ls /home/user/b"); got != "2\ndir\n" {
			t.Errorf("after a failed batch: %q, want the one before the failure deleted, the one after it kept", got)
		}
		fails(t, cs, "file_move", map[string]any{"sandbox_id": id, "entries": []any{map[string]any{"source": "/home/user/b/nothing", "destination": "/home/user/b/x"}}}, "entries[0]")
		fails(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "/home/user/b/m", "content": "x", "mode": 999}, "not a mode")
		// An owner the sandbox lacks leaves the file as it was.
		fails(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "/home/user/b/2", "content": "new", "owner": "nosuchuser"}, "nosuchuser")
		if got := inSandbox(t, sbx, "ls -A /home/user/b; cat /home/user/b/2"); got != "2\ndir\n" {
			t.Errorf("after a write for an unknown owner: %q, want the file as it was and nothing else", got)
		}
	})

	t.Run("one shape per thing", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{"file_delete", map[string]any{"path": "a", "paths": []string{"b"}}, "path and paths"},
			{"file_delete_directories", map[string]any{"path": "a", "paths": []string{"b"}}, "path and paths"},
			{"file_create_directories", map[string]any{"path": "a", "entries": []any{map[string]any{"path": "b"}}}, "path and entries"},
			{"file_move", map[string]any{"source": "a", "destination": "b", "entries": []any{}}, "entries"},
			{"file_move", map[string]any{"entries": []any{map[string]any{"source": "a", "src": "a", "dest": "b"}}}, "source and src"},
			{"file_replace_contents", map[string]any{"path": "a", "old_text": "x", "new_text": "y", "entries": []any{}}, "entries"},
			{"file_read", map[string]any{"path": "a", "offset": 2, "range_header": "bytes=0-1"}, "range_header"},
			{"command_run", map[string]any{"command": "true", "cwd": "/", "working_directory": "/"}, "cwd and working_directory"},
			{"command_run", map[string]any{"command": "true", "background": true, "timeout_seconds": 5}, "background"},
			{"command_interrupt", map[string]any{"command_id": "cmd_0000000000000000", "execution_id": "cmd_0000000000000000"}, "command_id and execution_id"},
			{"sandbox_create", map[string]any{"template": "base", "image": "base"}, "template and image"},
			{"sandbox_create", map[string]any{"envs": map[string]string{"A": "1"}, "env": map[string]string{"A": "1"}}, "envs and env"},
			{"sandbox_create", map[string]any{"internet": false, "network_policy": map[string]any{"default_action": "deny"}}, "internet and network_policy"},
			{"sandbox_create", map[string]any{"image": "base", "auth_username": "u"}, "auth_password"},
			{"sandbox_connect", map[string]any{"timeout_seconds": 60, "connect_timeout_seconds": 5}, "give one"},
			{"sandbox_list", map[string]any{"metadata": map[string]string{"a": "b"}, "filter": map[string]any{}}, "give one"},
		} {
			tc.args["sandbox_id"] = id
			if tc.tool == "sandbox_create" || tc.tool == "sandbox_list" {
				delete(tc.args, "sandbox_id")
			}
			fails(t, cs, tc.tool, tc.args, tc.want)
		}
	})

	t.Run("null is not given", func(t *testing.T) {
		res := call0(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "utf", "range_header": nil, "encoding": nil, "offset": nil})
		if text(res) != "café" || structured(t, res)["encoding"] != "text" {
			t.Errorf("file_read with nulls: %q %v", text(res), structured(t, res))
		}
	})

	t.Run("sandbox tools", func(t *testing.T) {
		info := structured(t, call0(t, cs, "sandbox_get_info", map[string]any{"sandbox_id": id}))
		status, _ := info["status"].(map[string]any)
		if info["id"] != id || info["sandbox_id"] != id || status["state"] != "Running" || info["expires_at"] != info["end_at"] || info["created_at"] != info["started_at"] {
			t.Errorf("sandbox_get_info = %v", info)
		}
		renewed := structured(t, call0(t, cs, "sandbox_renew", map[string]any{"sandbox_id": id, "timeout_seconds": 120.5}))
		if renewed["expires_at"] != renewed["end_at"] || renewed["expires_in_seconds"].(float64) > 121 {
			t.Errorf("sandbox_renew = %v", renewed)
		}
		// OpenSandbox's connect waits for the sandbox and leaves its life
		// as it was; Hutch's keeps it alive 5 minutes at least.
		conn := structured(t, call0(t, cs, "sandbox_connect", map[string]any{"sandbox_id": id, "connect_timeout_seconds": 5}))
		if inf, _ := conn["info"].(map[string]any); inf["id"] != id || conn["expires_in_seconds"].(float64) > 121 {
			t.Errorf("sandbox_connect in OpenSandbox's shape = %v", conn)
		}
		if conn := structured(t, call0(t, cs, "sandbox_connect", map[string]any{"sandbox_id": id})); conn["expires_in_seconds"].(float64) < 290 {
			t.Errorf("sandbox_connect in Hutch's shape = %v", conn)
		}
		if hc := structured(t, call0(t, cs, "sandbox_healthcheck", map[string]any{"sandbox_id": id, "connect_if_missing": true})); hc["healthy"] != true || hc["sandbox_id"] != id {
			t.Errorf("sandbox_healthcheck = %v", hc)
		}
		// The endpoint answers: a server in the sandbox, reached at
		// http://ENDPOINT with the headers, as OpenSandbox's SDK does.
		inSandbox(t, sbx, "mkdir -p /tmp/www && echo hello > /tmp/www/index.html && (cd /tmp/www && nohup python3 -m http.server 8123 >/dev/null 2>&1 &)")
		ep := structured(t, call0(t, cs, "sandbox_get_endpoint", map[string]any{"sandbox_id": id, "port": 8123}))
		var body string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && body != "hello\n"; time.Sleep(200 * time.Millisecond) {
			req, _ := http.NewRequest("GET", "http://"+ep["endpoint"].(string)+"/index.html", nil)
			for k, v := range ep["headers"].(map[string]any) {
				req.Header.Set(k, v.(string))
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
				resp.Body.Close()
				body = string(b)
			}
		}
		if body != "hello\n" {
			t.Errorf("GET http://%s/index.html with %v: %q", ep["endpoint"], ep["headers"], body)
		}
		// OpenSandbox's execd, which only the server's route serves:
		// its endpoint, and the headers it needs.
		ep = structured(t, call0(t, cs, "sandbox_get_endpoint", map[string]any{"sandbox_id": id, "port": 44772}))
		if want := strings.TrimPrefix(h.url, "http://") + "/v1/sandboxes/" + id + "/proxy/44772"; ep["endpoint"] != want || ep["origin"] != "template" {
			t.Errorf("sandbox_get_endpoint of port 44772 = %v, want endpoint %s and origin template", ep, want)
		}
		req, _ := http.NewRequest("GET", "http://"+ep["endpoint"].(string)+"/ping", nil)
		for k, v := range ep["headers"].(map[string]any) {
			req.Header.Set(k, v.(string))
		}
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("GET http://%s/ping with %v: %v %v", ep["endpoint"], ep["headers"], resp, err)
		} else {
			resp.Body.Close()
		}
		if k := structured(t, call0(t, cs, "sandbox_kill", map[string]any{"sandbox_id": id})); k["status"] != "killed" || k["killed"] != true {
			t.Errorf("sandbox_kill = %v", k)
		}
	})
}

// TestOpenSandboxList: OpenSandbox's filter pages the same sandboxes
// Hutch's listing gives.
func TestOpenSandboxList(t *testing.T) {
	h := newHutch(t)
	cs := h.session(t, h.keyA)
	var made []string
	for range 3 {
		made = append(made, ok[SandboxInfo](t, cs, "sandbox_create", map[string]any{"metadata": map[string]string{"group": "g1"}}).SandboxID)
	}
	ok[SandboxInfo](t, cs, "sandbox_create", map[string]any{"metadata": map[string]string{"group": "other"}})
	var hutchIDs []string
	for _, s := range ok[ListOutput](t, cs, "sandbox_list", map[string]any{"metadata": map[string]string{"group": "g1"}}).Sandboxes {
		hutchIDs = append(hutchIDs, s.SandboxID)
	}
	var paged []string
	for _, tc := range []struct {
		filter     map[string]any
		items      int
		pagination Pagination
	}{
		{map[string]any{"metadata": map[string]string{"group": "g1"}, "page": 1, "page_size": 2}, 2, Pagination{1, 2, 3, 2, true}},
		{map[string]any{"metadata": map[string]string{"group": "g1"}, "page": 2, "page_size": 2}, 1, Pagination{2, 2, 3, 2, false}},
		{map[string]any{"metadata": map[string]string{"group": "g1"}, "page": 3, "page_size": 2}, 0, Pagination{3, 2, 3, 2, false}},
		{map[string]any{"metadata": map[string]string{"group": "g1"}, "states": []string{"Running"}}, 3, Pagination{1, 20, 3, 1, false}},
		{map[string]any{"metadata": map[string]string{"group": "g1"}, "states": []string{"PAUSED", "Terminated"}}, 0, Pagination{1, 20, 0, 0, false}},
		{map[string]any{}, 4, Pagination{1, 20, 4, 1, false}},
	} {
		out := ok[PagedSandboxInfos](t, cs, "sandbox_list", map[string]any{"filter": tc.filter})
		if len(out.SandboxInfos) != tc.items || out.Pagination != tc.pagination {
			t.Errorf("filter %v: %d items, %+v; want %d, %+v", tc.filter, len(out.SandboxInfos), out.Pagination, tc.items, tc.pagination)
		}
		if tc.filter["page_size"] == 2 {
			for _, s := range out.SandboxInfos {
				if s.Status.State != "Running" || s.Metadata["group"] != "g1" {
					t.Errorf("listed %+v", s)
				}
				paged = append(paged, s.ID)
			}
		}
	}
	slices.Sort(paged)
	slices.Sort(hutchIDs)
	slices.Sort(made)
	if !slices.Equal(paged, hutchIDs) || !slices.Equal(paged, made) {
		t.Errorf("pages hold %v, Hutch's listing %v, made %v", paged, hutchIDs, made)
	}
	fails(t, cs, "sandbox_list", map[string]any{"filter": map[string]any{"states": []string{"Sleeping"}}}, "not a state")
	fails(t, cs, "sandbox_list", map[string]any{"filter": map[string]any{"page_size": -1}}, "page_size")
}

// hasLifecycleAPI reports whether the server answers OpenSandbox's
// lifecycle API, which sandbox_create needs for image, resource,
// network_policy and entrypoint.
func hasLifecycleAPI(t *testing.T, h *hutch) bool {
	req, _ := http.NewRequest("GET", h.url+"/v1/sandboxes", nil)
	req.Header.Set("OPEN-SANDBOX-API-KEY", h.keyA)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// TestOpenSandboxCreate: sandbox_create in OpenSandbox's shape makes a
// sandbox with what it asks for, through the lifecycle API. It runs once
// hutch serve answers that API.
func TestOpenSandboxCreate(t *testing.T) {
	h := newHutch(t)
	if !hasLifecycleAPI(t, h) {
		t.Skip("hutch serve does not answer OpenSandbox's lifecycle API (/v1) yet")
	}
	cs := h.session(t, h.keyA)
	c, err := sdk.NewClient(sdk.Config{APIURL: h.url, APIKey: h.keyA})
	if err != nil {
		t.Fatal(err)
	}
	res := structured(t, call0(t, cs, "sandbox_create", map[string]any{
		"image": "base", "env": map[string]string{"GREETING": "hi"}, "metadata": map[string]string{"task": "osb"},
		"resource": map[string]string{"cpu": "1", "memory": "128Mi"}, "entrypoint": []string{"sleep", "1234"},
		"timeout_seconds": 120, "ready_timeout_seconds": 20,
	}))
	id, _ := res["sandbox_id"].(string)
	info, _ := res["info"].(map[string]any)
	status, _ := info["status"].(map[string]any)
	md, _ := info["metadata"].(map[string]any)
	if id == "" || info["id"] != id || status["state"] != "Running" || md["task"] != "osb" || md[MetadataKey] != "true" ||
		fmt.Sprint(info["entrypoint"]) != "[sleep 1234]" || fmt.Sprint(info["image"]) != "map[image:base]" || res["expires_in_seconds"].(float64) > 121 || res["memory_mb"] != 128.0 {
		t.Fatalf("sandbox_create = %v", res)
	}
	sbx, err := c.Connect(context.Background(), id, sdk.ConnectOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got := inSandbox(t, sbx, "echo $GREETING"); got != "hi\n" {
		t.Errorf("env: %q", got)
	}
	// 200 MB fits in the server's default of 256 MB, not in 128 MiB.
	const alloc = `python3 -c 'b = b"x" * (200 << 20); print(len(b) >> 20)'`
	if _, err := sbx.Commands.Run(context.Background(), alloc, nil); err == nil {
		t.Error("200 MB allocated within a memory limit of 128 MiB")
	}
	other := ok[SandboxInfo](t, cs, "sandbox_create", nil)
	if osbx, err := c.Connect(context.Background(), other.SandboxID, sdk.ConnectOptions{Timeout: time.Second}); err != nil {
		t.Fatal(err)
	} else if got := inSandbox(t, osbx, alloc); got != "200\n" {
		t.Errorf("200 MB in a sandbox of the default limit: %q", got)
	}
	var found bool
	for deadline := time.Now().Add(10 * time.Second); !found && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		found = strings.Contains(inSandbox(t, sbx, "ps -eo args"), "sleep 1234")
	}
	if !found {
		t.Error("the entrypoint does not run")
	}

	// network_policy: a default of deny with an allowed domain is an
	// allow list in Hutch's egress policy.
	res = structured(t, call0(t, cs, "sandbox_create", map[string]any{
		"image": "base", "network_policy": map[string]any{"default_action": "deny", "egress": []any{map[string]any{"action": "allow", "target": "pypi.org"}}},
	}))
	pinfo, err := c.GetInfo(context.Background(), res["sandbox_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if n := pinfo.Network; n == nil || !slices.Contains(n.DenyOut, "0.0.0.0/0") || !slices.Contains(n.AllowOut, "pypi.org") {
		t.Errorf("network of a sandbox made with network_policy: %+v", n)
	}
}

// TestOpenSandboxParameters: every tool takes every argument of
// opensandbox-mcp 1.1.1's tool of its name (its tools/list, nested
// objects included), and requires nothing that tool does not: a call
// written for it passes the schema.
func TestOpenSandboxParameters(t *testing.T) {
	srv := NewServer(Options{Client: func(context.Context, *mcp.CallToolRequest) (*sdk.Client, error) { return nil, nil }})
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	srv.Connect(ctx, st, nil)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	type schema struct {
		Properties map[string]*schema `json:"properties"`
		Items      *schema            `json:"items"`
		Required   []string           `json:"required"`
	}
	schemas := map[string]*schema{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var s schema
		json.Unmarshal(b, &s)
		schemas[tool.Name] = &s
	}
	for _, tc := range []struct {
		tool     string
		params   []string // dotted for nested objects, [] for list items
		required []string
	}{
		{"sandbox_create", []string{"image", "auth_username", "auth_password", "timeout_seconds", "ready_timeout_seconds", "health_check_polling_interval_ms", "skip_health_check", "env", "metadata", "resource", "network_policy", "extensions", "entrypoint",
			"network_policy.defaultAction", "network_policy.egress[].action", "network_policy.egress[].target"}, []string{"image"}},
		{"sandbox_connect", []string{"sandbox_id", "connect_timeout_seconds", "health_check_polling_interval_ms", "skip_health_check"}, []string{"sandbox_id"}},
		{"sandbox_kill", []string{"sandbox_id"}, []string{"sandbox_id"}},
		{"sandbox_get_info", []string{"sandbox_id"}, []string{"sandbox_id"}},
		{"sandbox_list", []string{"filter", "filter.states", "filter.metadata", "filter.page_size", "filter.page"}, []string{}},
		{"sandbox_renew", []string{"sandbox_id", "timeout_seconds"}, []string{"sandbox_id", "timeout_seconds"}},
		{"sandbox_get_metrics", []string{"sandbox_id", "connect_if_missing"}, []string{"sandbox_id"}},
		{"sandbox_healthcheck", []string{"sandbox_id", "connect_if_missing"}, []string{"sandbox_id"}},
		{"command_run", []string{"sandbox_id", "command", "background", "working_directory", "connect_if_missing"}, []string{"sandbox_id", "command"}},
		{"command_interrupt", []string{"sandbox_id", "execution_id", "connect_if_missing"}, []string{"sandbox_id", "execution_id"}},
		{"file_read", []string{"sandbox_id", "path", "encoding", "range_header", "connect_if_missing"}, []string{"sandbox_id", "path"}},
		{"file_write", []string{"sandbox_id", "path", "content", "encoding", "mode", "owner", "group", "connect_if_missing"}, []string{"sandbox_id", "path", "content"}},
		{"file_delete", []string{"sandbox_id", "paths", "connect_if_missing"}, []string{"sandbox_id", "paths"}},
		{"file_search", []string{"sandbox_id", "path", "pattern", "connect_if_missing"}, []string{"sandbox_id", "path", "pattern"}},
		{"file_create_directories", []string{"sandbox_id", "entries", "connect_if_missing", "entries[].path", "entries[].mode", "entries[].owner", "entries[].group"}, []string{"sandbox_id", "entries"}},
		{"file_delete_directories", []string{"sandbox_id", "paths", "connect_if_missing"}, []string{"sandbox_id", "paths"}},
		{"file_move", []string{"sandbox_id", "entries", "connect_if_missing", "entries[].source", "entries[].destination", "entries[].src", "entries[].dest"}, []string{"sandbox_id", "entries"}},
		{"file_replace_contents", []string{"sandbox_id", "entries", "connect_if_missing", "entries[].path", "entries[].old_content", "entries[].new_content"}, []string{"sandbox_id", "entries"}},
		{"sandbox_get_endpoint", []string{"sandbox_id", "port", "connect_if_missing"}, []string{"sandbox_id", "port"}},
	} {
		s := schemas[tc.tool]
		if s == nil {
			t.Errorf("no tool %s", tc.tool)
			continue
		}
		for _, p := range tc.params {
			at := s
			for _, part := range strings.Split(p, ".") {
				name, list := strings.CutSuffix(part, "[]")
				if at = at.Properties[name]; at != nil && list {
					at = at.Items
				}
				if at == nil {
					break
				}
			}
			if at == nil {
				t.Errorf("%s takes no %s", tc.tool, p)
			}
		}
		for _, r := range s.Required {
			if !slices.Contains(tc.required, r) {
				t.Errorf("%s requires %s, which opensandbox-mcp's does not", tc.tool, r)
			}
		}
	}
}

func TestByteRange(t *testing.T) {
	for _, tc := range []struct {
		h              string
		size           int64
		offset, length int64
		err            string
	}{
		{"bytes=0-9", 100, 0, 10, ""},
		{"bytes=90-", 100, 90, 10, ""},
		{"bytes=-10", 100, 90, 10, ""},
		{"bytes=-500", 100, 0, 100, ""},
		{"bytes=95-200", 100, 95, 5, ""},
		{" bytes=1-1", 100, 1, 1, ""},
		{"bytes=100-", 100, 0, 0, "past the end"},
		{"bytes=0-0", 0, 0, 0, "past the end"},
		{"bytes=5-1", 100, 0, 0, "not a byte range"},
		{"bytes=0-1,4-5", 100, 0, 0, "not a byte range"},
		{"lines=0-1", 100, 0, 0, "not a byte range"},
		{"bytes=-0", 100, 0, 0, "not a byte range"},
		{"bytes=a-b", 100, 0, 0, "not a byte range"},
	} {
		off, n, err := byteRange(tc.h, tc.size)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("byteRange(%q, %d) = %v, want an error with %q", tc.h, tc.size, err, tc.err)
			}
			continue
		}
		if err != nil || off != tc.offset || n != tc.length {
			t.Errorf("byteRange(%q, %d) = %d, %d, %v; want %d, %d", tc.h, tc.size, off, n, err, tc.offset, tc.length)
		}
	}
}

func TestFileMode(t *testing.T) {
	for _, tc := range []struct {
		in   int
		want uint32
		ok   bool
	}{{755, 0o755, true}, {644, 0o644, true}, {0, 0, true}, {4755, 0o4755, true}, {1777, 0o1777, true}, {999, 0, false}, {-1, 0, false}, {17777, 0, false}} {
		got, err := fileMode(tc.in)
		if (err == nil) != tc.ok || (tc.ok && uint32(got) != tc.want) {
			t.Errorf("fileMode(%d) = %o, %v", tc.in, got, err)
		}
	}
}

func TestTextEncoding(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []byte
		err        bool
	}{
		{"utf-8", "é", []byte("é"), false},
		{"UTF8", "é", []byte("é"), false},
		{"latin-1", "é", []byte{0xe9}, false},
		{"cp1252", "€", []byte{0x80}, false},
		{"ascii", "a", []byte("a"), false},
		{"ascii", "é", nil, true},
		{"shift_jis", "日", []byte{0x93, 0xfa}, false},
		{"klingon", "a", nil, true},
	} {
		enc, err := textEncoding(tc.name)
		if err == nil {
			var b []byte
			if b, err = encodeText(tc.text, enc, tc.name); err == nil {
				if string(b) != string(tc.want) {
					t.Errorf("%s: %q encodes to % x, want % x", tc.name, tc.text, b, tc.want)
				}
				if back, err := decodeText(b, enc, tc.name); err != nil || back != tc.text {
					t.Errorf("%s: % x decodes to %q, %v", tc.name, b, back, err)
				}
			}
		}
		if (err != nil) != tc.err {
			t.Errorf("%s %q: error %v, want one: %v", tc.name, tc.text, err, tc.err)
		}
	}
}

func TestWithoutNulls(t *testing.T) {
	var in any
	json.Unmarshal([]byte(`{"a":null,"b":{"c":null,"d":1},"e":[{"f":null}],"g":"x"}`), &in)
	got, changed := withoutNulls(in)
	b, _ := json.Marshal(got)
	if !changed || string(b) != `{"b":{"d":1},"e":[{}],"g":"x"}` {
		t.Errorf("withoutNulls = %s, %v", b, changed)
	}
}

// TestResultShapes: a call in Hutch's shape gets Hutch's result, one in
// OpenSandbox's gets OpenSandbox's, and one in neither (only the
// arguments both tools share, as a call written for opensandbox-mcp may
// be) gets both, which agree.
func TestResultShapes(t *testing.T) {
	h := newHutch(t)
	cs := h.session(t, h.keyA)
	id := ok[SandboxInfo](t, cs, "sandbox_create", map[string]any{"metadata": map[string]string{"shapes": "1"}, "timeout_seconds": 600}).SandboxID
	c, err := sdk.NewClient(sdk.Config{APIURL: h.url, APIKey: h.keyA})
	if err != nil {
		t.Fatal(err)
	}
	sbx, err := c.Connect(context.Background(), id, sdk.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inSandbox(t, sbx, "cd /home/user && printf 'a\\nb\\n' > t.txt && seq 1 100000 > big.txt && printf '\\0\\1' > bin && chown user t.txt big.txt bin")
	var ids []string // of the commands run in neither shape
	for _, tc := range []struct {
		name       string
		tool       string
		args       map[string]any
		has, lacks []string
		// check, if set, checks that the shapes' values agree.
		check func(t *testing.T, out map[string]any)
	}{
		{"command_run in neither shape", "command_run", map[string]any{"command": "echo out; echo err >&2; exit 2"},
			[]string{"exit_code", "stdout", "stderr", "id", "logs", "result", "error"}, []string{"complete"},
			func(t *testing.T, out map[string]any) {
				logs, _ := out["logs"].(map[string]any)
				errInfo, _ := out["error"].(map[string]any)
				if out["stdout"] != "out\n" || out["stderr"] != "err\n" || out["exit_code"] != 2.0 || fmt.Sprint(logs["stdout"]) != fmt.Sprint([]any{map[string]any{"text": "out\n", "timestamp": logs["stdout"].([]any)[0].(map[string]any)["timestamp"]}}) ||
					!strings.Contains(fmt.Sprint(logs["stderr"]), "err\n") || errInfo["value"] != "2" {
					t.Errorf("the shapes disagree: %v", out)
				}
				ids = append(ids, out["id"].(string))
			}},
		{"command_run in neither shape, succeeding", "command_run", map[string]any{"command": "true"},
			[]string{"exit_code", "stdout", "id", "logs", "complete"}, []string{"error"},
			func(t *testing.T, out map[string]any) { ids = append(ids, out["id"].(string)) }},
		{"command_run in Hutch's shape", "command_run", map[string]any{"command": "pwd", "cwd": "/tmp"},
			[]string{"exit_code", "stdout", "stderr"}, []string{"id", "logs", "result"}, nil},
		{"command_run in OpenSandbox's shape", "command_run", map[string]any{"command": "pwd", "working_directory": "/tmp"},
			[]string{"exit_code", "id", "logs", "result", "complete"}, []string{"stdout", "stderr"}, nil},
		{"file_read of a text in neither shape", "file_read", map[string]any{"path": "t.txt"},
			[]string{"path", "size", "encoding", "content"}, nil,
			func(t *testing.T, out map[string]any) {
				if out["content"] != "a\nb\n" || out["path"] != "/home/user/t.txt" || out["size"] != 4.0 {
					t.Errorf("the shapes disagree: %v", out)
				}
			}},
		{"file_read of lines, Hutch's shape", "file_read", map[string]any{"path": "t.txt", "offset": 2}, []string{"path", "start_line"}, []string{"content"}, nil},
		{"file_read of a text longer than one answer, neither shape", "file_read", map[string]any{"path": "big.txt"}, []string{"path", "truncated"}, []string{"content"}, nil},
		{"file_read of binary, neither shape", "file_read", map[string]any{"path": "bin"}, []string{"path", "encoding"}, []string{"content"}, nil},
		{"file_read in OpenSandbox's shape", "file_read", map[string]any{"path": "t.txt", "encoding": "utf-8"}, []string{"path", "content"}, []string{"size", "encoding"}, nil},
		{"sandbox_list in neither shape", "sandbox_list", map[string]any{}, []string{"sandboxes", "sandbox_infos", "pagination"}, nil,
			func(t *testing.T, out map[string]any) {
				var hutch, osb []string
				for _, s := range out["sandboxes"].([]any) {
					hutch = append(hutch, s.(map[string]any)["sandbox_id"].(string))
				}
				for _, s := range out["sandbox_infos"].([]any) {
					osb = append(osb, s.(map[string]any)["id"].(string))
				}
				if !slices.Equal(hutch, []string{id}) || !slices.Equal(osb, hutch) {
					t.Errorf("sandboxes %v, sandbox_infos %v; want %s in both", hutch, osb, id)
				}
			}},
		{"sandbox_list in Hutch's shape", "sandbox_list", map[string]any{"metadata": map[string]string{"shapes": "1"}}, []string{"sandboxes"}, []string{"sandbox_infos", "pagination"}, nil},
		{"sandbox_list in OpenSandbox's shape", "sandbox_list", map[string]any{"filter": map[string]any{}}, []string{"sandbox_infos", "pagination"}, []string{"sandboxes"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.tool != "sandbox_list" {
				tc.args["sandbox_id"] = id
			}
			out := structured(t, call0(t, cs, tc.tool, tc.args))
			keys := slices.Sorted(maps.Keys(out))
			for _, k := range tc.has {
				if !slices.Contains(keys, k) {
					t.Errorf("no %s in %v", k, keys)
				}
			}
			for _, k := range tc.lacks {
				if slices.Contains(keys, k) {
					t.Errorf("%s in %v", k, keys)
				}
			}
			if tc.check != nil {
				tc.check(t, out)
			}
		})
	}
	if len(ids) != 2 || ids[0] == ids[1] || validCommandID(ids[0]) != nil {
		t.Errorf("the commands' ids %q: want two of command_start's form, different", ids)
	}
}

// TestOpenSandboxInfo: the sandboxes as OpenSandbox's lifecycle API
// describes them, in every result that holds OpenSandbox's SandboxInfo:
// what each was made from, as its create named it, and its entrypoint.
func TestOpenSandboxInfo(t *testing.T) {
	h := newHutch(t)
	cs := h.session(t, h.keyA)
	md := map[string]string{"info": "1"}
	type made struct {
		create     map[string]any // sandbox_create's result
		image      string         // info.image.image, "" for none
		snapshot   string         // info.snapshot_id
		entrypoint string
	}
	var sandboxes []made
	plain := structured(t, call0(t, cs, "sandbox_create", map[string]any{"metadata": md}))
	sandboxes = append(sandboxes, made{plain, "base", "", "[]"})
	withEntrypoint := structured(t, call0(t, cs, "sandbox_create", map[string]any{"image": "base", "entrypoint": []string{"sleep", "1234"}, "metadata": md}))
	sandboxes = append(sandboxes, made{withEntrypoint, "base", "", "[sleep 1234]"})
	snap := ok[SnapshotOutput](t, cs, "sandbox_snapshot", map[string]any{"sandbox_id": plain["sandbox_id"]})
	fromSnapshot := structured(t, call0(t, cs, "sandbox_create", map[string]any{"template": snap.SnapshotID, "metadata": md}))
	sandboxes = append(sandboxes, made{fromSnapshot, "", snap.SnapshotID, "[]"})

	listed := map[string]map[string]any{}
	for _, i := range structured(t, call0(t, cs, "sandbox_list", map[string]any{"filter": map[string]any{"metadata": md}}))["sandbox_infos"].([]any) {
		listed[i.(map[string]any)["id"].(string)] = i.(map[string]any)
	}
	for _, sb := range sandboxes {
		id := sb.create["sandbox_id"].(string)
		info := structured(t, call0(t, cs, "sandbox_get_info", map[string]any{"sandbox_id": id}))
		connected := structured(t, call0(t, cs, "sandbox_connect", map[string]any{"sandbox_id": id}))
		for _, r := range []struct {
			name string
			info any
		}{{"sandbox_create's info", sb.create["info"]}, {"sandbox_get_info", info}, {"sandbox_list's item", listed[id]}, {"sandbox_connect's info", connected["info"]}} {
			i, _ := r.info.(map[string]any)
			image, _ := i["image"].(map[string]any)
			status, _ := i["status"].(map[string]any)
			if i["id"] != id || status["state"] != "Running" || fmt.Sprint(i["entrypoint"]) != sb.entrypoint || (image["image"] == nil) != (sb.image == "") ||
				(sb.image != "" && image["image"] != sb.image) || (i["snapshot_id"] != nil) != (sb.snapshot != "") || (sb.snapshot != "" && i["snapshot_id"] != sb.snapshot) {
				t.Errorf("%s of %s = %v; want image %q, snapshot %q, entrypoint %s", r.name, id, r.info, sb.image, sb.snapshot, sb.entrypoint)
			}
		}
	}
}
