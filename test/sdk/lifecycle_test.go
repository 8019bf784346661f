package sdk_test

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// unknownID is a well-formed id no server has.
const unknownID = "inosuchsandbox0000000"

// within fails unless got is within tol of want.
func within(t *testing.T, what string, got, want, tol time.Duration) {
	t.Helper()
	if got < want-tol || got > want+tol {
		t.Errorf("%s = %v, want %v ± %v", what, got, want, tol)
	}
}

// TestLifecycle: create, connect, getInfo, timeouts, list and pages,
// metrics, logs, kill, and the errors of each.
func TestLifecycle(t *testing.T) {
	e := startServer(t)
	ctx := t.Context()

	// Made first so that its first metrics sample (one every 5 s) is
	// there by the time the metrics subtest runs.
	metricsSbx := e.sandbox(t, sdk.CreateOptions{Timeout: 2 * time.Minute})

	t.Run("create, getInfo, setTimeout, connect, kill", func(t *testing.T) {
		md := map[string]string{"suite": unique("suite"), "k y": "v&=1"}
		before := time.Now()
		sbx, err := sdk.Create(ctx, sdk.CreateOptions{
			Config: e.cfg, Metadata: md, Envs: map[string]string{"GREETING": "hi there"}, Timeout: 120 * time.Second,
		})
		must(t, err, "Create")
		killAtEnd(t, sbx)
		if !regexp.MustCompile(`^i[a-z0-9]{20}$`).MatchString(sbx.ID) {
			t.Errorf("sandbox id %q is not shaped like E2B's", sbx.ID)
		}
		if sbx.TemplateID != "base" {
			t.Errorf("TemplateID = %q, want the default template base", sbx.TemplateID)
		}
		if sbx.EnvdAccessToken == "" || sbx.EnvdVersion == "" {
			t.Errorf("the sandbox has no envd access token (%q) or version (%q)", sbx.EnvdAccessToken, sbx.EnvdVersion)
		}

		// The create-time envs are every command's default; a command's
		// own envs win.
		if got := run(t, sbx, `echo "$GREETING"`, nil).Stdout; got != "hi there\n" {
			t.Errorf("create-time env: stdout %q", got)
		}
		if got := run(t, sbx, `echo "$GREETING"`, &sdk.RunOptions{Envs: map[string]string{"GREETING": "override"}}).Stdout; got != "override\n" {
			t.Errorf("command env over create-time env: stdout %q", got)
		}
		if ok, err := sbx.IsRunning(ctx); err != nil || !ok {
			t.Errorf("IsRunning = %v, %v; want true", ok, err)
		}

		info, err := sbx.GetInfo(ctx)
		must(t, err, "GetInfo")
		if info.SandboxID != sbx.ID || info.TemplateID != "base" || info.State != sdk.StateRunning {
			t.Errorf("GetInfo: id %q template %q state %q; want %q base running", info.SandboxID, info.TemplateID, info.State, sbx.ID)
		}
		// Hutch adds the runtime the sandbox runs on.
		want := maps.Clone(md)
		want["hutch.runtime"] = serverRuntime()
		if !maps.Equal(info.Metadata, want) {
			t.Errorf("GetInfo metadata %v, want %v", info.Metadata, want)
		}
		if info.EnvdVersion != sbx.EnvdVersion || info.CPUCount < 1 || info.MemoryMB <= 0 {
			t.Errorf("GetInfo: envd %q (create said %q), %d CPUs, %d MB", info.EnvdVersion, sbx.EnvdVersion, info.CPUCount, info.MemoryMB)
		}
		// The sandbox started during Create and ends its timeout later.
		if info.StartedAt.Before(before.Add(-2*time.Second)) || info.StartedAt.After(time.Now().Add(2*time.Second)) {
			t.Errorf("startedAt %v is not during Create (%v…now)", info.StartedAt, before)
		}
		within(t, "endAt - startedAt", info.EndAt.Sub(info.StartedAt), 120*time.Second, 3*time.Second)

		// SetTimeout sets the end to now + d: it may shorten the life…
		must(t, sbx.SetTimeout(ctx, 60*time.Second), "SetTimeout(60s)")
		shorter, err := sbx.GetInfo(ctx)
		must(t, err, "GetInfo")
		if !shorter.EndAt.Before(info.EndAt) {
			t.Errorf("SetTimeout(60s): endAt %v is not before %v", shorter.EndAt, info.EndAt)
		}
		within(t, "endAt after SetTimeout(60s)", time.Until(shorter.EndAt), 60*time.Second, 3*time.Second)
		// … or lengthen it.
		must(t, sbx.SetTimeout(ctx, 200*time.Second), "SetTimeout(200s)")
		longer, err := sbx.GetInfo(ctx)
		must(t, err, "GetInfo")
		within(t, "endAt after SetTimeout(200s)", time.Until(longer.EndAt), 200*time.Second, 3*time.Second)

		// Connect by id: a new handle with the same token, whose
		// commands work; connecting never shortens the life.
		again, err := sdk.Connect(ctx, sbx.ID, sdk.ConnectOptions{Config: e.cfg, Timeout: 30 * time.Second})
		must(t, err, "Connect")
		if again.ID != sbx.ID || again.EnvdAccessToken != sbx.EnvdAccessToken || again.EnvdVersion != sbx.EnvdVersion {
			t.Errorf("Connect: id %q token %q version %q; create had %q %q %q",
				again.ID, again.EnvdAccessToken, again.EnvdVersion, sbx.ID, sbx.EnvdAccessToken, sbx.EnvdVersion)
		}
		if got := run(t, again, "echo connected; echo $GREETING", nil).Stdout; got != "connected\nhi there\n" {
			t.Errorf("command through the connected handle: stdout %q", got)
		}
		afterConnect, err := again.GetInfo(ctx)
		must(t, err, "GetInfo")
		if !afterConnect.EndAt.Equal(longer.EndAt) {
			t.Errorf("Connect(30s) moved endAt from %v to %v", longer.EndAt, afterConnect.EndAt)
		}

		// Kill, then everything about the sandbox is gone.
		must(t, sbx.Kill(ctx), "Kill")
		is(t, sbx.Kill(ctx), sdk.ErrNotFound, "second Kill")
		is(t, e.client.Kill(ctx, sbx.ID), sdk.ErrNotFound, "Client.Kill of a killed sandbox")
		if ok, err := sbx.IsRunning(ctx); err != nil || ok {
			t.Errorf("IsRunning after Kill = %v, %v; want false, nil", ok, err)
		}
		_, err = sbx.Commands.Run(ctx, "true", nil)
		is(t, err, sdk.ErrNotRunning, "Run after Kill")
		_, err = again.Files.Read(ctx, "/etc/hostname", nil)
		is(t, err, sdk.ErrNotRunning, "Files.Read after Kill")
		_, err = sbx.GetInfo(ctx)
		is(t, err, sdk.ErrNotFound, "GetInfo after Kill")
		_, err = sdk.Connect(ctx, sbx.ID, sdk.ConnectOptions{Config: e.cfg})
		is(t, err, sdk.ErrNotFound, "Connect after Kill")
		is(t, sbx.SetTimeout(ctx, time.Minute), sdk.ErrNotFound, "SetTimeout after Kill")
		_, err = sbx.GetMetrics(ctx, sdk.MetricsOptions{})
		is(t, err, sdk.ErrNotFound, "GetMetrics after Kill")
	})

	t.Run("unknown id", func(t *testing.T) {
		for name, call := range map[string]func() error{
			"GetInfo":    func() error { _, err := e.client.GetInfo(ctx, unknownID); return err },
			"Connect":    func() error { _, err := e.client.Connect(ctx, unknownID, sdk.ConnectOptions{}); return err },
			"Kill":       func() error { return e.client.Kill(ctx, unknownID) },
			"SetTimeout": func() error { return e.client.SetTimeout(ctx, unknownID, time.Minute) },
			"GetMetrics": func() error { _, err := e.client.GetMetrics(ctx, unknownID, sdk.MetricsOptions{}); return err },
		} {
			err := call()
			is(t, err, sdk.ErrNotFound, name)
			var se *sdk.Error
			if !errors.As(err, &se) || se.StatusCode != 404 {
				t.Errorf("%s: %v is not an *sdk.Error with status 404", name, err)
			}
		}
	})

	t.Run("wrong API key", func(t *testing.T) {
		bad := e.cfg
		bad.APIKey = "e2b_" + strings.Repeat("0", 40)
		c, err := sdk.NewClient(bad)
		must(t, err, "NewClient with a (wrong) key")
		for name, call := range map[string]func() error{
			"Create":    func() error { _, err := c.Create(ctx, sdk.CreateOptions{}); return err },
			"GetInfo":   func() error { _, err := c.GetInfo(ctx, metricsSbx.ID); return err },
			"Connect":   func() error { _, err := c.Connect(ctx, metricsSbx.ID, sdk.ConnectOptions{}); return err },
			"Kill":      func() error { return c.Kill(ctx, metricsSbx.ID) },
			"NextItems": func() error { _, err := c.List(sdk.ListOptions{}).NextItems(ctx); return err },
		} {
			is(t, call(), sdk.ErrAuthentication, name)
		}
		// The refused Kill did nothing.
		if ok, err := metricsSbx.IsRunning(ctx); err != nil || !ok {
			t.Errorf("IsRunning after a Kill with a wrong key = %v, %v", ok, err)
		}
	})

	t.Run("no API key", func(t *testing.T) {
		for _, k := range []string{"HUTCH_API_KEY", "E2B_API_KEY"} {
			t.Setenv(k, "")
		}
		_, err := sdk.NewClient(sdk.Config{APIURL: e.cfg.APIURL})
		is(t, err, sdk.ErrAuthentication, "NewClient without a key")
		_, err = sdk.Create(ctx, sdk.CreateOptions{Config: sdk.Config{APIURL: e.cfg.APIURL}})
		is(t, err, sdk.ErrAuthentication, "Create without a key")
		// A key from the environment is enough.
		t.Setenv("E2B_API_KEY", hutchtest.TestKey)
		c, err := sdk.NewClient(sdk.Config{APIURL: e.cfg.APIURL})
		must(t, err, "NewClient with E2B_API_KEY")
		_, err = c.GetInfo(ctx, metricsSbx.ID)
		must(t, err, "GetInfo with the key from E2B_API_KEY")
	})

	t.Run("an expired sandbox is gone", func(t *testing.T) {
		sbx := e.sandbox(t, sdk.CreateOptions{Timeout: time.Second})
		waitFor(t, 20*time.Second, func() string { return "IsRunning to turn false" }, func() bool {
			ok, err := sbx.IsRunning(ctx)
			must(t, err, "IsRunning")
			return !ok
		})
		// The control plane forgets it too (a few ms later: it kills the
		// sandbox first, then removes its record).
		var err error
		waitFor(t, 10*time.Second, func() string {
			return fmt.Sprintf("GetInfo of the expired sandbox to fail with ErrNotFound (got %v)", err)
		}, func() bool {
			_, err = sbx.GetInfo(ctx)
			return errors.Is(err, sdk.ErrNotFound)
		})
		_, err = sdk.Connect(ctx, sbx.ID, sdk.ConnectOptions{Config: e.cfg})
		is(t, err, sdk.ErrNotFound, "Connect to an expired sandbox")
		_, err = sbx.Commands.Run(ctx, "true", nil)
		is(t, err, sdk.ErrNotRunning, "Run in an expired sandbox")
	})

	t.Run("list: metadata filter and pages", func(t *testing.T) {
		tag := unique("page")
		var made []string
		for range 3 {
			made = append(made, e.sandbox(t, sdk.CreateOptions{Metadata: map[string]string{"page": tag, "k y": "v&=1"}}).ID)
		}
		slices.Sort(made)
		md := map[string]string{"page": tag}

		// Page by page: 2 + 1, then nothing more.
		p, err := sdk.List(sdk.ListOptions{Config: e.cfg, Metadata: md, Limit: 2})
		must(t, err, "List")
		if !p.HasNext() {
			t.Fatal("HasNext is false before the first page")
		}
		var seen []string
		var sizes []int
		for p.HasNext() {
			items, err := p.NextItems(ctx)
			must(t, err, "NextItems")
			sizes = append(sizes, len(items))
			for _, it := range items {
				seen = append(seen, it.SandboxID)
				if it.Metadata["page"] != tag || it.Metadata["k y"] != "v&=1" || it.State != sdk.StateRunning || it.TemplateID != "base" {
					t.Errorf("listed %s: metadata %v state %q template %q", it.SandboxID, it.Metadata, it.State, it.TemplateID)
				}
			}
			if len(sizes) > 5 {
				t.Fatalf("more pages than sandboxes: %v", sizes)
			}
		}
		if !slices.Equal(sizes, []int{2, 1}) {
			t.Errorf("page sizes %v, want [2 1]", sizes)
		}
		slices.Sort(seen)
		if !slices.Equal(seen, made) {
			t.Errorf("pages listed %v, want each of %v once", seen, made)
		}
		if p.NextToken() != "" {
			t.Errorf("NextToken after the last page = %q", p.NextToken())
		}
		if items, err := p.NextItems(ctx); err != nil || items != nil {
			t.Errorf("NextItems after the last page = %v, %v; want nil, nil", items, err)
		}

		// All ranges over every page.
		var all []string
		for it, err := range e.client.List(sdk.ListOptions{Metadata: md, Limit: 2}).All(ctx) {
			must(t, err, "All")
			all = append(all, it.SandboxID)
		}
		slices.Sort(all)
		if !slices.Equal(all, made) {
			t.Errorf("All listed %v, want each of %v once", all, made)
		}

		// A listing resumes from a NextToken, oldest first with Ascending.
		first := e.client.List(sdk.ListOptions{Metadata: md, Limit: 1, Ascending: true})
		page1, err := first.NextItems(ctx)
		must(t, err, "NextItems")
		if len(page1) != 1 || first.NextToken() == "" {
			t.Fatalf("first page of 1: %d items, next token %q", len(page1), first.NextToken())
		}
		rest := []sdk.SandboxInfo{page1[0]}
		for it, err := range e.client.List(sdk.ListOptions{Metadata: md, Limit: 1, Ascending: true, NextToken: first.NextToken()}).All(ctx) {
			must(t, err, "All from a NextToken")
			rest = append(rest, it)
		}
		var ids []string
		for i, it := range rest {
			ids = append(ids, it.SandboxID)
			if i > 0 && it.StartedAt.Before(rest[i-1].StartedAt) {
				t.Errorf("Ascending listing is not oldest first: %v then %v", rest[i-1].StartedAt, it.StartedAt)
			}
		}
		slices.Sort(ids)
		if !slices.Equal(ids, made) {
			t.Errorf("resumed listing gave %v, want %v", ids, made)
		}

		// Filters that match nothing.
		for name, opts := range map[string]sdk.ListOptions{
			"other metadata value": {Metadata: map[string]string{"page": tag, "k y": "other"}},
			"unknown metadata key": {Metadata: map[string]string{"page": tag, "nokey": "x"}},
			"state paused":         {Metadata: md, States: []string{sdk.StatePaused}},
		} {
			p := e.client.List(opts)
			items, err := p.NextItems(ctx)
			must(t, err, name)
			if len(items) != 0 || p.HasNext() {
				t.Errorf("%s: listed %d sandboxes (more: %v), want none", name, len(items), p.HasNext())
			}
		}
		items, err := e.client.List(sdk.ListOptions{Metadata: map[string]string{"k y": "v&=1", "page": tag}, States: []string{sdk.StateRunning}}).NextItems(ctx)
		must(t, err, "List running with both metadata pairs")
		if len(items) != 3 {
			t.Errorf("List running with both metadata pairs: %d sandboxes, want 3", len(items))
		}
	})

	t.Run("metrics", func(t *testing.T) {
		var samples []sdk.Metric
		waitFor(t, 20*time.Second, func() string { return "a first metrics sample" }, func() bool {
			var err error
			samples, err = metricsSbx.GetMetrics(ctx, sdk.MetricsOptions{})
			must(t, err, "GetMetrics")
			return len(samples) > 0
		})
		info, err := metricsSbx.GetInfo(ctx)
		must(t, err, "GetInfo")
		m := samples[0]
		if m.CPUCount != info.CPUCount {
			t.Errorf("sample cpuCount %d, the sandbox has %d", m.CPUCount, info.CPUCount)
		}
		if m.MemTotal != int64(info.MemoryMB)<<20 {
			t.Errorf("sample memTotal %d, the sandbox has %d MB", m.MemTotal, info.MemoryMB)
		}
		if m.MemUsed <= 0 || m.MemUsed > m.MemTotal {
			t.Errorf("sample memUsed %d of %d", m.MemUsed, m.MemTotal)
		}
		if m.DiskTotal <= 0 || m.DiskUsed < 0 || m.DiskUsed > m.DiskTotal {
			t.Errorf("sample disk %d of %d", m.DiskUsed, m.DiskTotal)
		}
		if m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
			t.Errorf("sample cpuUsedPct %v", m.CPUUsedPct)
		}
		if m.Timestamp.Before(info.StartedAt.Add(-time.Second)) || m.Timestamp.After(time.Now().Add(time.Second)) {
			t.Errorf("sample timestamp %v is not between the start %v and now", m.Timestamp, info.StartedAt)
		}
		for i := 1; i < len(samples); i++ {
			if samples[i].Timestamp.Before(samples[i-1].Timestamp) {
				t.Errorf("samples are not oldest first: %v then %v", samples[i-1].Timestamp, samples[i].Timestamp)
			}
		}
		future, err := metricsSbx.GetMetrics(ctx, sdk.MetricsOptions{Start: time.Now().Add(time.Hour)})
		must(t, err, "GetMetrics from an hour ahead")
		if len(future) != 0 {
			t.Errorf("GetMetrics from an hour ahead: %d samples, want none", len(future))
		}
	})

	t.Run("logs", func(t *testing.T) {
		marker := unique("logged")
		run(t, metricsSbx, "echo "+marker, nil)
		_, err := metricsSbx.Logs(ctx, sdk.LogsOptions{})
		var se *sdk.Error
		if errors.As(err, &se) && se.StatusCode == 404 && strings.Contains(se.Message, "no such endpoint") {
			t.Skipf("the server has no logs route yet (GET /v2/sandboxes/{id}/logs answers 404: %v)", err)
		}
		must(t, err, "Logs")
		// started finds the "process started" entry of the command with
		// marker.
		started := func(logs []sdk.LogEntry, marker string) bool {
			return slices.ContainsFunc(logs, func(l sdk.LogEntry) bool {
				return l.Message == "process started" && strings.Contains(l.Fields["cmd"], marker)
			})
		}
		var logs []sdk.LogEntry
		waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("a log entry for the start of %s (got %+v)", marker, logs) }, func() bool {
			logs, err = metricsSbx.Logs(ctx, sdk.LogsOptions{})
			must(t, err, "Logs")
			return started(logs, marker)
		})
		for i, l := range logs {
			if l.Timestamp.IsZero() || l.Message == "" || l.Level == "" {
				t.Errorf("log entry %d lacks a timestamp, message or level: %+v", i, l)
			}
			if i > 0 && l.Timestamp.Before(logs[i-1].Timestamp) {
				t.Errorf("log entries are not oldest first: %v then %v", logs[i-1].Timestamp, l.Timestamp)
			}
		}
		one, err := metricsSbx.Logs(ctx, sdk.LogsOptions{Limit: 1})
		must(t, err, "Logs with Limit 1")
		if len(one) != 1 || one[0].Message != logs[0].Message || !one[0].Timestamp.Equal(logs[0].Timestamp) {
			t.Errorf("Logs with Limit 1: %+v, want the first entry %+v", one, logs[0])
		}

		// Since leaves out what came before it.
		since := time.Now()
		marker2 := unique("logged")
		run(t, metricsSbx, "echo "+marker2, nil)
		var recent []sdk.LogEntry
		waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("a log entry for the start of %s (got %+v)", marker2, recent) }, func() bool {
			recent, err = metricsSbx.Logs(ctx, sdk.LogsOptions{Since: since})
			must(t, err, "Logs with Since")
			return started(recent, marker2)
		})
		if started(recent, marker) {
			t.Errorf("Logs since %v has the start of a command run before it", since)
		}
		for _, l := range recent {
			if l.Timestamp.Before(since.Truncate(time.Millisecond)) {
				t.Errorf("Logs since %v has an entry of %v", since, l.Timestamp)
			}
		}
		later, err := metricsSbx.Logs(ctx, sdk.LogsOptions{Since: time.Now().Add(time.Hour)})
		must(t, err, "Logs since an hour ahead")
		if len(later) != 0 {
			t.Errorf("Logs since an hour ahead: %d entries, want none", len(later))
		}
		_, err = e.client.Logs(ctx, unknownID, sdk.LogsOptions{})
		is(t, err, sdk.ErrNotFound, "Logs of an unknown sandbox")
	})
}
