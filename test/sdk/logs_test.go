package sdk_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// logsPage is GET /v2/sandboxes/{id}/logs with query; it returns the
// status and the entries.
func logsPage(t *testing.T, e *env, id, query string) (int, []sdk.LogEntry) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL()+"/v2/sandboxes/"+id+"/logs?"+query, nil)
	req.Header.Set("X-API-KEY", hutchtest.TestKey)
	resp, err := http.DefaultClient.Do(req)
	must(t, err, "GET logs")
	defer resp.Body.Close()
	var out struct {
		Logs []sdk.LogEntry `json:"logs"`
	}
	if resp.StatusCode == http.StatusOK {
		must(t, json.NewDecoder(resp.Body).Decode(&out), "decode logs")
	}
	return resp.StatusCode, out.Logs
}

// peakRSS reads the peak resident set of process pid since resetPeak, in
// bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, err, "read status")
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			must(t, err, "VmHWM")
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// resetPeak starts peakRSS afresh.
func resetPeak(t *testing.T, pid int) {
	t.Helper()
	must(t, os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0), "reset VmHWM")
}

// TestLogsHostile: what a sandbox puts in its log (envd's standard
// error) must not make reading the log costly for hutch serve, nor hide
// what comes after it.
func TestLogsHostile(t *testing.T) {
	e := startServer(t)

	// Review finding C3: one line over 1 MiB made every read of the log
	// fail with 500 for good, hiding what came after it. Any client of
	// the sandbox's envd makes one: envd logs a process's tag whole.
	t.Run("a line over 1 MiB", func(t *testing.T) {
		sbx := e.sandbox(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
		run(t, sbx, "true", &sdk.RunOptions{Tag: strings.Repeat("x", 2<<20)})
		marker := unique("after")
		run(t, sbx, "true "+marker, nil)
		for _, q := range []string{"direction=forward", "direction=backward", "direction=backward&limit=3"} {
			var entries []sdk.LogEntry
			waitFor(t, 10*time.Second, func() string {
				return fmt.Sprintf("?%s to show the start of %s (got %d entries)", q, marker, len(entries))
			}, func() bool {
				var code int
				code, entries = logsPage(t, e, sbx.ID, q)
				if code != http.StatusOK {
					t.Fatalf("GET logs?%s: %d", q, code)
				}
				for _, l := range entries {
					if l.Message == "process started" && strings.Contains(l.Fields["cmd"], marker) {
						return true
					}
				}
				return false
			})
		}
		_, entries := logsPage(t, e, sbx.ID, "")
		var long *sdk.LogEntry
		for i, l := range entries {
			if strings.HasPrefix(l.Fields["tag"], "xxxx") {
				long = &entries[i]
			}
		}
		if long == nil || long.Message != "process started" || len(long.Fields["tag"]) > 16<<10 || !strings.HasSuffix(long.Fields["tag"], "…[line cut]") || long.Fields["hutch.truncated"] == "" {
			t.Errorf("the long line's entry is not there, cut and marked: %.300v", long)
		}
	})

	// Review finding A6: 16 MiB of many-field lines, then 16 reads of the
	// newest entry at once, took hutch serve from tens of MB to 1.9 GB.
	// The review's sandbox root wrote them to envd's standard error
	// through /proc; envd is not dumpable any more, so the test appends
	// them to the log's file on the host, as any other way in would.
	t.Run("16 MiB of many-field lines", func(t *testing.T) {
		sbx := e.sandbox(t, sdk.CreateOptions{Timeout: 5 * time.Minute})
		run(t, sbx, "true", nil)
		var b bytes.Buffer
		for i := 0; b.Len() < 16<<20; i++ {
			fmt.Fprintf(&b, `{"time":"%s","level":"INFO","msg":"m%d"`, time.Now().UTC().Format(time.RFC3339Nano), i)
			for j := range 3000 {
				fmt.Fprintf(&b, `,"f%d":%d`, j, j)
			}
			b.WriteString("}\n")
		}
		log, err := os.OpenFile(filepath.Join(e.srv.DataDir, "sandboxes", sbx.ID, "output.log"), os.O_WRONLY|os.O_APPEND, 0)
		must(t, err, "open the sandbox's log")
		_, err = log.Write(b.Bytes())
		must(t, err, "write the log")
		must(t, log.Close(), "close the log")

		pid := e.srv.Pid()
		base := peakRSS(t, pid)
		resetPeak(t, pid)
		start := time.Now()
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				code, entries := logsPage(t, e, sbx.ID, "direction=backward&limit=1")
				if code != http.StatusOK || len(entries) != 1 || !strings.HasPrefix(entries[0].Message, "m") || len(entries[0].Fields) != 33 {
					fields := -1
					if len(entries) > 0 {
						fields = len(entries[0].Fields)
					}
					t.Errorf("GET logs?direction=backward&limit=1: %d, %d entries, the first of %d fields; want 200, the newest entry, with 32 fields and %s", code, len(entries), fields, "hutch.truncated")
				}
			})
		}
		wg.Wait()
		took := time.Since(start)
		peak := peakRSS(t, pid)
		t.Logf("16 concurrent backward limit=1 reads: %v; hutch serve's peak RSS %d MiB (%d MiB before)", took.Round(time.Millisecond), peak>>20, base>>20)
		if grown := peak - base; grown > 128<<20 {
			t.Errorf("reading the newest entry 16 times at once grew hutch serve's peak RSS by %d MiB, want under 128", grown>>20)
		}

		for _, q := range []string{"direction=forward&limit=10000", "direction=backward&limit=10000"} {
			resetPeak(t, pid)
			start := time.Now()
			code, entries := logsPage(t, e, sbx.ID, q)
			if code != http.StatusOK || len(entries) < 300 {
				t.Errorf("GET logs?%s: %d, %d entries", q, code, len(entries))
			}
			t.Logf("%s: %d entries in %v; peak RSS %d MiB", q, len(entries), time.Since(start).Round(time.Millisecond), peakRSS(t, pid)>>20)
			if grown := peakRSS(t, pid) - base; grown > 128<<20 {
				t.Errorf("GET logs?%s grew hutch serve's peak RSS by %d MiB, want under 128", q, grown>>20)
			}
		}
	})
}
