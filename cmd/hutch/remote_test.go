package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/sdk"
)

func TestRemoteConfig(t *testing.T) {
	keyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(keyDir, "api-key"), []byte("e2b_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name             string
		flagURL, flagKey string
		env              map[string]string
		dataDir          string
		wantURL, wantKey string
		wantErr          string
	}{
		{name: "flags first", flagURL: "http://flag", flagKey: "e2b_flag",
			env:     map[string]string{"HUTCH_API_URL": "http://env", "HUTCH_API_KEY": "e2b_env"},
			wantURL: "http://flag", wantKey: "e2b_flag"},
		{name: "HUTCH_ before E2B_",
			env:     map[string]string{"HUTCH_API_URL": "http://hutch", "E2B_API_URL": "http://e2b", "HUTCH_API_KEY": "e2b_hutch", "E2B_API_KEY": "e2b_e2b"},
			wantURL: "http://hutch", wantKey: "e2b_hutch"},
		{name: "E2B_", env: map[string]string{"E2B_API_URL": "http://e2b", "E2B_API_KEY": "e2b_e2b"}, wantURL: "http://e2b", wantKey: "e2b_e2b"},
		{name: "key file last", dataDir: keyDir, env: map[string]string{}, wantURL: sdk.DefaultAPIURL, wantKey: "e2b_fromfile"},
		{name: "environment before the key file", dataDir: keyDir, env: map[string]string{"E2B_API_KEY": "e2b_e2b"}, wantURL: sdk.DefaultAPIURL, wantKey: "e2b_e2b"},
		{name: "no key", dataDir: t.TempDir(), env: map[string]string{}, wantErr: "no API key: pass --api-key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &globals{apiURL: tt.flagURL, apiKey: tt.flagKey, dataDir: tt.dataDir, getenv: func(k string) string { return tt.env[k] }}
			cfg, err := g.remoteConfig()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || cfg.APIURL != tt.wantURL || cfg.APIKey != tt.wantKey {
				t.Errorf("remoteConfig() = %q, %q, %v; want %q, %q", cfg.APIURL, cfg.APIKey, err, tt.wantURL, tt.wantKey)
			}
		})
	}
}

func TestFailureCode(t *testing.T) {
	root := newRootCmd(func(string) string { return "" })
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"sandbox", "create"}, 1},
		{[]string{"sbx", "kill"}, 1},
		{[]string{"cp"}, 1},
		{[]string{"logs"}, 1},
		{[]string{"exec"}, 125},
		{[]string{"shell"}, 125},
		{[]string{"run"}, 125},
		{[]string{"keys", "revoke"}, 1},
		{[]string{"template", "build"}, 1},
		{[]string{"ps"}, 1},
	}
	for _, tt := range tests {
		cmd, _, err := root.Find(tt.args)
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got := failureCode(cmd); got != tt.want {
			t.Errorf("failureCode(%v) = %d, want %d", tt.args, got, tt.want)
		}
	}
}

