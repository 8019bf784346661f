package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// KeyPrefix is how every Hutch API key starts, as E2B's keys do (the Python
// SDK refuses keys that do not match ^e2b_[0-9a-f]+$).
const KeyPrefix = "e2b_"

// keyHexLen is the number of lowercase hex digits after KeyPrefix (160 bits).
const keyHexLen = 40

// prefixLen is how many hex digits of a key are kept in clear for listing.
// They identify a key to its owner and reveal 32 of its 160 bits.
const prefixLen = 8

// Key is an API key as the store knows it. The secret itself is never stored,
// only its SHA-256 hash, so a Key cannot be turned back into the plaintext.
// The zero value is not a valid key.
type Key struct {
	// ID is the key's stable identity ("key_" + 16 hex digits); sandboxes
	// record the ID of the key that created them.
	ID string
	// Name is a free-form label given by the operator.
	Name string
	// Prefix is the first 8 hex digits after "e2b_", for telling keys apart
	// in listings. It is not unique.
	Prefix string
	// Created is when the key was created or added (UTC).
	Created time.Time
	// Revoked is when the key was revoked (UTC), nil while it is valid.
	Revoked *time.Time
	// Role is what the key may do beyond its own sandboxes.
	Role Role
}

// Role is what an API key may do besides running sandboxes, which every
// key may (each sees only its own).
type Role string

const (
	// RoleAdmin keys also manage API keys and read every key's audit
	// trail: the operator's.
	RoleAdmin Role = "admin"
	// RoleUser keys see their own sandboxes, key and audit trail only.
	RoleUser Role = "user"
)

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleAdmin, RoleUser:
		return r, nil
	}
	return "", errorf("store: role %q: want %q or %q: %w", s, RoleAdmin, RoleUser, errdefs.ErrInvalidArgument)
}

// validKey reports whether plaintext is KeyPrefix followed by exactly 40
// lowercase hex digits.
func validKey(plaintext string) bool {
	h, ok := strings.CutPrefix(plaintext, KeyPrefix)
	if !ok || len(h) != keyHexLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func hashKey(plaintext string) []byte {
	sum := sha256.Sum256([]byte(plaintext))
	return sum[:]
}

func randomHex(nbytes int) string {
	b := make([]byte, nbytes)
	// crypto/rand.Read never returns an error (Go 1.24+); it crashes the
	// program if the system's random source fails.
	rand.Read(b)
	return hex.EncodeToString(b)
}

// CreateKey makes a new random admin API key ("e2b_" + 40 lowercase hex
// digits from crypto/rand), stores its hash under name and returns the
// plaintext together with the stored Key. The plaintext is not kept
// anywhere: show it to the operator once.
func (s *Store) CreateKey(ctx context.Context, name string) (string, Key, error) {
	return s.NewKey(ctx, name, RoleAdmin)
}

// NewKey is CreateKey for a key of the given role.
func (s *Store) NewKey(ctx context.Context, name string, role Role) (string, Key, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return "", Key{}, err
	}
	plaintext := KeyPrefix + randomHex(keyHexLen/2)
	k, err := s.insertKey(ctx, name, plaintext, role)
	if err != nil {
		return "", Key{}, err
	}
	return plaintext, k, nil
}

// AddKey stores a key the operator chose (for example HUTCH_API_KEY) under
// name. It is idempotent: if the same key is stored already, AddKey returns
// the existing Key unchanged (its original name, and its revocation if it was
// revoked: re-adding a revoked key does not bring it back). A key that is not
// "e2b_" followed by exactly 40 lowercase hex digits is rejected with an
// error wrapping errdefs.ErrInvalidArgument; the error never contains the key.
func (s *Store) AddKey(ctx context.Context, name, plaintext string) (Key, error) {
	if !validKey(plaintext) {
		return Key{}, errorf("store: add key %q: key must be %q followed by %d lowercase hex digits: %w",
			name, KeyPrefix, keyHexLen, errdefs.ErrInvalidArgument)
	}
	return s.insertKey(ctx, name, plaintext, RoleAdmin)
}

