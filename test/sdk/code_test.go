package sdk_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// requireCodeInterpreter fails the test when the code interpreter
// template is not built (scripts/setup.sh builds it).
func requireCodeInterpreter(t *testing.T) {
	t.Helper()
	if _, err := template.Open(testenv.TemplatesDir()).Get(sdk.CodeInterpreterTemplate); err != nil {
		t.Fatalf("the %s template is not built (scripts/setup.sh builds it): %v", sdk.CodeInterpreterTemplate, err)
	}
}

// runCode runs code and fails the test unless RunCode succeeds and the
// code raised nothing.
func runCode(t *testing.T, sbx *sdk.Sandbox, code string, opts *sdk.RunCodeOptions) *sdk.Execution {
	t.Helper()
	exec, err := sbx.RunCode(t.Context(), code, opts)
	if err != nil {
		t.Fatalf("RunCode(%q): %v", code, err)
	}
	if exec.Error != nil {
		t.Fatalf("RunCode(%q) raised %s\n%s", code, exec.Error, exec.Error.Traceback)
	}
	return exec
}

// TestRunCode: the Go SDK's RunCode and code contexts against a real
// code-interpreter-v1 sandbox behind `hutch serve`'s port routing.
func TestRunCode(t *testing.T) {
	requireCodeInterpreter(t)
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{Template: sdk.CodeInterpreterTemplate, Timeout: 10 * time.Minute})
	ctx := t.Context()

	t.Run("state across calls", func(t *testing.T) {
		first := runCode(t, sbx, "x = 41", nil)
		if len(first.Results) != 0 || first.Text() != "" {
			t.Errorf("an assignment's results: %+v", first.Results)
		}
		second := runCode(t, sbx, "x + 1", nil)
		if second.Text() != "42" || len(second.Results) != 1 || !second.Results[0].IsMainResult {
			t.Errorf("x + 1: text %q, results %+v", second.Text(), second.Results)
		}
		if second.ExecutionCount <= first.ExecutionCount || first.ExecutionCount == 0 {
			t.Errorf("execution counts %d then %d, want them counting up", first.ExecutionCount, second.ExecutionCount)
		}
	})

	t.Run("streams and callbacks", func(t *testing.T) {
		var out, errOut []sdk.OutputMessage
		var results []sdk.Result
		exec := runCode(t, sbx, "import sys\nprint('out')\nprint('err', file=sys.stderr)\n'last'", &sdk.RunCodeOptions{
			OnStdout: func(m sdk.OutputMessage) { out = append(out, m) },
			OnStderr: func(m sdk.OutputMessage) { errOut = append(errOut, m) },
			OnResult: func(r sdk.Result) { results = append(results, r) },
		})
		if strings.Join(exec.Logs.Stdout, "") != "out\n" || strings.Join(exec.Logs.Stderr, "") != "err\n" {
			t.Errorf("logs %+v", exec.Logs)
		}
		if len(out) == 0 || out[0].Line != "out\n" || out[0].Error || out[0].Timestamp.IsZero() || time.Since(out[0].Timestamp) > time.Minute {
			t.Errorf("OnStdout got %+v", out)
		}
		if len(errOut) == 0 || errOut[0].Line != "err\n" || !errOut[0].Error {
			t.Errorf("OnStderr got %+v", errOut)
		}
		if len(results) != 1 || results[0].Text != "'last'" || exec.Text() != "'last'" {
			t.Errorf("OnResult got %+v, text %q", results, exec.Text())
		}
	})

	t.Run("a plot and a dataframe", func(t *testing.T) {
		exec := runCode(t, sbx, `import matplotlib.pyplot as plt
import pandas as pd
plt.plot([1, 2, 3], [1, 4, 9], label="squares")
plt.title("squares")
plt.show()
pd.DataFrame({"a": [1, 2], "b": [3, 4]})`, nil)
		if len(exec.Results) != 2 {
			t.Fatalf("results %+v, want the plot and the dataframe", exec.Results)
		}
		plot, df := exec.Results[0], exec.Results[1]
		png, err := base64.StdEncoding.DecodeString(plot.PNG)
		if plot.IsMainResult || err != nil || !strings.HasPrefix(string(png), "\x89PNG") || !slices.Contains(plot.Formats(), "png") {
			t.Errorf("the plot: main %v, formats %v, PNG %d bytes (%v)", plot.IsMainResult, plot.Formats(), len(png), err)
		}
		var chart struct {
			Type  string `json:"type"`
			Title string `json:"title"`
		}
		if err := json.Unmarshal(plot.Chart, &chart); err != nil || chart.Type != "line" || chart.Title != "squares" {
			t.Errorf("the plot's chart %s (%v), want a line chart titled squares", plot.Chart, err)
		}
		var data map[string]any
		if !df.IsMainResult || !strings.Contains(df.HTML, "<table") || json.Unmarshal(df.Data, &data) != nil || data["a"] == nil {
			t.Errorf("the dataframe: main %v, formats %v, data %s", df.IsMainResult, df.Formats(), df.Data)
		}
	})

	t.Run("a raised error", func(t *testing.T) {
		var raised []sdk.ExecutionError
		exec, err := sbx.RunCode(ctx, "print('before')\n1/0", &sdk.RunCodeOptions{OnError: func(e sdk.ExecutionError) { raised = append(raised, e) }})
		if err != nil {
			t.Fatalf("RunCode: %v (a raised error is the execution's)", err)
		}
		if exec.Error == nil || exec.Error.Name != "ZeroDivisionError" || exec.Error.Value != "division by zero" || !strings.Contains(exec.Error.Traceback, "ZeroDivisionError") {
			t.Errorf("error %+v", exec.Error)
		}
		if len(raised) != 1 || strings.Join(exec.Logs.Stdout, "") != "before\n" {
			t.Errorf("OnError calls %+v, stdout %q", raised, exec.Logs.Stdout)
		}
		if got := runCode(t, sbx, "x", nil).Text(); got != "41" {
			t.Errorf("x after the error = %q, want 41", got)
		}
	})

	t.Run("a timeout interrupts the cell and leaves the context usable", func(t *testing.T) {
		start := time.Now()
		exec, err := sbx.RunCode(ctx, "import time\nprint('looping', flush=True)\nwhile True:\n    time.sleep(0.05)", &sdk.RunCodeOptions{Timeout: 2 * time.Second})
		took := time.Since(start)
		if !errors.Is(err, sdk.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("RunCode past its Timeout: %v, want ErrTimeout saying it timed out", err)
		}
		if took < 2*time.Second || took > 10*time.Second {
			t.Errorf("RunCode with Timeout 2s returned after %v", took)
		}
		if exec == nil || strings.Join(exec.Logs.Stdout, "") != "looping\n" {
			t.Errorf("the output so far: %+v", exec)
		}
		// The kernel was interrupted, not restarted: x is still there,
		// and the next cell runs at once.
		start = time.Now()
		if got := runCode(t, sbx, "x", &sdk.RunCodeOptions{Timeout: 30 * time.Second}).Text(); got != "41" {
			t.Errorf("x after the timeout = %q, want 41", got)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("the next cell took %v: the loop was not interrupted?", took)
		}
	})

	t.Run("contexts", func(t *testing.T) {
		c, err := sbx.CreateCodeContext(ctx, "python", "/tmp")
		if err != nil || c.ID == "" || c.Language != "python" || c.Cwd != "/tmp" {
			t.Fatalf("CreateCodeContext(python, /tmp) = %+v, %v", c, err)
		}
		if got := runCode(t, sbx, "import os\nos.getcwd()", &sdk.RunCodeOptions{Context: c}).Text(); got != "'/tmp'" {
			t.Errorf("cwd in the context = %s", got)
		}
		exec, err := sbx.RunCode(ctx, "x", &sdk.RunCodeOptions{Context: c})
		if err != nil || exec.Error == nil || exec.Error.Name != "NameError" {
			t.Errorf("the default context's x in a new context: %+v, %v; want a NameError", exec, err)
		}
		runCode(t, sbx, "y = 7", &sdk.RunCodeOptions{Context: c})
		list, err := sbx.ListCodeContexts(ctx)
		if err != nil || !slices.ContainsFunc(list, func(l sdk.CodeContext) bool { return l.ID == c.ID }) {
			t.Errorf("ListCodeContexts = %+v, %v; want %s in it", list, err, c.ID)
		}
		must(t, sbx.RestartCodeContext(ctx, c.ID), "RestartCodeContext")
		exec, err = sbx.RunCode(ctx, "y", &sdk.RunCodeOptions{Context: c})
		if err != nil || exec.Error == nil || exec.Error.Name != "NameError" {
			t.Errorf("y after a restart: %+v, %v; want a NameError", exec, err)
		}
		must(t, sbx.RemoveCodeContext(ctx, c.ID), "RemoveCodeContext")
		_, err = sbx.RunCode(ctx, "1", &sdk.RunCodeOptions{Context: c})
		is(t, err, sdk.ErrNotFound, "RunCode in a removed context")
		is(t, sbx.RemoveCodeContext(ctx, c.ID), sdk.ErrNotFound, "RemoveCodeContext again")
	})

	t.Run("languages and envs", func(t *testing.T) {
		if got := runCode(t, sbx, "const n = 20; n + 22", &sdk.RunCodeOptions{Language: "javascript"}); got.Text() != "42" {
			t.Errorf("javascript n + 22 = %q", got.Text())
		}
		if got := runCode(t, sbx, "echo $((6*7))", &sdk.RunCodeOptions{Language: "bash"}); strings.Join(got.Logs.Stdout, "") != "42\n" {
			t.Errorf("bash echo: %+v", got.Logs)
		}
		if got := runCode(t, sbx, "import os\nos.environ['FOO']", &sdk.RunCodeOptions{Envs: map[string]string{"FOO": "bar"}}).Text(); got != "'bar'" {
			t.Errorf("FOO with Envs = %s", got)
		}
		_, err := sbx.RunCode(ctx, "1", &sdk.RunCodeOptions{Language: "cobol"})
		is(t, err, sdk.ErrInvalidArgument, "RunCode in cobol")
		_, err = sbx.RunCode(ctx, "1", &sdk.RunCodeOptions{Language: "python", Context: &sdk.CodeContext{ID: "x"}})
		is(t, err, sdk.ErrInvalidArgument, "RunCode with a context and a language")
	})

	t.Run("code that kills its kernel", func(t *testing.T) {
		c, err := sbx.CreateCodeContext(ctx, "python", "")
		if err != nil {
			t.Fatal(err)
		}
		runCode(t, sbx, "kept = 1", &sdk.RunCodeOptions{Context: c})
		exec, err := sbx.RunCode(ctx, "import os\nos.kill(os.getpid(), 9)", &sdk.RunCodeOptions{Context: c})
		if err != nil || exec.Error == nil || exec.Error.Name != "KernelDied" {
			t.Fatalf("a cell that kills its kernel: %+v, %v; want the error KernelDied", exec, err)
		}
		// The next call runs, in a new kernel, and says the state is gone.
		next, err := sbx.RunCode(ctx, "'kept' in globals()", &sdk.RunCodeOptions{Context: c})
		if err != nil || next.Text() != "False" || !strings.Contains(strings.Join(next.Logs.Stderr, ""), "state is gone") {
			t.Errorf("the call after: %+v, %v; want it run in a fresh kernel, saying so on stderr", next, err)
		}
	})

	t.Run("a huge output is bounded with a note", func(t *testing.T) {
		exec := runCode(t, sbx, "import sys\nfor _ in range(20):\n    sys.stdout.write('x' * (1 << 20))", nil)
		out := strings.Join(exec.Logs.Stdout, "")
		note := strings.Join(exec.Logs.Stderr, "")
		if len(out) > 4<<20 || len(out) < 3<<20 || !strings.Contains(note, "output truncated") {
			t.Errorf("20 MiB of stdout: %d bytes came, stderr %q; want at most 4 MiB and a note", len(out), note)
		}
		if got := runCode(t, sbx, "x", nil).Text(); got != "41" {
			t.Errorf("x after the huge output = %q, want 41", got)
		}
	})

	t.Run("two executions in one context run one after the other", func(t *testing.T) {
		c, err := sbx.CreateCodeContext(ctx, "python", "")
		if err != nil {
			t.Fatal(err)
		}
		runCode(t, sbx, "import time\norder = []", &sdk.RunCodeOptions{Context: c})
		errs := make(chan error, 2)
		for _, code := range []string{"order.append('a1'); time.sleep(1); order.append('a2')", "order.append('b1'); time.sleep(1); order.append('b2')"} {
			go func() {
				_, err := sbx.RunCode(ctx, code, &sdk.RunCodeOptions{Context: c})
				errs <- err
			}()
			time.Sleep(200 * time.Millisecond)
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := runCode(t, sbx, "','.join(order)", &sdk.RunCodeOptions{Context: c}).Text(); got != "'a1,a2,b1,b2'" {
			t.Errorf("two cells sent at once ran as %s, want one after the other: 'a1,a2,b1,b2'", got)
		}
	})

	t.Run("a directory others may write is not on the kernel's path", func(t *testing.T) {
		// What a module planted in /tmp by another uid would be: imported
		// from a context there only if the directory were on sys.path.
		if _, err := sbx.Commands.Run(ctx, "printf 'import os\\nopen(\"/tmp/planted-ran\", \"w\").close()\\n' > /tmp/planted_mod.py", &sdk.RunOptions{User: "root"}); err != nil {
			t.Fatal(err)
		}
		c, err := sbx.CreateCodeContext(ctx, "python", "/tmp")
		if err != nil {
			t.Fatal(err)
		}
		exec, err := sbx.RunCode(ctx, "import os\ntry:\n    import planted_mod\nexcept ImportError:\n    pass\nos.path.exists('/tmp/planted-ran')", &sdk.RunCodeOptions{Context: c})
		if err != nil || exec.Text() != "False" {
			t.Errorf("a module in /tmp (root's, in a world-writable directory) from a context there: %+v, %v; want it not imported", exec, err)
		}
		// The home is the user's own: modules there import, as in Jupyter.
		if _, err := sbx.Commands.Run(ctx, "echo 'answer = 42' > /home/user/mine_mod.py", nil); err != nil {
			t.Fatal(err)
		}
		if got := runCode(t, sbx, "import mine_mod\nmine_mod.answer", nil).Text(); got != "42" {
			t.Errorf("a module in the home from the default context: %q, want 42", got)
		}
	})

	t.Run("another uid that takes the port is sent nothing", func(t *testing.T) {
		// The server and its supervisor gone (as the OOM killer can make
		// them), nobody listens on 49999 and logs what it is sent: the
		// edge must not tunnel the next RunCode, and its token, to it.
		squat := `import http.server, socket
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        open("/tmp/squat.log", "a").write(repr(dict(self.headers)) + "\\n")
        self.send_response(200); self.end_headers()
    do_GET = do_POST
class S(http.server.HTTPServer):
    address_family = socket.AF_INET6
    def server_bind(self):
        # Dual-stack: IPv4 connections come as IPv4-mapped, on a socket
        # gVisor lists in no table.
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()
s = S(("::", 49999), H)
open("/tmp/squat.ready", "w").close()
s.serve_forever()`
		if _, err := sbx.Files.Write(ctx, "/tmp/squat.py", []byte(squat), &sdk.WriteOptions{User: "root"}); err != nil {
			t.Fatal(err)
		}
		cmd := `pkill -9 -f 'code-interpreter/[s]upervise.py'; pkill -9 -f 'code-interpreter/[s]erver.py'; sleep 0.5
chmod 644 /tmp/squat.py
setsid setpriv --reuid 65534 --regid 65534 --clear-groups python3 /tmp/squat.py >/dev/null 2>&1 </dev/null &
for i in $(seq 50); do [ -e /tmp/squat.ready ] && break; sleep 0.1; done; ls /tmp/squat.ready`
		if r, err := sbx.Commands.Run(ctx, cmd, &sdk.RunOptions{User: "root"}); err != nil {
			t.Fatalf("starting the squatter: %v %+v", err, r)
		}
		_, err := sbx.RunCode(ctx, "1 + 1", &sdk.RunCodeOptions{Timeout: 10 * time.Second})
		if err == nil {
			t.Fatal("RunCode reached a listener of uid 65534 on port 49999")
		}
		b, _ := sbx.Files.Read(ctx, "/tmp/squat.log", &sdk.FileOptions{User: "root"})
		if len(b) != 0 {
			t.Errorf("the squatter was sent: %s", b)
		}
		t.Logf("RunCode to the squatted port: %v", err)
	})

	t.Run("a sandbox without a code interpreter", func(t *testing.T) {
		base := e.sandbox(t, sdk.CreateOptions{})
		_, err := base.RunCode(ctx, "1", nil)
		is(t, err, sdk.ErrUnavailable, "RunCode in a base sandbox")
		if !strings.Contains(err.Error(), "runs no code interpreter") {
			t.Errorf("RunCode in a base sandbox: %v", err)
		}
	})
}

