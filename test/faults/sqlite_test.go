package faults

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	_ "modernc.org/sqlite"
)

// TestDatabaseLocked: while another process holds the write lock of the
// server's database (BEGIN EXCLUSIVE) past the server's busy timeout,
// requests that write fail with a clear error in E2B's JSON shape (503:
// the database is locked, try again) — not a
// hang, not a success whose record is lost — and leave nothing half made;
// once the lock goes, they succeed, and what was made before is intact.
func TestDatabaseLocked(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "native")
	e.start("")
	before := e.sandbox(t)

	db, err := sql.Open("sqlite", "file:"+filepath.Join(e.srv.DataDir, "hutch.db")+"?_pragma=busy_timeout(1000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	// Held until each request has answered, however long the server
	// waits: a server that waited for ever would fail the test at the
	// client's request timeout.
	_, createErr := e.client.Create(ctx, sdk.CreateOptions{Timeout: 10 * time.Minute})
	killErr := e.client.Kill(ctx, before.ID)
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	for _, c := range []struct {
		what string
		err  error
	}{{"create", createErr}, {"kill", killErr}} {
		var se *sdk.Error
		switch {
		case c.err == nil:
			t.Errorf("%s succeeded while the database was locked", c.what)
		case !errors.As(c.err, &se) || se.StatusCode != http.StatusServiceUnavailable || !strings.Contains(se.Message, "database") || !strings.Contains(se.Message, "try again"):
			t.Errorf("%s while the database was locked: %v; want 503 saying the database is locked, try again", c.what, c.err)
		default:
			t.Logf("%s while the database was locked: %d %s", c.what, se.StatusCode, se.Message)
		}
	}
	// Whatever failed left nothing half: the kill did not happen (the
	// sandbox still works), the create left no sandbox.
	listed := e.consistent(t, []string{before.ID}, onDisk(e.srv.DataDir))
	if len(listed) != 1 {
		t.Errorf("after the lock: %d sandboxes listed; want the one made before", len(listed))
	}
	if _, err := e.client.Create(ctx, sdk.CreateOptions{Timeout: time.Minute}); err != nil {
		t.Errorf("create after the lock went: %v", err)
	}
	if err := e.client.Kill(ctx, before.ID); err != nil {
		t.Errorf("kill after the lock went: %v", err)
	}
}
