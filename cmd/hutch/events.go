package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/sdk"
)

// eventPage is how many events one request asks for.
const eventPage = 1000

func newEventsCmd(g *globals) *cobra.Command {
	var (
		q              sdk.EventQuery
		since          string
		follow, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the audit trail: API calls that changed something, commands, file writes, network changes, MCP tool calls",
		Long: `Events prints the audit trail of a hutch serve, oldest first: every API
call that changed something, every command started in a sandbox (its
command line, user, working directory, and when it ends its exit status
and duration), every file written, moved or deleted through the API,
every network policy change and every MCP tool call through hutch mcp and
the sandboxes' MCP gateways; each with the API key (by id) and sandbox
behind it. Secrets are redacted before they are stored (docs/audit.md).

An admin key reads every key's events, a user key its own. --json prints
one JSON object a line (JSON lines: an export). With -f it keeps printing
new events, asking every second, until interrupted.`,
		Example: `  hutch events --since 1h
  hutch events --sandbox ID -f
  hutch events --key key_0123456789abcdef --json > trail.jsonl`,
		Args: cobra.NoArgs,
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				q.Since = t
			}
			ctx := cmd.Context()
			p := newEventPrinter(asJSON)
			if err := nextEvents(ctx, c, &q, p.print); err != nil {
				return err
			}
			if err := p.flush(); err != nil || !follow {
				return err
			}
			return poll(ctx, func(ctx context.Context) (bool, error) {
				if err := nextEvents(ctx, c, &q, p.print); err != nil {
					return false, err
				}
				return false, p.flush()
			})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&q.SandboxID, "sandbox", "", "only the events of this sandbox")
	f.StringVar(&q.KeyID, "key", "", "only the events of this API key (its id, key_…)")
	f.StringVar(&q.Kind, "kind", "", "only events of this kind: api, command, file, network or mcp")
	f.StringVar(&since, "since", "", "only events from this time on: a duration back from now (10m, 2h) or an RFC 3339 time")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new events until interrupted")
	f.BoolVar(&asJSON, "json", false, "print JSON lines")
	return cmd
}

// nextEvents fetches the events after q's cursor, page by page, hands
// each to print and moves the cursor on.
func nextEvents(ctx context.Context, c *sdk.Client, q *sdk.EventQuery, print func(sdk.Event) error) error {
	for {
		page := *q
		page.Limit = eventPage
		events, err := c.Events(ctx, page)
		if err != nil {
			return err
		}
		for _, e := range events {
			if err := print(e); err != nil {
				return err
			}
			q.After = e.Seq
		}
		if len(events) < eventPage {
			return nil
		}
	}
}

// eventPrinter prints events as a table or as JSON lines.
type eventPrinter struct {
	json *json.Encoder
	tab  *tabwriter.Writer
	head bool
}

func newEventPrinter(asJSON bool) *eventPrinter {
	if asJSON {
		return &eventPrinter{json: json.NewEncoder(os.Stdout)}
	}
	return &eventPrinter{tab: tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)}
}

func (p *eventPrinter) print(e sdk.Event) error {
	if p.json != nil {
		return p.json.Encode(e)
	}
	if !p.head {
		fmt.Fprintln(p.tab, "TIME\tKEY\tSANDBOX\tACTION\tOUTCOME\tDETAIL")
		p.head = true
	}
	sb := e.SandboxID
	if sb == "" {
		sb = "-"
	}
	// Every field but the time is some client's choice (a command line,
	// a path, an id in a URL, a reported action): each is printed
	// through printable.String, so no escape sequence, tab or line break
	// reaches the terminal or moves a column.
	q := printable.String
	_, err := fmt.Fprintf(p.tab, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02T15:04:05.000"),
		q(orDash(e.KeyID)), q(sb), q(e.Action), q(e.Outcome), q(summary(e)))
	return err
}

func (p *eventPrinter) flush() error {
	if p.tab != nil {
		return p.tab.Flush()
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// summary is an event's detail in one line: its telling fields first.
func summary(e sdk.Event) string {
	var parts []string
	seen := map[string]bool{}
	add := func(k string) {
		if v, ok := e.Detail[k]; ok && !seen[k] {
			seen[k] = true
			b, _ := json.Marshal(v)
			s := string(b)
			if str, ok := v.(string); ok {
				s = str
			}
			parts = append(parts, k+"="+s)
		}
	}
	for _, k := range []string{"cmd", "tool", "path", "paths", "destination", "exitCode", "durationMs", "user", "cwd", "status", "error"} {
		add(k)
	}
	var rest []string
	for k := range e.Detail {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		add(k)
	}
	return strings.Join(parts, " ")
}
