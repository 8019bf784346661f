package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

func TestLogsRecordProcesses(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t)
	ctx := context.Background()
	_, k1, _ := e.st.CreateKey(ctx, "a")
	_, k2, _ := e.st.CreateKey(ctx, "b")
	rec, err := m.Create(ctx, CreateRequest{KeyID: k1.ID})
	if err != nil {
		t.Fatal(err)
	}
	// The cursor below is a millisecond before this: envd's first entry
	// must be older than that.
	time.Sleep(5 * time.Millisecond)
	before := time.Now()
	if _, err := run(t, m, rec.ID, "", "exit 3"); err != nil {
		t.Fatal(err)
	}
	// envd's log reaches the host through a pipe its init copies from:
	// an entry written as the command ends may take a moment.
	var all []LogEntry
	var started, ended *LogEntry
	for deadline := time.Now().Add(5 * time.Second); ended == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if all, err = m.Logs(ctx, k1.ID, rec.ID, LogQuery{}); err != nil {
			t.Fatal(err)
		}
		started, ended = nil, nil
		for i, e := range all {
			switch e.Message {
			case "process started":
				started = &all[i]
			case "process ended":
				ended = &all[i]
			}
		}
	}
	if started == nil || ended == nil {
		t.Fatalf("no process start and end in the log: %+v", all)
	}
	if started.Fields["cmd"] != "/bin/bash -c exit 3" || started.Fields["user"] != "user" || started.Level != "info" {
		t.Errorf("start entry = %+v", started)
	}
	if ended.Fields["exit_code"] != "3" || ended.Fields["pid"] != started.Fields["pid"] {
		t.Errorf("end entry = %+v, start %+v", ended, started)
	}
	if all[0].Message != "envd started" || all[0].Time.After(started.Time) {
		t.Errorf("the log does not begin with envd's start: %+v", all[0])
	}

	// A cursor keeps what came at or after it; backward turns the order
	// round; the limit keeps the first (or, backward, the newest) entries.
	later, _ := m.Logs(ctx, k1.ID, rec.ID, LogQuery{Cursor: before.Add(-time.Millisecond)})
	for _, e := range later {
		if e.Message == "envd started" {
			t.Errorf("cursor %v kept an entry from before it: %+v", before, e)
		}
	}
	if len(later) == 0 {
		t.Error("cursor dropped every entry")
	}
	back, _ := m.Logs(ctx, k1.ID, rec.ID, LogQuery{Backward: true, Limit: 1})
	if len(back) != 1 || back[0].Message != all[len(all)-1].Message {
		t.Errorf("backward limit 1 = %+v, want the newest entry %+v", back, all[len(all)-1])
	}
	first, _ := m.Logs(ctx, k1.ID, rec.ID, LogQuery{Limit: 1})
	if len(first) != 1 || first[0].Message != "envd started" {
		t.Errorf("limit 1 = %+v", first)
	}

	// Another key cannot read them; an unknown sandbox has none.
	if _, err := m.Logs(ctx, k2.ID, rec.ID, LogQuery{}); !errdefs.IsNotFound(err) {
		t.Errorf("logs through another key: %v, want not found", err)
	}
	if _, err := m.Logs(ctx, k1.ID, "nosuch", LogQuery{}); !errdefs.IsNotFound(err) {
		t.Errorf("logs of an unknown sandbox: %v, want not found", err)
	}
}