// insertKey stores plaintext's hash unless it is there already, and returns
// the stored row either way.
func (s *Store) insertKey(ctx context.Context, name, plaintext string, role Role) (Key, error) {
	h := hashKey(plaintext)
	prefix := plaintext[len(KeyPrefix) : len(KeyPrefix)+prefixLen]
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Key{}, errorf("store: add key: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO api_keys (id, name, prefix, hash, created, role) VALUES (?, ?, ?, ?, ?, ?)
		 ON CONFLICT (hash) DO NOTHING`,
		"key_"+randomHex(8), name, prefix, h, toNanos(time.Now()), string(role)); err != nil {
		return Key{}, errorf("store: add key: %w", err)
	}
	k, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE hash = ?`, h))
	if err != nil {
		return Key{}, errorf("store: add key: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Key{}, errorf("store: add key: %w", err)
	}
	return k, nil
}

const keyColumns = `id, name, prefix, created, revoked, role`

type rowScanner interface {
	Scan(dest ...any) error
}

func scanKey(r rowScanner) (Key, error) {
	var (
		k       Key
		created int64
		revoked sql.NullInt64
		role    string
	)
	if err := r.Scan(&k.ID, &k.Name, &k.Prefix, &created, &revoked, &role); err != nil {
		return Key{}, err
	}
	k.Created = fromNanos(created)
	k.Role = Role(role)
	if revoked.Valid {
		t := fromNanos(revoked.Int64)
		k.Revoked = &t
	}
	return k, nil
}

// VerifyKey returns the valid (not revoked) key whose plaintext is given. The
// lookup is by SHA-256 hash through an index, so its timing reveals nothing
// about stored keys. An unknown, revoked or malformed key gives an error
// wrapping errdefs.ErrNotFound; the error never contains the key.
func (s *Store) VerifyKey(ctx context.Context, plaintext string) (Key, error) {
	if !validKey(plaintext) {
		return Key{}, errorf("store: verify key: unknown key: %w", errdefs.ErrNotFound)
	}
	k, err := scanKey(s.db.QueryRowContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys WHERE hash = ? AND revoked IS NULL`, hashKey(plaintext)))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, errorf("store: verify key: unknown or revoked key: %w", errdefs.ErrNotFound)
	}
	if err != nil {
		return Key{}, errorf("store: verify key: %w", err)
	}
	return k, nil
}

// GetKey returns the key whose ID is id, revoked or not; errdefs.ErrNotFound
// if there is none.
func (s *Store) GetKey(ctx context.Context, id string) (Key, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, errorf("store: key %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return Key{}, errorf("store: key %q: %w", id, err)
	}
	return k, nil
}

// ListKeys returns every key, revoked ones included, oldest first.
func (s *Store) ListKeys(ctx context.Context) ([]Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY created, id`)
	if err != nil {
		return nil, errorf("store: list keys: %w", err)
	}
	defer rows.Close()
	var keys []Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, errorf("store: list keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, errorf("store: list keys: %w", err)
	}
	return keys, nil
}

// RevokeKey revokes the key whose ID is idOrPrefix, or else the one key whose
// Prefix is idOrPrefix (with or without the leading "e2b_"). Revoking a
// revoked key again succeeds and keeps the first revocation time. No match
// gives errdefs.ErrNotFound; a prefix shared by several keys gives
// errdefs.ErrInvalidArgument (use the ID instead). Sandboxes the key created
// are left alone; the key just stops authenticating.
func (s *Store) RevokeKey(ctx context.Context, idOrPrefix string) error {
	if idOrPrefix == "" {
		return errorf("store: revoke key: empty id: %w", errdefs.ErrInvalidArgument)
	}
	prefix := strings.TrimPrefix(idOrPrefix, KeyPrefix)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return errorf("store: revoke key: %w", err)
	}
	defer tx.Rollback()

	var id string
	err = tx.QueryRowContext(ctx, `SELECT id FROM api_keys WHERE id = ?`, idOrPrefix).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM api_keys WHERE prefix = ?`, prefix)
		if err != nil {
			return errorf("store: revoke key: %w", err)
		}
		var ids []string
		for rows.Next() {
			var x string
			if err := rows.Scan(&x); err != nil {
				rows.Close()
				return errorf("store: revoke key: %w", err)
			}
			ids = append(ids, x)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return errorf("store: revoke key: %w", err)
		}
		switch len(ids) {
		case 0:
			return errorf("store: revoke key %q: %w", idOrPrefix, errdefs.ErrNotFound)
		case 1:
			id = ids[0]
		default:
			return errorf("store: revoke key %q: prefix matches %d keys, use the key ID: %w",
				idOrPrefix, len(ids), errdefs.ErrInvalidArgument)
		}
	} else if err != nil {
		return errorf("store: revoke key: %w", err)
	}

	if _, err := tx.ExecContext(ctx,
		`UPDATE api_keys SET revoked = ? WHERE id = ? AND revoked IS NULL`, toNanos(time.Now()), id); err != nil {
		return errorf("store: revoke key: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return errorf("store: revoke key: %w", err)
	}
	return nil
}

// CountKeys returns how many keys are valid (not revoked). `hutch serve` uses
// it to decide whether to mint a first key.
func (s *Store) CountKeys(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM api_keys WHERE revoked IS NULL`).Scan(&n); err != nil {
		return 0, errorf("store: count keys: %w", err)
	}
	return n, nil
}

