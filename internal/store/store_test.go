package store

import (
	"context"
	"errors"
	"fmt"
	"github.com/google/go-cmp/cmp"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hutch.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func userVersion(t *testing.T, s *Store) int {
	t.Helper()
	var v int
	if err := s.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpenPragmas(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	for _, tc := range []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"synchronous", "2"}, // FULL
		{"foreign_keys", "1"},
		{"busy_timeout", fmt.Sprint(busyTimeout.Milliseconds())},
	} {
		var got string
		if err := s.db.QueryRowContext(ctx, "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tc.pragma, err)
		}
		if got != tc.want {
			t.Errorf("PRAGMA %s = %q, want %q", tc.pragma, got, tc.want)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("database mode = %o, want 600", perm)
	}
	if _, _, err := s.CreateKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if err != nil {
			t.Fatalf("WAL mode but %s: %v", suffix, err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s mode = %o, want 600", suffix, perm)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", ":memory:", filepath.Join(t.TempDir(), "a?b.db")} {
		if _, err := Open(context.Background(), p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument", p, err)
		}
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hutch.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CreateKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, s); v != len(migrations) {
		t.Fatalf("user_version = %d, want %d", v, len(migrations))
	}
	s.Close()

	for i := 0; i < 2; i++ {
		s, err = Open(ctx, path)
		if err != nil {
			t.Fatalf("re-open %d: %v", i, err)
		}
		if v := userVersion(t, s); v != len(migrations) {
			t.Errorf("user_version after re-open = %d", v)
		}
		if n, err := s.CountKeys(ctx); err != nil || n != 1 {
			t.Errorf("CountKeys after re-open = %d, %v; want 1", n, err)
		}
		s.Close()
	}
}

func TestMigrateFromOlderSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hutch.db")
	old, err := openWith(ctx, path, migrations[:1])
	if err != nil {
		t.Fatal(err)
	}
	if v := userVersion(t, old); v != 1 {
		t.Fatalf("old user_version = %d", v)
	}
	// A key as Hutch wrote it before roles (migration 6).
	k := Key{ID: "key_00000000000000aa"}
	if _, err := old.db.ExecContext(ctx, `INSERT INTO api_keys (id, name, prefix, hash, created) VALUES (?, 'old', '0000aaaa', ?, ?)`,
		k.ID, hashKey(KeyPrefix+strings.Repeat("a", keyHexLen)), toNanos(time.Now())); err != nil {
		t.Fatal(err)
	}
	// A row as Hutch wrote it before migration 3: the E2B network object
	// verbatim, with a field Hutch never applied.
	if _, err := old.db.ExecContext(ctx, `INSERT INTO sandboxes (id, template_id, client_id, network,
		allow_internet_access, started_at, end_at, state, key_id) VALUES (?, 'base', '6532622b', ?, 1, ?, ?, 'running', ?)`,
		"old1", `{"allowOut":["1.1.1.1","example.com"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":false,`+
			`"maskRequestHost":"${PORT}.example","httpsPorts":[8443]}`,
		toNanos(time.Now()), toNanos(time.Now().Add(time.Hour)), k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := old.db.ExecContext(ctx, `INSERT INTO sandboxes (id, template_id, started_at, end_at, state)
		VALUES ('old2', 'base', 1, 2, 'running')`); err != nil {
		t.Fatal(err)
	}
	old.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("open older schema: %v", err)
	}
	defer s.Close()
	if v := userVersion(t, s); v != len(migrations) {
		t.Errorf("user_version = %d, want %d", v, len(migrations))
	}
	// Keys made before roles were the operator's: admin.
	if got, err := s.GetKey(ctx, k.ID); err != nil || got.Role != RoleAdmin {
		t.Errorf("old key after migration: role %q, %v; want admin", got.Role, err)
	}
	var n int
	if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'sandboxes_key_started'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("index from migration 2 missing: %d, %v", n, err)
	}
	got, err := s.GetSandbox(ctx, k.ID, "old1")
	if err != nil {
		t.Fatalf("data lost by migration: %v", err)
	}
	no, yes := false, true
	want := Sandbox{ID: "old1", TemplateID: "base", AllowInternetAccess: &yes,
		AllowOut: []string{"1.1.1.1", "example.com"}, DenyOut: []string{"0.0.0.0/0"},
		AllowPublicTraffic: &no, MaskRequestHost: "${PORT}.example",
		Metadata: map[string]string{}, EnvVars: map[string]string{},
		StartedAt: got.StartedAt, EndAt: got.EndAt, State: StateRunning, KeyID: k.ID}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the network object became (-want +got):\n%s", diff)
	}
	got, err = s.GetSandbox(ctx, "", "old2")
	if err != nil || got.AllowOut == nil || got.DenyOut == nil || got.AllowPublicTraffic != nil || got.MaskRequestHost != "" {
		t.Errorf("a row without a network object: %+v, %v", got, err)
	}
}

func TestRefuseNewerSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hutch.db")
	newer := append(append([]string{}, migrations...), `CREATE TABLE future (x INTEGER)`)
	s, err := openWith(ctx, path, newer)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err := Open(ctx, path); err == nil {
		s.Close()
		t.Fatal("Open of a database from a newer schema succeeded")
	}
}

func TestConcurrentOpenOfFreshFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "hutch.db")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(ctx, path)
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Open: %v (code %d)", err, sqliteCode(err))
	}
}

// TestConcurrentWriters hammers the file from 20 goroutines spread over two
// *Store handles (as two processes would), mixing transactions (AddKey) with
// single-statement writes, and expects no "database is locked".
func TestConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	a, path := openTest(t)
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, k, err := a.CreateKey(ctx, "owner")
	if err != nil {
		t.Fatal(err)
	}

	const workers, perWorker = 20, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorker*4)
	for w := 0; w < workers; w++ {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				id := fmt.Sprintf("w%di%d", w, i)
				if err := s.CreateSandbox(ctx, &Sandbox{ID: id, TemplateID: "base", KeyID: k.ID, EndAt: time.Now().Add(time.Minute)}); err != nil {
					errs <- err
					continue
				}
				if _, err := s.ExtendEndAt(ctx, id, time.Now().Add(time.Hour)); err != nil {
					errs <- err
				}
				if _, _, err := s.CreateKey(ctx, id); err != nil {
					errs <- err
				}
				if _, _, err := s.ListSandboxes(ctx, ListFilter{KeyID: k.ID, Limit: 5}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent write: %v", err)
	}
	all, err := b.AllSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != workers*perWorker {
		t.Errorf("AllSandboxes = %d, want %d", len(all), workers*perWorker)
	}
	if n, err := a.CountKeys(ctx); err != nil || n != workers*perWorker+1 {
		t.Errorf("CountKeys = %d, %v", n, err)
	}
}