// TestMCPRunCode: `hutch mcp` over stdio (started by the official MCP Go
// SDK's command transport, as a client configuration starts it) runs
// code in a code-interpreter-v1 sandbox with run_code: state across
// calls, a plot as image content, a raised error and a timeout as error
// results that leave the context usable, a context of its own.
func TestMCPRunCode(t *testing.T) {
	requireCodeInterpreter(t)
	e := startServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.Command(hutchBin.Path(t), "mcp", "--api-url", e.srv.URL(), "--api-key", hutchtest.TestKey)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sdk-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(tool string, args map[string]any) (*mcp.CallToolResult, map[string]any, string) {
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
		return res, out, text.String()
	}
	res, made, text := call("sandbox_create", map[string]any{"template": sdk.CodeInterpreterTemplate, "timeout_seconds": 600})
	id, _ := made["sandbox_id"].(string)
	if res.IsError || id == "" {
		t.Fatalf("sandbox_create: %s", text)
	}
	t.Cleanup(func() { e.client.Kill(context.Background(), id) })

	if res, _, text := call("run_code", map[string]any{"sandbox_id": id, "code": "x = 6 * 7\nprint('set')"}); res.IsError || !strings.Contains(text, `"stdout":"set\n"`) {
		t.Errorf("run_code x = 6 * 7: isError %v, %s", res.IsError, text)
	}
	if res, out, text := call("run_code", map[string]any{"sandbox_id": id, "code": "x"}); res.IsError || out["text"] != "42" {
		t.Errorf("run_code x: isError %v, %s", res.IsError, text)
	}

	res, out, text := call("run_code", map[string]any{"sandbox_id": id, "code": "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()"})
	var img *mcp.ImageContent
	for _, c := range res.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			img = ic
		}
	}
	if res.IsError || img == nil || img.MIMEType != "image/png" || !strings.HasPrefix(string(img.Data), "\x89PNG") {
		t.Errorf("run_code with a plot: isError %v, image %v, %.300s", res.IsError, img != nil, text)
	} else if results, _ := out["results"].([]any); len(results) != 1 || !strings.Contains(text, `"attached":{"png":"content[1]"}`) {
		t.Errorf("run_code with a plot: results %v", out["results"])
	}

	res, out, text = call("run_code", map[string]any{"sandbox_id": id, "code": "1/0"})
	if failure, _ := out["error"].(map[string]any); !res.IsError || failure["name"] != "ZeroDivisionError" || !strings.HasPrefix(text, "the code raised ZeroDivisionError: division by zero") ||
		!strings.Contains(failure["traceback"].(string), "ZeroDivisionError") || strings.Contains(text, "\x1b[") {
		t.Errorf("run_code 1/0: isError %v, %s", res.IsError, text)
	}

	start := time.Now()
	res, out, text = call("run_code", map[string]any{"sandbox_id": id, "code": "while True:\n    pass", "timeout_seconds": 2})
	if !res.IsError || out["timed_out"] != true || !strings.Contains(text, "interrupted") || time.Since(start) > 15*time.Second {
		t.Errorf("run_code past timeout_seconds: isError %v after %v, %s", res.IsError, time.Since(start), text)
	}
	if res, out, text := call("run_code", map[string]any{"sandbox_id": id, "code": "x"}); res.IsError || out["text"] != "42" {
		t.Errorf("run_code x after the timeout: isError %v, %s", res.IsError, text)
	}

	res, c, text := call("create_code_context", map[string]any{"sandbox_id": id, "language": "javascript", "cwd": "/tmp"})
	cid, _ := c["context_id"].(string)
	if res.IsError || cid == "" || c["language"] != "javascript" || c["cwd"] != "/tmp" {
		t.Fatalf("create_code_context: %s", text)
	}
	// The context's own state and working directory.
	call("run_code", map[string]any{"sandbox_id": id, "context_id": cid, "code": "let y = 2"})
	if res, out, text := call("run_code", map[string]any{"sandbox_id": id, "context_id": cid, "code": "console.log(process.cwd()); y * 21"}); res.IsError || out["text"] != "42" || out["stdout"] != "/tmp\n" {
		t.Errorf("run_code in the javascript context: isError %v, %s", res.IsError, text)
	}
	if res, _, text := call("run_code", map[string]any{"sandbox_id": id, "context_id": "nope", "code": "1"}); !res.IsError || !strings.Contains(text, "no context nope") {
		t.Errorf("run_code in an unknown context: isError %v, %s", res.IsError, text)
	}
}