// KeyRecord is a key with the hash it is verified by: what a cluster's
// nodes copy between each other (internal/cluster), so that a key made on
// one node works on all, under one ID.
type KeyRecord struct {
	Key
	// Hash is the SHA-256 of the key's plaintext.
	Hash []byte
}

// ExportKeys returns every key with its hash, revoked ones included.
func (s *Store) ExportKeys(ctx context.Context) ([]KeyRecord, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+`, hash FROM api_keys ORDER BY created, id`)
	if err != nil {
		return nil, errorf("store: export keys: %w", err)
	}
	defer rows.Close()
	var out []KeyRecord
	for rows.Next() {
		var (
			r       KeyRecord
			created int64
			revoked sql.NullInt64
			role    string
		)
		if err := rows.Scan(&r.ID, &r.Name, &r.Prefix, &created, &revoked, &role, &r.Hash); err != nil {
			return nil, errorf("store: export keys: %w", err)
		}
		r.Created = fromNanos(created)
		r.Role = Role(role)
		if revoked.Valid {
			t := fromNanos(revoked.Int64)
			r.Revoked = &t
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, errorf("store: export keys: %w", err)
	}
	return out, nil
}

// ImportKey makes the store hold key r as given: added when its hash is
// new here, revoked when r is, and, when the same key is held under
// another ID, moved to r's ID (a key added on two nodes before they met
// takes the cluster's ID). Moving fails, with errdefs.ErrFailedPrecondition,
// when sandboxes or volumes here already name the old ID. A revoked key is
// never brought back.
func (s *Store) ImportKey(ctx context.Context, r KeyRecord) error {
	if len(r.Hash) != sha256.Size || !strings.HasPrefix(r.ID, "key_") {
		return errorf("store: import key %q: malformed: %w", r.ID, errdefs.ErrInvalidArgument)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return errorf("store: import key: %w", err)
	}
	defer tx.Rollback()
	var id string
	err = tx.QueryRowContext(ctx, `SELECT id FROM api_keys WHERE hash = ?`, r.Hash).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		// A key from a node older than roles, or with a role this one
		// does not know, may do the least.
		role := r.Role
		if _, err := ParseRole(string(role)); err != nil {
			role = RoleUser
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, name, prefix, hash, created, role) VALUES (?, ?, ?, ?, ?, ?)`,
			r.ID, r.Name, r.Prefix, r.Hash, toNanos(r.Created), string(role)); err != nil {
			return errorf("store: import key %s: %w", r.ID, err)
		}
	case err != nil:
		return errorf("store: import key: %w", err)
	case id != r.ID:
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET id = ? WHERE id = ?`, r.ID, id); err != nil {
			return errorf("store: import key: the key %s here is %s in the cluster, and sandboxes or volumes here name it: %v: %w", id, r.ID, err, errdefs.ErrFailedPrecondition)
		}
	}
	if r.Revoked != nil {
		if _, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked = ? WHERE id = ? AND revoked IS NULL`, toNanos(*r.Revoked), r.ID); err != nil {
			return errorf("store: import key %s: %w", r.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return errorf("store: import key: %w", err)
	}
	return nil
}
