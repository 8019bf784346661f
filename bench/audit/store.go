package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"
	"github.com/hutch-sandbox/hutch/internal/audit"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// sampleEvent is the i-th event of the synthetic trail: sandbox i mod
// sandboxes, one of 10 keys, and a mix shaped like an agent's session
// (mostly commands, their start and end, then file writes and API calls),
// with details as auditedge.go and audit.go record them.
func sampleEvent(i, sandboxes int) audit.Event {
	sb := fmt.Sprintf("ibench%014d", i%sandboxes)
	key := fmt.Sprintf("key_%016x", (i%sandboxes)%10)
	cmd := fmt.Sprintf("/bin/bash -l -c 'python3 step_%d.py --out /home/user/out/%d.json'", i%97, i)
	e := audit.Event{KeyID: key, SandboxID: sb, Outcome: audit.OK}
	switch i / sandboxes % 8 {
	case 0, 2, 4:
		e.Kind, e.Action = audit.KindCommand, "command.start"
		e.Detail = map[string]any{"cmd": cmd, "user": "user", "cwd": "/home/user", "pid": 1000 + i%30000}
	case 1, 3, 5:
		e.Kind, e.Action = audit.KindCommand, "command.end"
		e.Detail = map[string]any{"cmd": cmd, "pid": 1000 + i%30000, "exitCode": 0, "exited": true, "status": "exit status 0", "durationMs": 12 + i%500}
	case 6:
		e.Kind, e.Action = audit.KindFile, "file.write"
		e.Detail = map[string]any{"user": "user", "path": fmt.Sprintf("/home/user/in/%d.csv", i), "paths": []string{fmt.Sprintf("/home/user/in/%d.csv", i)}, "status": 200}
	default:
		e.Kind, e.Action = audit.KindAPI, "sandbox.timeout"
		e.Detail = map[string]any{"status": 204, "durationMs": 0}
	}
	return e
}

// storedEvent is e as audit.Log hands it to the store.
func storedEvent(e audit.Event, t time.Time) store.Event {
	d, _ := json.Marshal(e.Detail)
	return store.Event{Time: t.UTC(), KeyID: e.KeyID, SandboxID: e.SandboxID, Kind: e.Kind, Action: e.Action, Outcome: e.Outcome, Detail: d}
}

// writerResult is the writer section's numbers.
type writerResult struct {
	n               int
	logElapsed      time.Duration   // Record × n, then Flush, through audit.Log
	record          []time.Duration // each Record call, sorted
	batches         []time.Duration // AppendEvents of BatchSize events, sorted
	batchElapsed    time.Duration
	singles         []time.Duration // AppendEvents of one event, sorted
	emptySize, size int64           // the database's bytes: fresh, and with n events
	detailBytes     int64           // the details' JSON, summed
	filledDir       string          // data directory holding the n events
	err             error
}

// dbSize is the database's bytes with its WAL and shared memory, if any.
func dbSize(dir string) int64 {
	var sum int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(filepath.Join(dir, "hutch.db"+suffix)); err == nil {
			sum += fi.Size()
		}
	}
	return sum
}

