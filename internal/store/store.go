// Package store is the durable state of Hutch's control plane (`hutch serve`):
// API keys, volumes and the record of every sandbox the control plane must
// remember across restarts. It is a thin layer of SQL over a single SQLite file
// (modernc.org/sqlite, pure Go, driver name "sqlite").
//
// Durability. The database runs in WAL journal mode with synchronous=FULL, so
// a method that returned nil has its write on stable storage: it survives a
// crash of the process and a power loss of the host (see Open). Readers never
// block the writer and the writer never blocks readers.
//
// Concurrency. A *Store is safe for concurrent use by many goroutines, and
// several *Store values (in one or several processes) may open the same file:
// every connection waits on a busy timeout instead of failing with "database
// is locked", and every transaction begins IMMEDIATE so that two writers never
// deadlock on a read-to-write lock upgrade.
//
// Errors. Methods wrap the classes of internal/errdefs where the caller has a
// decision to take: errdefs.ErrNotFound (no such row, or a row the caller's
// key may not see), errdefs.ErrAlreadyExists (duplicate identity) and
// errdefs.ErrInvalidArgument (input that can never succeed as written, such as
// a malformed key or list token). Any other error is an I/O or SQLite failure
// and is returned wrapped with context.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// busyTimeout is how long a connection waits for a lock held by another
// connection (of this or another process) before giving up with SQLITE_BUSY.
// Control-plane transactions are a handful of row writes, so a lock is held
// for milliseconds; ten seconds covers an fsync on a slow disk many times
// over.
const busyTimeout = 10 * time.Second

// Store is an open control-plane database. The zero value is not usable; get
// one from Open and release it with Close. All methods are safe for
// concurrent use.
type Store struct {
	db *sql.DB
	// onChange, when set (OnChange), is told of each sandbox record
	// changed in place.
	onChange func(ctx context.Context, id string)
}

// OnChange makes the store call f after each change in place to a
// sandbox's record (its state, times, runtime or egress), in the goroutine
// that made it: a cluster publishes the change (sandbox.Registry). Call it
// once, before the store is used.
func (s *Store) OnChange(f func(ctx context.Context, id string)) { s.onChange = f }

// Open opens the database at path, creating it (mode 0600) if it does not
// exist, and brings its schema up to date by applying, each in its own
// transaction, the migrations it has not seen yet. Re-opening an up-to-date
// database changes nothing. Several processes may Open the same file at the
// same time; migrations are serialised by the database's write lock.
//
// Every connection is configured with:
//
//   - journal_mode=WAL: readers and the writer do not block each other, and a
//     commit is one append to the log.
//   - synchronous=FULL: the WAL is fsynced at every commit. With NORMAL a
//     committed transaction survives a crash of the process but may be rolled
//     back by a power loss or kernel panic; DESIGN.md promises that "every
//     write the API acknowledged is on disk", and the control plane writes a
//     few rows per sandbox lifecycle event, so the cost of one fsync per
//     commit is negligible next to starting a sandbox.
//   - foreign_keys=ON, busy_timeout, and BEGIN IMMEDIATE for transactions.
//
// path must name a file on a local filesystem (WAL needs shared memory, so
// network filesystems and ":memory:" are not supported); an empty path or one
// that contains '?' is rejected with errdefs.ErrInvalidArgument. A database
// written by a newer Hutch (a schema version this binary does not know) is
// refused rather than used.
func Open(ctx context.Context, path string) (*Store, error) {
	return openWith(ctx, path, migrations)
}

// openWith is Open with an explicit migration list, so tests can create a
// database at an older schema version.
func openWith(ctx context.Context, path string, migs []string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.ContainsRune(path, '?') {
		return nil, errorf("store: database path %q: %w", path, errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, errorf("store: database path %q: %w", path, err)
	}
	// Create the file ourselves so that it is born 0600: it holds sandbox
	// access tokens. SQLite gives the -wal and -shm files the mode of the
	// database file.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, errorf("store: open %s: %w", abs, err)
	}
	if err := f.Close(); err != nil {
		return nil, errorf("store: open %s: %w", abs, err)
	}

	// The path is absolute, so it never starts with "file:" and the driver
	// strips the query string before handing the name to SQLite.
	dsn := abs + "?" + strings.Join([]string{
		fmt.Sprintf("_busy_timeout=%d", busyTimeout.Milliseconds()),
		"_journal_mode=WAL",
		"_synchronous=FULL",
		"_foreign_keys=1",
		"_txlock=immediate",
	}, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, errorf("store: open %s: %w", abs, err)
	}
	// A few connections, kept: SQLite serves one writer at a time anyway,
	// and a connection's descriptors (the database, its -wal and -shm)
	// are not given back while any other connection holds a lock on the
	// file, which in WAL mode an open one always does. Unbounded, a burst
	// of requests (one lookup each) left thousands of descriptors open
	// until the server restarted (review 23).
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	s := &Store{db: db}
	if err := s.migrateRetrying(ctx, migs); err != nil {
		db.Close()
		return nil, errorf("store: open %s: %w", abs, err)
	}
	return s, nil
}

