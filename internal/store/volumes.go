package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Volume is the control plane's record of one volume: a directory that
// outlives the sandboxes it is mounted into. The zero value is not
// storable (it has no ID).
type Volume struct {
	// ID is the volume's identity, chosen by the caller of CreateVolume.
	ID string
	// Name is unique among the volumes of one key.
	Name string
	// KeyID is the API key that created the volume; a key sees only its
	// own volumes. "" means no key (internal use).
	KeyID string
	// Token authenticates the volume content API. It is kept in clear, as
	// sandboxes' envd tokens are, because GET /volumes/{id} hands it out
	// again.
	Token string
	// Created is when the volume was created (UTC).
	Created time.Time
}

const volumeColumns = `id, name, key_id, token, created`

func scanVolume(r rowScanner) (Volume, error) {
	var (
		v       Volume
		keyID   sql.NullString
		created int64
	)
	if err := r.Scan(&v.ID, &v.Name, &keyID, &v.Token, &created); err != nil {
		return Volume{}, err
	}
	v.KeyID, v.Created = keyID.String, fromNanos(created)
	return v, nil
}

// CreateVolume stores a new volume. It fills in v.Created when zero. A
// name the key has already given a volume, or an ID stored already, gives
// errdefs.ErrAlreadyExists; a malformed ID, an empty name or token, or a
// KeyID that names no stored key gives errdefs.ErrInvalidArgument. Names
// are checked against E2B's rules by the caller, not here.
func (s *Store) CreateVolume(ctx context.Context, v *Volume) error {
	if !validSandboxID(v.ID) || v.Name == "" || v.Token == "" {
		return errorf("store: create volume %q (%q): %w", v.ID, v.Name, errdefs.ErrInvalidArgument)
	}
	if v.Created.IsZero() {
		v.Created = time.Now().UTC()
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?, ?, ?, ?, ?)`,
		v.ID, v.Name, nullString(v.KeyID), v.Token, toNanos(v.Created))
	switch {
	case isUniqueViolation(err):
		return errorf("store: create volume %q: a volume with this name or id exists: %w", v.Name, errdefs.ErrAlreadyExists)
	case isForeignKeyViolation(err):
		return errorf("store: create volume %q: unknown key id %q: %w", v.Name, v.KeyID, errdefs.ErrInvalidArgument)
	case err != nil:
		return errorf("store: create volume %q: %w", v.Name, err)
	}
	return nil
}

// GetVolume returns the volume id as the key keyID sees it: one that does
// not exist or that another key created gives errdefs.ErrNotFound. keyID
// "" sees every volume.
func (s *Store) GetVolume(ctx context.Context, keyID, id string) (Volume, error) {
	return s.getVolume(ctx, keyID, "id", id)
}

// VolumeByName returns the volume the key keyID named name, or
// errdefs.ErrNotFound.
func (s *Store) VolumeByName(ctx context.Context, keyID, name string) (Volume, error) {
	return s.getVolume(ctx, keyID, "name", name)
}

func (s *Store) getVolume(ctx context.Context, keyID, col, val string) (Volume, error) {
	// col is one of two constants above, never input.
	q := `SELECT ` + volumeColumns + ` FROM volumes WHERE ` + col + ` = ? AND coalesce(key_id, '') = ?`
	if keyID == "" && col == "id" {
		q = `SELECT ` + volumeColumns + ` FROM volumes WHERE id = ? AND ? = ''`
	}
	v, err := scanVolume(s.db.QueryRowContext(ctx, q, val, keyID))
	if errors.Is(err, sql.ErrNoRows) {
		return Volume{}, errorf("store: volume %s: %w", val, errdefs.ErrNotFound)
	}
	if err != nil {
		return Volume{}, errorf("store: get volume %s: %w", val, err)
	}
	return v, nil
}

// ListVolumes returns the volumes of the key keyID ("" = every volume),
// oldest first.
func (s *Store) ListVolumes(ctx context.Context, keyID string) ([]Volume, error) {
	q := `SELECT ` + volumeColumns + ` FROM volumes`
	var args []any
	if keyID != "" {
		q += ` WHERE key_id = ?`
		args = append(args, keyID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created, id`, args...)
	if err != nil {
		return nil, errorf("store: list volumes: %w", err)
	}
	defer rows.Close()
	out := []Volume{}
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, errorf("store: list volumes: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, errorf("store: list volumes: %w", err)
	}
	return out, nil
}

// VolumeUsers returns the IDs of the sandboxes, running or paused, whose
// records mount the volume id.
func (s *Store) VolumeUsers(ctx context.Context, id string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT sandboxes.id FROM sandboxes, json_each(sandboxes.volume_mounts) AS m
		WHERE json_extract(m.value, '$.volume') = ? ORDER BY sandboxes.id`, id)
	if err != nil {
		return nil, errorf("store: users of volume %s: %w", id, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var sid string
		if err := rows.Scan(&sid); err != nil {
			return nil, errorf("store: users of volume %s: %w", id, err)
		}
		ids = append(ids, sid)
	}
	return ids, rows.Err()
}

// DeleteVolume removes the volume id of the key keyID ("" = any key),
// unless a sandbox's record mounts it: then it fails with
// errdefs.ErrFailedPrecondition and removes nothing. The check and the
// removal are one transaction. An unknown volume, or another key's, gives
// errdefs.ErrNotFound.
func (s *Store) DeleteVolume(ctx context.Context, keyID, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return errorf("store: delete volume %s: %w", id, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM volumes WHERE id = ? AND (? = '' OR key_id = ?)`, id, keyID, keyID).Scan(&n); err != nil {
		return errorf("store: delete volume %s: %w", id, err)
	}
	if n == 0 {
		return errorf("store: volume %s: %w", id, errdefs.ErrNotFound)
	}
	var users int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes, json_each(sandboxes.volume_mounts) AS m
		WHERE json_extract(m.value, '$.volume') = ?`, id).Scan(&users); err != nil {
		return errorf("store: delete volume %s: %w", id, err)
	}
	if users > 0 {
		return errorf("store: volume %s is mounted in %d sandbox(es): %w", id, users, errdefs.ErrFailedPrecondition)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM volumes WHERE id = ?`, id); err != nil {
		return errorf("store: delete volume %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return errorf("store: delete volume %s: %w", id, err)
	}
	return nil
}