// measureWriter measures, in this process, in fresh databases under
// b.cfg.dir: audit.Log's throughput (Record n events, then Flush), the
// commit of a batch of audit.BatchSize events (store.AppendEvents, the
// call audit.Log's writer makes; this fills the database the /events
// section serves) and of one event (what an fsync per event would cost),
// and the database's size.
func (b *bench) measureWriter(ctx context.Context) *writerResult {
	r := &writerResult{n: b.cfg.events}
	fresh := func(name string) (*store.Store, string, error) {
		dir := filepath.Join(b.cfg.dir, name)
		if err := os.RemoveAll(dir); err != nil {
			return nil, "", err
		}
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, "", err
		}
		st, err := store.Open(ctx, filepath.Join(dir, "hutch.db"))
		return st, dir, err
	}

	// 1. Through audit.Log, as hutch serve records.
	fmt.Printf("%-58s ", fmt.Sprintf("audit.Log: Record × %d, then Flush", r.n))
	st, dir, err := fresh("writer-log")
	if err != nil {
		r.err = err
		return r
	}
	r.emptySize = dbSize(dir)
	events := make([]audit.Event, r.n)
	for i := range events {
		events[i] = sampleEvent(i, b.cfg.sandboxes)
	}
	l := audit.New(audit.Options{Store: st})
	r.record = make([]time.Duration, 0, r.n)
	t0 := time.Now()
	for i := range events {
		t := time.Now()
		l.Record(events[i])
		r.record = append(r.record, time.Since(t))
	}
	l.Flush()
	r.logElapsed = time.Since(t0)
	l.Close()
	st.Close()
	slices.Sort(r.record)
	fmt.Printf("%.0f events/s\n", float64(r.n)/r.logElapsed.Seconds())

	// 2. Batches of BatchSize straight into the store: the writer's
	// commits one by one. These are the /events section's events.
	fmt.Printf("%-58s ", fmt.Sprintf("store.AppendEvents of %d events × %d", audit.BatchSize, (r.n+audit.BatchSize-1)/audit.BatchSize))
	st, dir, err = fresh("events")
	if err != nil {
		r.err = err
		return r
	}
	base := time.Now()
	batch := make([]store.Event, 0, audit.BatchSize)
	commit := func() error {
		t := time.Now()
		err := st.AppendEvents(ctx, batch)
		r.batches = append(r.batches, time.Since(t))
		batch = batch[:0]
		return err
	}
	t0 = time.Now()
	for i := range events {
		se := storedEvent(events[i], base.Add(time.Duration(i)*time.Millisecond))
		r.detailBytes += int64(len(se.Detail))
		batch = append(batch, se)
		if len(batch) == audit.BatchSize {
			if err := commit(); err != nil {
				r.err = err
				st.Close()
				return r
			}
		}
	}
	if len(batch) > 0 {
		if err := commit(); err != nil {
			r.err = err
			st.Close()
			return r
		}
	}
	r.batchElapsed = time.Since(t0)
	// Closing the last connection checkpoints the WAL into the database.
	if err := st.Close(); err != nil {
		r.err = err
		return r
	}
	r.size = dbSize(dir)
	r.filledDir = dir
	slices.Sort(r.batches)
	fmt.Printf("%.0f events/s\n", float64(r.n)/r.batchElapsed.Seconds())

	// 3. One event per commit, in a third store.
	fmt.Printf("%-58s ", fmt.Sprintf("store.AppendEvents of 1 event × %d", b.cfg.n))
	st, _, err = fresh("writer-single")
	if err != nil {
		r.err = err
		return r
	}
	for i := 0; i < b.cfg.n && ctx.Err() == nil; i++ {
		se := []store.Event{storedEvent(events[i], time.Now())}
		t := time.Now()
		if err := st.AppendEvents(ctx, se); err != nil {
			r.err = err
			break
		}
		r.singles = append(r.singles, time.Since(t))
	}
	st.Close()
	slices.Sort(r.singles)
	fmt.Printf("p50 %s ms\n", ms(harness.Pct(r.singles, 0.5)))
	return r
}

func (r *writerResult) print() {
	if r.err != nil {
		fmt.Printf("writer: unavailable: %s\n", harness.OneLine(r.err.Error()))
	}
	rows := [][]string{{"writer (in this harness, fresh database, synchronous=FULL)", "n", "events/s", "p50", "p95", "p99", "max"}}
	pcts := func(t []time.Duration) []string {
		if len(t) == 0 {
			return []string{"-", "-", "-", "-"}
		}
		return []string{ms(harness.Pct(t, 0.5)), ms(harness.Pct(t, 0.95)), ms(harness.Pct(t, 0.99)), ms(t[len(t)-1])}
	}
	rate := func(n int, d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f", float64(n)/d.Seconds())
	}
	rows = append(rows, append([]string{"audit.Log: Record × n then Flush (times: each Record call)", fmt.Sprint(len(r.record)), rate(r.n, r.logElapsed)}, pcts(r.record)...))
	rows = append(rows, append([]string{fmt.Sprintf("store.AppendEvents, %d events a commit (times: each commit)", audit.BatchSize), fmt.Sprint(len(r.batches)), rate(r.n, r.batchElapsed)}, pcts(r.batches)...))
	var singleTotal time.Duration
	for _, d := range r.singles {
		singleTotal += d
	}
	rows = append(rows, append([]string{"store.AppendEvents, 1 event a commit (times: each commit)", fmt.Sprint(len(r.singles)), rate(len(r.singles), singleTotal)}, pcts(r.singles)...))
	harness.PrintTable(rows)
	if r.size > 0 && r.n > 0 {
		per := float64(r.size-r.emptySize) / float64(r.n)
		fmt.Printf("database: %.1f MiB with %d events (hutch.db after its WAL is checkpointed; a fresh one is %d KiB): %.0f bytes per event, %.1f MiB per 100k events; their details' JSON alone %.0f bytes per event\n",
			float64(r.size)/(1<<20), r.n, r.emptySize>>10, per, per*100000/(1<<20), float64(r.detailBytes)/float64(r.n))
	}
}

