package remotecli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestCLI runs every remote command against one server and one sandbox
// (two for the listing), to keep the package quick.
func TestCLI(t *testing.T) {
	f := newFixture(t)
	id := f.createSandbox(t, "--metadata", "suite=cli", "--metadata", "role=main", "--timeout", "10m")

	t.Run("sandbox", func(t *testing.T) { testSandbox(t, f, id) })
	t.Run("config", func(t *testing.T) { testConfig(t, f, id) })
	t.Run("exec", func(t *testing.T) { testExec(t, f, id) })
	t.Run("shell", func(t *testing.T) { testShell(t, f, id) })
	t.Run("cp", func(t *testing.T) { testCp(t, f, id) })
	t.Run("cp from an untrusted sandbox", func(t *testing.T) { testCpUntrusted(t, f, id) })
	t.Run("cp sparse", func(t *testing.T) { testCpSparse(t, f, id) })
	t.Run("logs", func(t *testing.T) { testLogs(t, f, id) })
	t.Run("completion", func(t *testing.T) { testCompletion(t, f, id) })
	t.Run("template ls", func(t *testing.T) { testTemplateLs(t, f) })
}

// sandboxInfo is the part of the SDK's SandboxInfo the tests read.
type sandboxInfo struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	Metadata   map[string]string `json:"metadata"`
	State      string            `json:"state"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
}

func testSandbox(t *testing.T, f *fixture, id string) {
	var other sandboxInfo
	out := f.ok(t, "sandbox", "create", "--json", "--metadata", "suite=cli", "--metadata", "role=other", "--timeout", "2m", "-e", "FROM_CREATE=yes")
	if err := json.Unmarshal([]byte(out), &other); err != nil {
		t.Fatalf("sandbox create --json: %v\n%s", err, out)
	}
	t.Cleanup(func() { f.hutch(t, "", "sandbox", "kill", other.SandboxID) })
	if other.SandboxID == "" || other.Metadata["role"] != "other" || other.State != "running" || other.TemplateID != "base" {
		t.Errorf("sandbox create --json = %+v", other)
	}
	if left := time.Until(other.EndAt); left < time.Minute || left > 2*time.Minute+5*time.Second {
		t.Errorf("--timeout 2m: the sandbox ends in %v", left)
	}
	if got := f.ok(t, "exec", other.SandboxID, "--", "echo $FROM_CREATE"); got != "yes\n" {
		t.Errorf("create -e FROM_CREATE=yes: the sandbox's commands see %q", got)
	}

	t.Run("ls", func(t *testing.T) {
		var list []sandboxInfo
		out := f.ok(t, "sandbox", "ls", "--json")
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("ls --json: %v\n%s", err, out)
		}
		var ids []string
		for _, s := range list {
			ids = append(ids, s.SandboxID)
		}
		if !slices.Contains(ids, id) || !slices.Contains(ids, other.SandboxID) {
			t.Errorf("ls --json lists %v, want %s and %s among them", ids, id, other.SandboxID)
		}
		quiet := strings.Fields(f.ok(t, "sbx", "list", "-q"))
		if !slices.Contains(quiet, id) || !slices.Contains(quiet, other.SandboxID) || len(quiet) != len(list) {
			t.Errorf("sbx list -q = %v, want the ids of ls --json %v", quiet, ids)
		}
		if got := strings.Fields(f.ok(t, "sandbox", "ls", "-q", "--metadata", "role=other")); !slices.Equal(got, []string{other.SandboxID}) {
			t.Errorf("ls -q --metadata role=other = %v, want [%s]", got, other.SandboxID)
		}
		if got := strings.Fields(f.ok(t, "sandbox", "ls", "-q", "--metadata", "suite=cli", "--metadata", "role=main", "--state", "running")); !slices.Equal(got, []string{id}) {
			t.Errorf("ls -q --metadata suite=cli --metadata role=main = %v, want [%s]", got, id)
		}
		if got := f.ok(t, "sandbox", "ls", "--json", "--metadata", "role=nobody"); strings.TrimSpace(got) != "[]" {
			t.Errorf("ls --json of nothing = %q, want []", got)
		}
		table := f.ok(t, "sandbox", "ls")
		lines := strings.Split(strings.TrimSpace(table), "\n")
		if !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "TEMPLATE") || !strings.Contains(lines[0], "METADATA") {
			t.Errorf("ls header: %q", lines[0])
		}
		if !strings.Contains(table, id) || !strings.Contains(table, "role=main,suite=cli") {
			t.Errorf("ls table lacks %s or its metadata:\n%s", id, table)
		}
		wantFailure(t, f.hutch(t, "", "sandbox", "ls", "--metadata", "novalue"), 1, "want KEY=VALUE")
	})

	t.Run("info", func(t *testing.T) {
		var info sandboxInfo
		out := f.ok(t, "sandbox", "info", "--json", id)
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("info --json: %v\n%s", err, out)
		}
		if info.SandboxID != id || info.Metadata["role"] != "main" || info.State != "running" {
			t.Errorf("info --json = %+v", info)
		}
		table := f.ok(t, "sandbox", "info", id)
		for _, want := range []string{"ID:", id, "State:", "running", "Metadata:", "role=main"} {
			if !strings.Contains(table, want) {
				t.Errorf("info lacks %q:\n%s", want, table)
			}
		}
		wantFailure(t, f.hutch(t, "", "sandbox", "info", "nosuchsandbox"), 1, "sandbox nosuchsandbox not found")
	})

	t.Run("timeout", func(t *testing.T) {
		f.ok(t, "sandbox", "timeout", other.SandboxID, "30m")
		var info sandboxInfo
		if err := json.Unmarshal([]byte(f.ok(t, "sandbox", "info", "--json", other.SandboxID)), &info); err != nil {
			t.Fatal(err)
		}
		if left := time.Until(info.EndAt); left < 29*time.Minute || left > 30*time.Minute+5*time.Second {
			t.Errorf("after timeout 30m the sandbox ends in %v", left)
		}
		f.ok(t, "sandbox", "timeout", other.SandboxID, "120") // seconds
		wantFailure(t, f.hutch(t, "", "sandbox", "timeout", other.SandboxID, "soon"), 1, `duration "soon"`)
		wantFailure(t, f.hutch(t, "", "sandbox", "timeout", "nosuchsandbox", "1m"), 1, "sandbox nosuchsandbox not found")
	})

	t.Run("metrics", func(t *testing.T) {
		table := f.ok(t, "sandbox", "metrics", id)
		if first, _, _ := strings.Cut(table, "\n"); !strings.Contains(first, "TIME") || !strings.Contains(first, "CPU") || !strings.Contains(first, "MEMORY USED / TOTAL") || !strings.Contains(first, "DISK USED / TOTAL") {
			t.Errorf("metrics header: %q", first)
		}
		var samples []struct {
			Timestamp time.Time `json:"timestamp"`
			MemTotal  int64     `json:"memTotal"`
		}
		out := f.ok(t, "sandbox", "metrics", "--json", id)
		if err := json.Unmarshal([]byte(out), &samples); err != nil {
			t.Fatalf("metrics --json: %v\n%s", err, out)
		}
		if len(samples) > 0 {
			if samples[0].MemTotal <= 0 || !strings.Contains(table, "MiB") {
				t.Errorf("metrics: %+v\n%s", samples, table)
			}
		}
		wantFailure(t, f.hutch(t, "", "sandbox", "metrics", "nosuchsandbox"), 1, "sandbox nosuchsandbox not found")
	})

	t.Run("kill", func(t *testing.T) {
		r := f.hutch(t, "", "sandbox", "kill", other.SandboxID)
		if r.Code != 0 || r.Stdout != other.SandboxID+"\n" || r.Stderr != "" {
			t.Errorf("kill: %s", r)
		}
		r = f.hutch(t, "", "sandbox", "kill", other.SandboxID)
		wantFailure(t, r, 1, "sandbox "+other.SandboxID+" not found")
		if r.Stderr != "hutch: sandbox "+other.SandboxID+" not found\n" {
			t.Errorf("kill twice: stderr %q", r.Stderr)
		}
		// Every id is tried; each failure is one line.
		r = f.hutch(t, "", "sbx", "rm", "nosuch1", "nosuch2")
		if r.Code != 1 || r.Stderr != "hutch: sandbox nosuch1 not found\nhutch: sandbox nosuch2 not found\n" {
			t.Errorf("kill of two unknown ids: %s", r)
		}
		if got := strings.Fields(f.ok(t, "sandbox", "ls", "-q")); slices.Contains(got, other.SandboxID) {
			t.Errorf("ls still lists %s after kill: %v", other.SandboxID, got)
		}
	})

	t.Run("bad flags exit 1", func(t *testing.T) {
		wantFailure(t, f.hutch(t, "", "sandbox", "create", "--timeout", "0s"), 1, "--timeout")
		wantFailure(t, f.hutch(t, "", "sandbox", "info"), 1, "accepts 1 arg")
		wantFailure(t, f.hutch(t, "", "sandbox", "create", "--template", "no-such-template"), 1, "no-such-template")
	})
}

// testConfig: the server and key come from flags (every other test), the
// environment, or DATA_DIR/api-key.
func testConfig(t *testing.T, f *fixture, id string) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"HUTCH_ variables", []string{"HUTCH_API_URL=" + f.srv.URL(), "HUTCH_API_KEY=" + hutchtest.TestKey}},
		{"E2B_ variables", []string{"E2B_API_URL=" + f.srv.URL(), "E2B_API_KEY=" + hutchtest.TestKey}},
		{"HUTCH_ before E2B_", []string{"HUTCH_API_URL=" + f.srv.URL(), "E2B_API_URL=http://127.0.0.1:1", "HUTCH_API_KEY=" + hutchtest.TestKey, "E2B_API_KEY=e2b_wrong"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.hutchEnv(t, append(slices.Clone(f.env), tc.env...), "", "sandbox", "ls", "-q")
			if r.Code != 0 || !slices.Contains(strings.Fields(r.Stdout), id) {
				t.Errorf("sandbox ls -q: %s\nwant %s listed", r, id)
			}
		})
	}
	t.Run("DATA_DIR/api-key", func(t *testing.T) {
		// What a local `hutch serve` writes when it makes its first key.
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte(hutchtest.TestKey+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := f.hutchEnv(t, f.env, "", "--data-dir", dir, "--api-url", f.srv.URL(), "sandbox", "ls", "-q")
		if r.Code != 0 || !slices.Contains(strings.Fields(r.Stdout), id) {
			t.Errorf("sandbox ls -q with the key in DATA_DIR/api-key: %s", r)
		}
		r = f.hutchEnv(t, append(slices.Clone(f.env), "HUTCH_DATA_DIR="+dir, "HUTCH_API_URL="+f.srv.URL()), "", "sandbox", "ls", "-q")
		if r.Code != 0 || !slices.Contains(strings.Fields(r.Stdout), id) {
			t.Errorf("sandbox ls -q with the key in $HUTCH_DATA_DIR/api-key: %s", r)
		}
	})
	t.Run("no key", func(t *testing.T) {
		r := f.hutchEnv(t, f.env, "", "--api-url", f.srv.URL(), "sandbox", "ls")
		wantFailure(t, r, 1, "no API key: pass --api-key, set HUTCH_API_KEY")
		r = f.hutchEnv(t, f.env, "", "--api-url", f.srv.URL(), "exec", id, "--", "true")
		wantFailure(t, r, 125, "no API key")
	})
	t.Run("wrong key", func(t *testing.T) {
		r := f.hutchEnv(t, f.env, "", "--api-url", f.srv.URL(), "--api-key", "e2b_0000000000000000000000000000000000000000", "sandbox", "ls")
		wantFailure(t, r, 1, "refused the API key")
	})
	t.Run("no server", func(t *testing.T) {
		r := f.hutchEnv(t, f.env, "", "--api-url", "http://127.0.0.1:1", "--api-key", hutchtest.TestKey, "sandbox", "ls")
		wantFailure(t, r, 1, "cannot reach hutch serve at http://127.0.0.1:1")
	})
}

func testCompletion(t *testing.T, f *fixture, id string) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := f.hutch(t, "", "completion", sh)
		if r.Code != 0 || len(r.Stdout) < 500 || !strings.Contains(r.Stdout, "hutch") {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", sh, r.Code, len(r.Stdout), r.Stderr)
		}
	}
	// What the shells' scripts run on TAB: sandbox ids come from the API.
	for _, args := range [][]string{{"sandbox", "info", ""}, {"exec", ""}, {"sandbox", "kill", "x", ""}} {
		out := f.ok(t, append([]string{"__complete"}, args...)...)
		if !strings.Contains(out, id+"\t") {
			t.Errorf("__complete %q does not offer %s:\n%s", args, id, out)
		}
	}
	// A server that cannot be reached gives no completions, and no error.
	r := f.hutchEnv(t, f.env, "", "--api-url", "http://127.0.0.1:1", "--api-key", hutchtest.TestKey, "__complete", "sandbox", "info", "")
	if r.Code != 0 || strings.Contains(r.Stdout, id) || !strings.HasPrefix(r.Stdout, ":") {
		t.Errorf("__complete against no server: %s", r)
	}
}

func testTemplateLs(t *testing.T, f *fixture) {
	r := f.hutchEnv(t, f.env, "", "--templates", testenv.TemplatesDir(), "template", "ls", "--json")
	type tmpl struct {
		Name        string `json:"name"`
		DefaultUser string `json:"defaultUser"`
	}
	var list []tmpl
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil || r.Code != 0 {
		t.Fatalf("template ls --json: %v\n%s", err, r)
	}
	i := slices.IndexFunc(list, func(x tmpl) bool { return x.Name == "base" })
	if i < 0 || list[i].DefaultUser != "user" {
		t.Errorf("template ls --json = %+v, want base with default user user", list)
	}
}