func TestParseCpArg(t *testing.T) {
	tests := []struct {
		in   string
		want cpArg
	}{
		{"abc:/tmp/x", cpArg{id: "abc", path: "/tmp/x", remote: true}},
		{"abc:rel/x", cpArg{id: "abc", path: "rel/x", remote: true}},
		{"abc:", cpArg{id: "abc", path: ".", remote: true}},
		{"local/file", cpArg{path: "local/file"}},
		{"./a:b", cpArg{path: "./a:b"}},
		{"/abs/a:b", cpArg{path: "/abs/a:b"}},
		{"dir/a:b", cpArg{path: "dir/a:b"}},
		{".hidden:x", cpArg{path: ".hidden:x"}},
		{":x", cpArg{path: ":x"}},
	}
	for _, tt := range tests {
		if got := parseCpArg(tt.in); got != tt.want {
			t.Errorf("parseCpArg(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestSplitExecArgs(t *testing.T) {
	tests := []struct {
		in       []string
		wantID   string
		wantArgv []string
	}{
		{[]string{"id", "--", "ls", "-l"}, "id", []string{"ls", "-l"}},
		{[]string{"id", "ls", "--", "x"}, "id", []string{"ls", "--", "x"}},
		{[]string{"id", "--", "--"}, "id", []string{"--"}},
		{[]string{"id", "--"}, "id", []string{}},
		{[]string{"id"}, "id", []string{}},
		{nil, "", nil},
	}
	for _, tt := range tests {
		id, argv := splitExecArgs(tt.in)
		if id != tt.wantID || !cmp.Equal(argv, tt.wantArgv, cmpEmpty) {
			t.Errorf("splitExecArgs(%q) = %q, %q; want %q, %q", tt.in, id, argv, tt.wantID, tt.wantArgv)
		}
	}
}

// cmpEmpty makes nil and empty slices equal.
var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })

func TestParseTimeout(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"10m", 10 * time.Minute, false},
		{"1h30m", 90 * time.Minute, false},
		{"300", 300 * time.Second, false},
		{"500ms", 0, true},
		{"0", 0, true},
		{"-5m", 0, true},
		{"soon", 0, true},
	}
	for _, tt := range tests {
		got, err := parseTimeout(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseTimeout(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"10m", now.Add(-10 * time.Minute), false},
		{"2026-01-01T00:00:00Z", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), false},
		{"2026-01-01T00:00:00.5+02:00", time.Date(2025, 12, 31, 22, 0, 0, 5e8, time.UTC), false},
		{"-1m", time.Time{}, true},
		{"yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		got, err := parseSince(tt.in, now)
		if (err != nil) != tt.wantErr || !got.Equal(tt.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParsePairs(t *testing.T) {
	t.Setenv("HUTCH_TEST_COPIED", "copied")
	got, err := parsePairs("--env", []string{"A=1", "B=x=y", "C=", "HUTCH_TEST_COPIED", "HUTCH_TEST_UNSET_VAR"}, true)
	want := map[string]string{"A": "1", "B": "x=y", "C": "", "HUTCH_TEST_COPIED": "copied"}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("parsePairs = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"novalue", "=v"} {
		if _, err := parsePairs("--metadata", []string{bad}, false); err == nil {
			t.Errorf("parsePairs(%q) accepted", bad)
		}
	}
}

// TestLogCursor: entries come once, also those the server repeats
// because its cursor is the millisecond of the last one.
func TestLogCursor(t *testing.T) {
	at := func(ms int, msg string) sdk.LogEntry {
		return sdk.LogEntry{Timestamp: time.UnixMilli(int64(ms)).Add(time.Duration(len(msg)) * time.Microsecond), Message: msg}
	}
	lc := &logCursor{}
	var got []string
	for _, page := range [][]sdk.LogEntry{
		{at(1, "a"), at(2, "b"), at(2, "cc")},
		{at(2, "b"), at(2, "cc")},               // the last millisecond again
		{at(2, "b"), at(2, "cc"), at(2, "ddd")}, // and one more in it
		{at(2, "b"), at(2, "cc"), at(2, "ddd"), at(3, "e")},
		{at(3, "e")},
	} {
		for _, e := range lc.add(page) {
			got = append(got, e.Message)
		}
	}
	if want := []string{"a", "b", "cc", "ddd", "e"}; !cmp.Equal(got, want) {
		t.Errorf("entries = %v, want %v", got, want)
	}
	if want := time.UnixMilli(3); !lc.since.Equal(want) {
		t.Errorf("cursor at %v, want %v", lc.since, want)
	}
}

func TestFormatLog(t *testing.T) {
	e := sdk.LogEntry{Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.Local), Level: "info", Message: "process started",
		Fields: map[string]string{"pid": "12", "cmd": "/bin/bash -l -c ls", "tag": ""}}
	want := `2026-01-02T03:04:05.006` + time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local).Format("Z07:00") +
		`  INFO   process started  cmd="/bin/bash -l -c ls"  pid=12  tag=""`
	if got := formatLog(e); got != want {
		t.Errorf("formatLog:\n got %q\nwant %q", got, want)
	}
}

// TestHumanOutputEscapesSandboxText: a log entry, an error and
// metadata, as the CLI prints them, hold no control character whatever
// the sandbox wrote (review finding C1): the review's window title (OSC
// 0), clipboard write (OSC 52), and cursor-up, erase-line and carriage
// return that forge the line before.
func TestHumanOutputEscapesSandboxText(t *testing.T) {
	const (
		title     = "\x1b]0;pwned\a"
		clipboard = "\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\a"
		forge     = "\x1b[1A\x1b[2K\r2026-01-02T03:04:05.000Z  INFO   all good"
		c1        = "\u009b31m\x9b"
	)
	e := sdk.LogEntry{Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local), Level: "info" + title, Message: "m" + title + clipboard + forge,
		Fields: map[string]string{"k" + forge: "v" + clipboard, "plain" + c1: "x" + c1}}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local).Format("2006-01-02T03:04:05.000Z07:00")
	tests := []struct {
		name, got, want string
	}{
		{"log entry", formatLog(e), ts + `  INFO\x1b]0;PWNED\a  m\x1b]0;pwned\a\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\a\x1b[1A\x1b[2K\r2026-01-02T03:04:05.000Z  INFO   all good` +
			`  k\x1b[1A\x1b[2K\r2026-01-02T03:04:05.000Z  INFO   all good="v\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\a"  plain\u009b31m\x9b=x\u009b31m\x9b`},
		{"error", errorLine(errors.New("in the sandbox: tar: " + forge + "\nsecond line")), `in the sandbox: tar: \x1b[1A\x1b[2K 2026-01-02T03:04:05.000Z INFO all good second line`},
		{"metadata", formatPairs(map[string]string{"a" + title: "b" + clipboard}), `a\x1b]0;pwned\a=b\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\a`},
		{"template", templateName(sdk.SandboxInfo{TemplateID: "base" + title}), `base\x1b]0;pwned\a`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got  %q\nwant %q", tt.got, tt.want)
			}
			for _, r := range tt.got {
				if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
					t.Errorf("%q holds control character %U", tt.got, r)
				}
			}
		})
	}
}

// TestRemoteCommandsCompleteIDs: every command that takes a sandbox id
// completes it.
func TestRemoteCommandsCompleteIDs(t *testing.T) {
	root := newRootCmd(func(string) string { return "" })
	for _, args := range [][]string{{"sandbox", "info"}, {"sandbox", "kill"}, {"sandbox", "timeout"}, {"sandbox", "metrics"}, {"exec"}, {"shell"}, {"logs"}} {
		cmd, _, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		if cmd.ValidArgsFunction == nil {
			t.Errorf("hutch %v completes no sandbox ids", args)
		}
	}
	if root.CompletionOptions.DisableDefaultCmd {
		t.Error("the completion command is disabled")
	}
}