// eventsRow is one GET /events query's latency.
type eventsRow struct {
	name  string
	query func(i int) string
	times []time.Duration
	bytes int64 // of the last answer
	count int   // events in the last answer
	err   string
}

// measureEvents times GET /events against srv, whose store holds the
// writer section's events: each query after -warmup unmeasured ones, on a
// kept-alive connection, from sending the request to reading the whole
// answer.
func (b *bench) measureEvents(srv *server) []*eventsRow {
	sbx := func(i int) string { return fmt.Sprintf("ibench%014d", i%b.cfg.sandboxes) }
	rows := []*eventsRow{
		{name: "GET /events?sandboxID=…&limit=100", query: func(i int) string { return "sandboxID=" + sbx(i) + "&limit=100" }},
		{name: "GET /events?sandboxID=…&limit=1000", query: func(i int) string { return "sandboxID=" + sbx(i) + "&limit=1000" }},
		{name: "GET /events?limit=1000", query: func(int) string { return "limit=1000" }},
		{name: "GET /events?sandboxID=…&after=… (a follower's cursor, last 10)", query: func(i int) string {
			// Seqs are 1..events in order; sandbox k's last 10 events are
			// the last 10 × sandboxes seqs.
			return fmt.Sprintf("sandboxID=%s&after=%d", sbx(i), b.cfg.events-10*b.cfg.sandboxes)
		}},
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	get := func(q string) (time.Duration, int64, int, error) {
		req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, srv.url+"/events?"+q, nil)
		if err != nil {
			return 0, 0, 0, err
		}
		req.Header.Set("X-API-Key", b.key)
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, 0, 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		if err != nil {
			return 0, 0, 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, 0, 0, fmt.Errorf("%s: %s", resp.Status, harness.OneLine(string(body)))
		}
		var out []json.RawMessage
		if err := json.Unmarshal(body, &out); err != nil {
			return 0, 0, 0, err
		}
		return d, int64(len(body)), len(out), nil
	}
	for _, r := range rows {
		fmt.Printf("%-58s ", r.name)
		for i := 0; i < b.cfg.warmup; i++ {
			if _, _, _, err := get(r.query(i)); err != nil {
				r.err = harness.OneLine(err.Error())
				break
			}
		}
		for i := 0; i < b.cfg.n && r.err == "" && b.ctx.Err() == nil; i++ {
			d, n, c, err := get(r.query(i))
			if err != nil {
				r.err = harness.OneLine(err.Error())
				break
			}
			r.times, r.bytes, r.count = append(r.times, d), n, c
		}
		slices.Sort(r.times)
		if r.err != "" {
			fmt.Println("failed:", r.err)
		} else {
			fmt.Printf("p50 %s ms\n", ms(harness.Pct(r.times, 0.5)))
		}
	}
	return rows
}

func printEvents(rows []*eventsRow) {
	table := [][]string{{"query", "n", "events", "KiB", "p50", "p95", "p99"}}
	for _, r := range rows {
		if r.err != "" || len(r.times) == 0 {
			table = append(table, harness.UnavailableRow(r.name, len(table[0]), r.err))
			continue
		}
		table = append(table, []string{r.name, fmt.Sprint(len(r.times)), fmt.Sprint(r.count), fmt.Sprintf("%.1f", float64(r.bytes)/1024),
			ms(harness.Pct(r.times, 0.5)), ms(harness.Pct(r.times, 0.95)), ms(harness.Pct(r.times, 0.99))})
	}
	harness.PrintTable(table)
}