// maxConns is the most connections to the database open at once.
const maxConns = 8

// Close closes the database. Calls made after Close fail; Close itself is
// safe to call more than once.
func (s *Store) Close() error {
	return s.db.Close()
}

// migrations is the ordered schema history. migrations[i] takes the database
// from user_version i to i+1. Append only: never edit or reorder an entry
// that has shipped.
var migrations = []string{
	// 1: API keys and sandboxes.
	`
CREATE TABLE api_keys (
	id       TEXT PRIMARY KEY,
	name     TEXT NOT NULL,
	prefix   TEXT NOT NULL,
	hash     BLOB NOT NULL UNIQUE,
	created  INTEGER NOT NULL,
	revoked  INTEGER
) STRICT;

CREATE TABLE sandboxes (
	id                    TEXT PRIMARY KEY,
	template_id           TEXT NOT NULL,
	alias                 TEXT NOT NULL DEFAULT '',
	client_id             TEXT NOT NULL DEFAULT '',
	envd_version          TEXT NOT NULL DEFAULT '',
	envd_access_token     TEXT NOT NULL DEFAULT '',
	traffic_access_token  TEXT NOT NULL DEFAULT '',
	secure                INTEGER NOT NULL DEFAULT 0,
	allow_internet_access INTEGER,
	auto_pause            INTEGER NOT NULL DEFAULT 0,
	auto_resume           INTEGER NOT NULL DEFAULT 0,
	network               TEXT NOT NULL DEFAULT '',
	metadata              TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
	env_vars              TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(env_vars)),
	started_at            INTEGER NOT NULL,
	end_at                INTEGER NOT NULL,
	cpu_count             INTEGER NOT NULL DEFAULT 0,
	memory_mb             INTEGER NOT NULL DEFAULT 0,
	disk_size_mb          INTEGER NOT NULL DEFAULT 0,
	state                 TEXT NOT NULL CHECK (state IN ('running', 'paused')),
	key_id                TEXT REFERENCES api_keys(id),
	runtime               TEXT NOT NULL DEFAULT ''
) STRICT;
`,
	// 2: indexes for listing (per key, by start time) and the expiry sweep.
	`
CREATE INDEX sandboxes_key_started ON sandboxes (key_id, started_at, id);
CREATE INDEX sandboxes_started ON sandboxes (started_at, id);
CREATE INDEX sandboxes_end_at ON sandboxes (state, end_at);
`,
	// 3: the network policy in columns of its own, in Hutch's terms. Up to
	// version 2 the column network held the create request's E2B network
	// object verbatim (allowOut, denyOut, allowPublicTraffic,
	// maskRequestHost, and fields Hutch never applied); its four enforced
	// fields move to typed columns, the rest is dropped, and so is
	// client_id (a constant of E2B's API, answered by its adapter).
	`
ALTER TABLE sandboxes ADD COLUMN allow_out TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(allow_out));
ALTER TABLE sandboxes ADD COLUMN deny_out TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(deny_out));
ALTER TABLE sandboxes ADD COLUMN allow_public_traffic INTEGER;
ALTER TABLE sandboxes ADD COLUMN mask_request_host TEXT NOT NULL DEFAULT '';
UPDATE sandboxes SET
	allow_out = coalesce(json_extract(network, '$.allowOut'), '[]'),
	deny_out = coalesce(json_extract(network, '$.denyOut'), '[]'),
	allow_public_traffic = json_extract(network, '$.allowPublicTraffic'),
	mask_request_host = coalesce(json_extract(network, '$.maskRequestHost'), '')
WHERE network != '' AND json_valid(network);
ALTER TABLE sandboxes DROP COLUMN network;
ALTER TABLE sandboxes DROP COLUMN client_id;
`,
	// 4: whether a pause at the timeout keeps memory (E2B's
	// autoPauseMemory; true unless the create said false).
	`
ALTER TABLE sandboxes ADD COLUMN auto_pause_memory INTEGER NOT NULL DEFAULT 1;
`,
	// 5: volumes (E2B's persistent directories, mounted into sandboxes by
	// name), and each sandbox's mounts of them, so that a restarted server
	// still knows which volumes are in use and lists them.
	`
CREATE TABLE volumes (
	id       TEXT PRIMARY KEY,
	name     TEXT NOT NULL,
	key_id   TEXT REFERENCES api_keys(id),
	token    TEXT NOT NULL,
	created  INTEGER NOT NULL
) STRICT;
CREATE UNIQUE INDEX volumes_key_name ON volumes (coalesce(key_id, ''), name);
ALTER TABLE sandboxes ADD COLUMN volume_mounts TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(volume_mounts));
`,
	// 6: the audit trail (events.go), and API keys' roles: keys made
	// before roles existed were all the operator's, and stay admin.
	`
CREATE TABLE events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	time       INTEGER NOT NULL,
	key_id     TEXT NOT NULL DEFAULT '',
	sandbox_id TEXT NOT NULL DEFAULT '',
	kind       TEXT NOT NULL,
	action     TEXT NOT NULL,
	outcome    TEXT NOT NULL,
	detail     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail))
) STRICT;
CREATE INDEX events_time ON events (time);
CREATE INDEX events_key ON events (key_id, seq);
CREATE INDEX events_sandbox ON events (sandbox_id, seq);
ALTER TABLE api_keys ADD COLUMN role TEXT NOT NULL DEFAULT 'admin' CHECK (role IN ('admin', 'user'));
`,
	// A sandbox's own resources and start (OpenSandbox's create asks for
	// them): cpu_millis 0 is the server's default quota; image is the
	// image reference it was made from ('' = a template by name);
	// entrypoint is the argv of its main process ([] = the template's).
	`
ALTER TABLE sandboxes ADD COLUMN cpu_millis INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN image TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN entrypoint TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(entrypoint));
`,
	// The images whose roots a sandbox shows (the MCP gateway's catalog
	// servers): a resume that boots it again shows them again.
	`
ALTER TABLE sandboxes ADD COLUMN image_mounts TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(image_mounts));
`,
}

