package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/sdk"
)

// logPage is how many entries one request asks for.
const logPage = 1000

// logPollInterval is how often logs -f asks for new entries.
const logPollInterval = time.Second

func newLogsCmd(g *globals) *cobra.Command {
	var (
		since          string
		follow, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Show a sandbox's log: what its daemon did (processes started and ended, failures)",
		Long: `Logs prints the log of sandbox ID, oldest first: one entry a line with its
time, level, message and fields. The sandbox wrote them: characters that
are not printable (escape sequences, tabs, line breaks, bytes that are not
UTF-8) are printed as escapes, \x1b for ESC. --json prints the entries as
a JSON array, or with -f one JSON object a line as they come.

With -f it keeps asking for new entries every second until interrupted or
the sandbox is gone.`,
		Example: `  hutch logs ID
  hutch logs -f --since 5m ID
  hutch logs --json --since 2026-01-02T15:04:05Z ID`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			id := args[0]
			cur := &logCursor{}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				cur.since = t
			}
			ctx := cmd.Context()
			entries, err := cur.next(ctx, c, id)
			if err != nil {
				return logsError(ctx, c, id, err)
			}
			if !follow {
				if asJSON {
					if entries == nil {
						entries = []sdk.LogEntry{}
					}
					return printJSON(entries)
				}
				return printLogs(entries, false)
			}
			if err := printLogs(entries, asJSON); err != nil {
				return err
			}
			return poll(ctx, func(ctx context.Context) (bool, error) {
				entries, err := cur.next(ctx, c, id)
				switch {
				case errors.Is(err, sdk.ErrNotFound):
					return true, nil // the sandbox is gone: nothing more will come
				case err != nil:
					return false, err
				}
				return false, printLogs(entries, asJSON)
			})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "only entries from this time on: a duration back from now (10m, 2h) or an RFC 3339 time")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new entries until interrupted")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// poll calls next every logPollInterval until it is done, fails, or the
// command is interrupted (SIGINT, SIGHUP), which ends it without error:
// what -f does.
func poll(ctx context.Context, next func(context.Context) (done bool, err error)) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGHUP)
	defer stop()
	tick := time.NewTicker(logPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		done, err := next(ctx)
		if ctx.Err() != nil || done {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// parseSince reads --since: a duration back from now, or an RFC 3339
// time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %q: want a positive duration", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (10m, 2h) or an RFC 3339 time (2006-01-02T15:04:05Z)", s)
	}
	return t, nil
}

// logCursor walks a sandbox's log forward. The server's cursor is a time
// in milliseconds and returns entries at or after it, so the entries of
// the last millisecond are remembered to not print them twice.
type logCursor struct {
	since time.Time
	seen  map[string]bool // entries at since
}

// next returns the entries not returned before, fetching as many pages as
// there are.
func (lc *logCursor) next(ctx context.Context, c *sdk.Client, id string) ([]sdk.LogEntry, error) {
	var out []sdk.LogEntry
	for {
		page, err := c.Logs(ctx, id, sdk.LogsOptions{Since: lc.since, Limit: logPage})
		if err != nil {
			return out, err
		}
		fresh := lc.add(page)
		out = append(out, fresh...)
		if len(page) < logPage || len(fresh) == 0 {
			return out, nil
		}
	}
}

// add records a page (oldest first) and returns its entries not seen yet.
func (lc *logCursor) add(page []sdk.LogEntry) []sdk.LogEntry {
	var fresh []sdk.LogEntry
	for _, e := range page {
		ms := e.Timestamp.Truncate(time.Millisecond)
		if ms.After(lc.since) || lc.seen == nil {
			lc.since, lc.seen = ms, map[string]bool{}
		}
		k := logKey(e)
		if lc.seen[k] {
			continue
		}
		lc.seen[k] = true
		fresh = append(fresh, e)
	}
	return fresh
}

// logKey identifies an entry among those of one millisecond.
func logKey(e sdk.LogEntry) string {
	b, _ := json.Marshal(e)
	return string(b)
}

// printLogs prints entries as lines of text, or of JSON with asJSON.
func printLogs(entries []sdk.LogEntry, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, e := range entries {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	for _, e := range entries {
		if _, err := fmt.Println(formatLog(e)); err != nil {
			return err
		}
	}
	return nil
}

// formatLog renders an entry as one line: local time to the
// millisecond, level, message, then its fields sorted, as k=v (v quoted
// when need be). The sandbox writes its log, so everything but the time
// is printed through printable.String: no escape sequence of its reaches
// the terminal.
func formatLog(e sdk.LogEntry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-5s  %s", e.Timestamp.Local().Format("2006-01-02T15:04:05.000Z07:00"), printable.String(strings.ToUpper(e.Level)), printable.String(e.Message))
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := e.Fields[k]
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, "  %s=%s", printable.String(k), printable.String(v))
	}
	return b.String()
}

// logsError explains a failure to read logs: a 404 is either an unknown
// sandbox or a server without the logs endpoint.
func logsError(ctx context.Context, c *sdk.Client, id string, err error) error {
	if !errors.Is(err, sdk.ErrNotFound) {
		return err
	}
	if _, ierr := c.GetInfo(ctx, id); ierr != nil {
		return notFound(id, ierr)
	}
	return &cliError{fmt.Sprintf("the server at %s does not serve sandbox logs (GET /v2/sandboxes/%s/logs: %v)", c.Config().APIURL, id, err), err}
}