// migrateRetrying runs migrate, retrying while it fails with SQLITE_BUSY for
// up to busyTimeout. The busy handler covers every lock wait but one: while
// another process is turning a brand-new file into a WAL database, a reader
// can get SQLITE_BUSY without the handler being consulted. That window exists
// only when several processes create the same file at once, and the migration
// steps are transactional and re-check the version, so retrying is safe.
func (s *Store) migrateRetrying(ctx context.Context, migs []string) error {
	deadline := time.Now().Add(busyTimeout)
	backoff := time.Millisecond
	for {
		err := s.migrate(ctx, migs)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// migrate applies the migrations the database has not seen yet. The version
// is PRAGMA user_version, which lives in the database header and is
// transactional, so each step and its version bump commit together. Each step
// re-reads the version inside its IMMEDIATE transaction, so two processes
// opening a fresh file at once apply every step exactly once.
func (s *Store) migrate(ctx context.Context, migs []string) error {
	for {
		done, err := s.migrateOne(ctx, migs)
		if err != nil || done {
			return err
		}
	}
}

func (s *Store) migrateOne(ctx context.Context, migs []string) (done bool, err error) {
	// Cheap check without the write lock first: an up-to-date database is
	// opened without writing anything.
	var v int
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	if v > len(migs) {
		return false, fmt.Errorf("schema version %d is newer than this binary knows (%d): refusing to use it", v, len(migs))
	}
	if v == len(migs) {
		return true, nil
	}

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("begin migration: %w", err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return false, fmt.Errorf("read schema version: %w", err)
	}
	if v > len(migs) {
		return false, fmt.Errorf("schema version %d is newer than this binary knows (%d): refusing to use it", v, len(migs))
	}
	if v == len(migs) {
		return true, nil
	}
	if _, err := tx.ExecContext(ctx, migs[v]); err != nil {
		return false, fmt.Errorf("migration %d: %w", v+1, err)
	}
	// PRAGMA does not take bound parameters; v+1 is an int we computed.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
		return false, fmt.Errorf("migration %d: set version: %w", v+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migration %d: commit: %w", v+1, err)
	}
	return false, nil
}

// sqliteCode returns the extended SQLite result code of err, or 0.
func sqliteCode(err error) int {
	var se *sqlite.Error
	if errors.As(err, &se) {
		return se.Code()
	}
	return 0
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (any extended
// variant).
func isBusy(err error) bool {
	c := sqliteCode(err) & 0xff
	return c == sqlite3.SQLITE_BUSY || c == sqlite3.SQLITE_LOCKED
}

// errorf is fmt.Errorf for the store's errors: one whose cause is the
// database locked past busyTimeout (another process holds its write lock)
// also matches errdefs.ErrUnavailable, and says so, so that a client is
// told to try again (503) rather than of an internal error; one whose
// cause is the disk full matches errdefs.ErrResourceExhausted.
func errorf(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if isBusy(err) {
		return &busyError{err}
	}
	if sqliteCode(err)&0xff == sqlite3.SQLITE_FULL {
		// Said as the disk it is, and as a want of resources (not 500).
		return fmt.Errorf("%w (the disk of the server's data dir is full): %w", err, errdefs.ErrResourceExhausted)
	}
	return err
}

// busyError is a store error whose cause is the database locked.
type busyError struct{ err error }

func (e *busyError) Error() string {
	return e.err.Error() + fmt.Sprintf(" (the database stayed locked by another process for %s; try again)", busyTimeout)
}

func (e *busyError) Unwrap() []error { return []error{e.err, errdefs.ErrUnavailable} }

func isUniqueViolation(err error) bool {
	c := sqliteCode(err)
	return c == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlite3.SQLITE_CONSTRAINT_UNIQUE
}

func isForeignKeyViolation(err error) bool {
	return sqliteCode(err) == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// Times are stored as INTEGER Unix nanoseconds (UTC), which sort and compare
// exactly in SQL; they come back in UTC.
func toNanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }
