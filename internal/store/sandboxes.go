package store

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Sandbox states.
const (
	StateRunning = "running"
	StatePaused  = "paused"
)

// Sandbox is the control plane's durable record of one sandbox: everything it
// must still know after a restart to answer its clients and re-adopt the
// sandbox. The zero value is not storable (it has no ID).
type Sandbox struct {
	// ID is the sandbox ID: 1 to 128 characters of [A-Za-z0-9-], starting
	// with a letter or digit (E2B's are [a-z0-9]+).
	ID string
	// TemplateID and Alias are the template's ID and the name it was asked
	// for by; ListFilter.Template matches either.
	TemplateID string
	Alias      string
	// EnvdVersion and EnvdAccessToken must be repeated unchanged on connect.
	EnvdVersion     string
	EnvdAccessToken string
	// TrafficAccessToken guards the sandbox's public ports ("" = none).
	TrafficAccessToken string
	// Secure records whether envd requires EnvdAccessToken.
	Secure bool
	// AllowInternetAccess is the create request's allow_internet_access;
	// nil when it was not given.
	AllowInternetAccess *bool
	// AutoPause: at EndAt the sandbox is paused instead of killed.
	AutoPause bool
	// AutoPauseFilesystem: the pause at EndAt keeps files only, not memory
	// (E2B's autoPauseMemory false).
	AutoPauseFilesystem bool
	// AutoResume: a paused sandbox resumes on traffic.
	AutoResume bool
	// AllowOut and DenyOut are the egress rules (never nil when read back).
	AllowOut, DenyOut []string
	// AllowPublicTraffic false requires TrafficAccessToken on requests to
	// the sandbox's ports; nil when it was not given.
	AllowPublicTraffic *bool
	// MaskRequestHost replaces the Host header of requests to the
	// sandbox's ports ("" = none).
	MaskRequestHost string
	// Metadata and EnvVars are the create request's maps. They are never nil
	// when read back from the store.
	Metadata map[string]string
	EnvVars  map[string]string
	// StartedAt is when the sandbox was created (CreateSandbox fills in the
	// current time when zero); EndAt is when it expires. Both come back in
	// UTC with nanosecond precision.
	StartedAt time.Time
	EndAt     time.Time
	// Resources granted to the sandbox.
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
	// CPUMillis is the sandbox's own CPU quota in thousandths of a core,
	// 0 when it has the server's default (CPUCount then says it).
	CPUMillis int
	// Image is the image reference the sandbox was made from, "" for a
	// template asked for by name.
	Image string
	// Entrypoint is the argv of the sandbox's main process, nil for the
	// template's own start.
	Entrypoint []string
	// State is StateRunning or StatePaused ("" means StateRunning on create).
	State string
	// KeyID is the ID of the API key that created the sandbox; a key sees
	// only its own sandboxes. "" means no key (internal use): such sandboxes
	// are visible only to callers that pass keyID "".
	KeyID string
	// Runtime is opaque JSON (or any text) the lifecycle layer keeps to
	// re-adopt the sandbox after a restart, e.g. the runtime's handle.
	Runtime string
	// VolumeMounts are the volumes mounted into the sandbox (nil for
	// none). A volume named here is in use: DeleteVolume refuses it.
	VolumeMounts []VolumeMount
	// ImageMounts are the image roots shown in the sandbox (nil for none).
	ImageMounts []ImageMount
}

// ImageMount is an image's root filesystem shown in a sandbox.
type ImageMount struct {
	// Template and Build name the imported image (Template as asked for).
	Template string `json:"template"`
	Build    string `json:"build"`
	// Path is where the sandbox sees it.
	Path string `json:"path"`
	// Binds are the sandbox's directories shown in it.
	Binds []ImageBind `json:"binds,omitempty"`
}

// ImageBind is a directory of a sandbox (From) shown in an image (at To).
type ImageBind struct {
	From     string `json:"from"`
	To       string `json:"to"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// VolumeMount is one volume mounted into a sandbox.
type VolumeMount struct {
	// VolumeID and Name identify the volume (Name as it was at create).
	VolumeID string `json:"volume"`
	Name     string `json:"name"`
	// Path is where the sandbox sees it.
	Path string `json:"path"`
}

// validSandboxID: 1 to 128 of [A-Za-z0-9-], not starting with "-". (Not a
// regexp: "{0,127}" compiles to 127 nested nodes, 1.7 ms at the start of
// every hutch process, sandbox inits and envds included.)
func validSandboxID(id string) bool {
	if len(id) == 0 || len(id) > 128 || id[0] == '-' {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validState(s string) bool { return s == StateRunning || s == StatePaused }

const sandboxColumns = `id, template_id, alias, envd_version, envd_access_token,
	traffic_access_token, secure, allow_internet_access, auto_pause, auto_resume,
	allow_out, deny_out, allow_public_traffic, mask_request_host,
	metadata, env_vars, started_at, end_at, cpu_count, memory_mb, disk_size_mb, state,
	key_id, runtime, auto_pause_memory, volume_mounts, cpu_millis, image, entrypoint, image_mounts`

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func encodeMap(m map[string]string) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

func encodeList(l []string) (string, error) {
	if l == nil {
		return "[]", nil
	}
	b, err := json.Marshal(l)
	return string(b), err
}

// nullBool is b as a nullable column.
func nullBool(b *bool) sql.NullBool {
	if b == nil {
		return sql.NullBool{}
	}
	return sql.NullBool{Bool: *b, Valid: true}
}

// boolPtr is a nullable column as *bool.
func boolPtr(b sql.NullBool) *bool {
	if !b.Valid {
		return nil
	}
	v := b.Bool
	return &v
}

func scanSandbox(r rowScanner) (Sandbox, error) {
	var (
		sb                 Sandbox
		allowNet, public   sql.NullBool
		allow, deny        string
		meta, envs         string
		startedAt, endAt   int64
		keyID              sql.NullString
		secure, ap, ar     bool
		apMemory           bool
		cpu, mem, diskSize int64
		mounts             string
		cpuMillis          int64
		entrypoint         string
		images             string
	)
	if err := r.Scan(&sb.ID, &sb.TemplateID, &sb.Alias, &sb.EnvdVersion,
		&sb.EnvdAccessToken, &sb.TrafficAccessToken, &secure, &allowNet, &ap, &ar,
		&allow, &deny, &public, &sb.MaskRequestHost, &meta, &envs, &startedAt, &endAt, &cpu, &mem, &diskSize, &sb.State,
		&keyID, &sb.Runtime, &apMemory, &mounts, &cpuMillis, &sb.Image, &entrypoint, &images); err != nil {
		return Sandbox{}, err
	}
	if err := json.Unmarshal([]byte(mounts), &sb.VolumeMounts); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: volumeMounts: %w", sb.ID, err)
	}
	if len(sb.VolumeMounts) == 0 {
		sb.VolumeMounts = nil
	}
	if err := json.Unmarshal([]byte(entrypoint), &sb.Entrypoint); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: entrypoint: %w", sb.ID, err)
	}
	if len(sb.Entrypoint) == 0 {
		sb.Entrypoint = nil
	}
	if err := json.Unmarshal([]byte(images), &sb.ImageMounts); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: imageMounts: %w", sb.ID, err)
	}
	if len(sb.ImageMounts) == 0 {
		sb.ImageMounts = nil
	}
	sb.CPUMillis = int(cpuMillis)
	sb.Secure, sb.AutoPause, sb.AutoResume, sb.AutoPauseFilesystem = secure, ap, ar, !apMemory
	sb.AllowInternetAccess, sb.AllowPublicTraffic = boolPtr(allowNet), boolPtr(public)
	sb.AllowOut, sb.DenyOut = []string{}, []string{}
	if err := json.Unmarshal([]byte(allow), &sb.AllowOut); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: allowOut: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(deny), &sb.DenyOut); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: denyOut: %w", sb.ID, err)
	}
	sb.Metadata = map[string]string{}
	if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: metadata: %w", sb.ID, err)
	}
	sb.EnvVars = map[string]string{}
	if err := json.Unmarshal([]byte(envs), &sb.EnvVars); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: envVars: %w", sb.ID, err)
	}
	sb.StartedAt, sb.EndAt = fromNanos(startedAt), fromNanos(endAt)
	sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB = int(cpu), int(mem), int(diskSize)
	sb.KeyID = keyID.String
	return sb, nil
}

func collectSandboxes(rows *sql.Rows) ([]Sandbox, error) {
	defer rows.Close()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sb)
	}
	return out, rows.Err()
}

// CreateSandbox stores a new sandbox record. It fills in sb.StartedAt (the
// current time) when zero and sb.State (StateRunning) when empty. An ID that
// is stored already gives errdefs.ErrAlreadyExists. A malformed ID, an
// unknown state, a zero EndAt or a KeyID that names no stored key gives
// errdefs.ErrInvalidArgument.
func (s *Store) CreateSandbox(ctx context.Context, sb *Sandbox) error {
	if !validSandboxID(sb.ID) {
		return errorf("store: create sandbox %q: malformed id: %w", sb.ID, errdefs.ErrInvalidArgument)
	}
	if sb.State == "" {
		sb.State = StateRunning
	}
	if !validState(sb.State) {
		return errorf("store: create sandbox %s: unknown state %q: %w", sb.ID, sb.State, errdefs.ErrInvalidArgument)
	}
	if sb.EndAt.IsZero() {
		return errorf("store: create sandbox %s: no end time: %w", sb.ID, errdefs.ErrInvalidArgument)
	}
	if sb.StartedAt.IsZero() {
		sb.StartedAt = time.Now()
	}
	meta, err := encodeMap(sb.Metadata)
	if err != nil {
		return errorf("store: create sandbox %s: metadata: %w", sb.ID, err)
	}
	envs, err := encodeMap(sb.EnvVars)
	if err != nil {
		return errorf("store: create sandbox %s: envVars: %w", sb.ID, err)
	}
	allow, err := encodeList(sb.AllowOut)
	if err != nil {
		return errorf("store: create sandbox %s: allowOut: %w", sb.ID, err)
	}
	deny, err := encodeList(sb.DenyOut)
	if err != nil {
		return errorf("store: create sandbox %s: denyOut: %w", sb.ID, err)
	}
	mounts := []byte("[]")
	if len(sb.VolumeMounts) > 0 {
		if mounts, err = json.Marshal(sb.VolumeMounts); err != nil {
			return errorf("store: create sandbox %s: volumeMounts: %w", sb.ID, err)
		}
	}
	entrypoint, err := encodeList(sb.Entrypoint)
	if err != nil {
		return errorf("store: create sandbox %s: entrypoint: %w", sb.ID, err)
	}
	images := []byte("[]")
	if len(sb.ImageMounts) > 0 {
		if images, err = json.Marshal(sb.ImageMounts); err != nil {
			return errorf("store: create sandbox %s: imageMounts: %w", sb.ID, err)
		}
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sb.ID, sb.TemplateID, sb.Alias, sb.EnvdVersion, sb.EnvdAccessToken,
		sb.TrafficAccessToken, sb.Secure, nullBool(sb.AllowInternetAccess), sb.AutoPause, sb.AutoResume,
		allow, deny, nullBool(sb.AllowPublicTraffic), sb.MaskRequestHost,
		meta, envs, toNanos(sb.StartedAt), toNanos(sb.EndAt), sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB,
		sb.State, nullString(sb.KeyID), sb.Runtime, !sb.AutoPauseFilesystem, string(mounts),
		sb.CPUMillis, sb.Image, entrypoint, string(images))
	switch {
	case isUniqueViolation(err):
		return errorf("store: create sandbox %s: %w", sb.ID, errdefs.ErrAlreadyExists)
	case isForeignKeyViolation(err):
		return errorf("store: create sandbox %s: unknown key id %q: %w", sb.ID, sb.KeyID, errdefs.ErrInvalidArgument)
	case err != nil:
		return errorf("store: create sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// GetSandbox returns the sandbox id as seen by the key keyID: a sandbox that
// does not exist, or that another key created, gives errdefs.ErrNotFound (so
// a key cannot probe for other keys' IDs). keyID "" sees every sandbox.
func (s *Store) GetSandbox(ctx context.Context, keyID, id string) (Sandbox, error) {
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`
	args := []any{id}
	if keyID != "" {
		q += ` AND key_id = ?`
		args = append(args, keyID)
	}
	sb, err := scanSandbox(s.db.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, errorf("store: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, errorf("store: get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// updateOne runs an UPDATE/DELETE that must touch exactly the row id.
func (s *Store) updateOne(ctx context.Context, what, id, q string, args ...any) error {
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return errorf("store: %s %s: %w", what, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return errorf("store: %s %s: %w", what, id, err)
	}
	if n == 0 {
		return errorf("store: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if s.onChange != nil {
		s.onChange(ctx, id)
	}
	return nil
}

// SetEndAt sets the sandbox's expiry to t, earlier or later than before (the
// semantics of POST /sandboxes/{id}/timeout). A missing sandbox gives
// errdefs.ErrNotFound.
func (s *Store) SetEndAt(ctx context.Context, id string, t time.Time) error {
	return s.updateOne(ctx, "set end time of", id,
		`UPDATE sandboxes SET end_at = ? WHERE id = ?`, toNanos(t), id)
}

// ExtendEndAt moves the sandbox's expiry to t if t is later, and never
// earlier (the semantics of connect), atomically. It returns the expiry in
// force afterwards. A missing sandbox gives errdefs.ErrNotFound.
func (s *Store) ExtendEndAt(ctx context.Context, id string, t time.Time) (time.Time, error) {
	var n int64
	err := s.db.QueryRowContext(ctx,
		`UPDATE sandboxes SET end_at = max(end_at, ?) WHERE id = ? RETURNING end_at`,
		toNanos(t), id).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, errorf("store: sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return time.Time{}, errorf("store: extend end time of %s: %w", id, err)
	}
	if s.onChange != nil {
		s.onChange(ctx, id)
	}
	return fromNanos(n), nil
}

// SetState sets the sandbox's state to StateRunning or StatePaused; any other
// state gives errdefs.ErrInvalidArgument and a missing sandbox
// errdefs.ErrNotFound. Setting the state the sandbox already has succeeds.
func (s *Store) SetState(ctx context.Context, id, state string) error {
	if !validState(state) {
		return errorf("store: set state of %s: unknown state %q: %w", id, state, errdefs.ErrInvalidArgument)
	}
	return s.updateOne(ctx, "set state of", id, `UPDATE sandboxes SET state = ? WHERE id = ?`, state, id)
}

// SetStateRuntime sets the sandbox's state and its Runtime record in one
// step (a pause that replaced the sandbox's processes by a copy of its
// files, a resume that made them again): a crash never leaves one changed
// without the other. Errors are SetState's.
func (s *Store) SetStateRuntime(ctx context.Context, id, state, runtime string) error {
	if !validState(state) {
		return errorf("store: set state of %s: unknown state %q: %w", id, state, errdefs.ErrInvalidArgument)
	}
	return s.updateOne(ctx, "set state of", id, `UPDATE sandboxes SET state = ?, runtime = ? WHERE id = ?`, state, runtime, id)
}

// SetRuntime replaces the sandbox's opaque Runtime record (for example after
// a resume gave it a new process). A missing sandbox gives
// errdefs.ErrNotFound.
func (s *Store) SetRuntime(ctx context.Context, id, runtime string) error {
	return s.updateOne(ctx, "set runtime of", id, `UPDATE sandboxes SET runtime = ? WHERE id = ?`, runtime, id)
}

// SetMetadata replaces the sandbox's metadata. A missing sandbox gives
// errdefs.ErrNotFound.
func (s *Store) SetMetadata(ctx context.Context, id string, metadata map[string]string) error {
	meta, err := encodeMap(metadata)
	if err != nil {
		return errorf("store: set metadata of %s: %w", id, err)
	}
	return s.updateOne(ctx, "set metadata of", id, `UPDATE sandboxes SET metadata = ? WHERE id = ?`, meta, id)
}

// SetEgress replaces the sandbox's egress rules and internet access (a
// policy update); its inbound settings stay. A missing sandbox gives
// errdefs.ErrNotFound.
func (s *Store) SetEgress(ctx context.Context, id string, allowInternet *bool, allowOut, denyOut []string) error {
	allow, err := encodeList(allowOut)
	if err != nil {
		return errorf("store: set egress of %s: %w", id, err)
	}
	deny, err := encodeList(denyOut)
	if err != nil {
		return errorf("store: set egress of %s: %w", id, err)
	}
	return s.updateOne(ctx, "set egress of", id,
		`UPDATE sandboxes SET allow_internet_access = ?, allow_out = ?, deny_out = ? WHERE id = ?`,
		nullBool(allowInternet), allow, deny, id)
}

// DeleteSandbox removes the sandbox's record. A missing sandbox gives
// errdefs.ErrNotFound (kill of an unknown sandbox answers 404).
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	return s.updateOne(ctx, "delete sandbox", id, `DELETE FROM sandboxes WHERE id = ?`, id)
}

// ExpiredSandboxes returns the running sandboxes whose EndAt is at or before
// now, soonest expiry first. Paused sandboxes are not returned: they have no
// running timer (E2B keeps them until they are killed or resumed).
func (s *Store) ExpiredSandboxes(ctx context.Context, now time.Time) ([]Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state = 'running' AND end_at <= ? ORDER BY end_at, id`, toNanos(now))
	if err != nil {
		return nil, errorf("store: expired sandboxes: %w", err)
	}
	out, err := collectSandboxes(rows)
	if err != nil {
		return nil, errorf("store: expired sandboxes: %w", err)
	}
	return out, nil
}

// AllSandboxes returns every stored sandbox of every key and state, oldest
// first, for re-adopting them after a restart.
func (s *Store) AllSandboxes(ctx context.Context) ([]Sandbox, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes ORDER BY started_at, id`)
	if err != nil {
		return nil, errorf("store: all sandboxes: %w", err)
	}
	out, err := collectSandboxes(rows)
	if err != nil {
		return nil, errorf("store: all sandboxes: %w", err)
	}
	return out, nil
}

// SandboxCount is how many stored sandboxes are in State, of TemplateID.
type SandboxCount struct {
	State, TemplateID string
	Count             int
}

// CountSandboxes counts the stored sandboxes of every key by state and
// template: one query, however many there are (metrics read it at each
// scrape).
func (s *Store) CountSandboxes(ctx context.Context) ([]SandboxCount, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT state, template_id, COUNT(*) FROM sandboxes
		GROUP BY state, template_id ORDER BY state, template_id`)
	if err != nil {
		return nil, errorf("store: count sandboxes: %w", err)
	}
	defer rows.Close()
	var out []SandboxCount
	for rows.Next() {
		var c SandboxCount
		if err := rows.Scan(&c.State, &c.TemplateID, &c.Count); err != nil {
			return nil, errorf("store: count sandboxes: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, errorf("store: count sandboxes: %w", err)
	}
	return out, nil
}

// Listing limits of GET /v2/sandboxes.
const (
	DefaultListLimit = 100
	MaxListLimit     = 100
)

// ListFilter selects and pages sandboxes for ListSandboxes, with the
// semantics of a paged API listing. The zero value lists every running and
// paused sandbox of every key, newest first, 100 per page.
type ListFilter struct {
	// KeyID restricts the list to sandboxes this key created ("" = all).
	KeyID string
	// Metadata keeps sandboxes whose metadata has every key=value pair
	// (exact, case-sensitive matches).
	Metadata map[string]string
	// States keeps sandboxes in one of these states; empty means running
	// and paused. An unknown state gives errdefs.ErrInvalidArgument.
	States []string
	// StartedAfter keeps sandboxes started at or after it (zero = no bound).
	StartedAfter time.Time
	// Template keeps sandboxes whose TemplateID or Alias equals it.
	Template string
	// Order is "asc" or "desc" (default "") by StartedAt, then ID; anything
	// else gives errdefs.ErrInvalidArgument.
	Order string
	// Limit is the page size: 0 means 100, and it is clamped to 1..100.
	Limit int
	// NextToken continues a listing from the token a previous call with the
	// same filter returned. A malformed token, or one issued for the other
	// order, gives errdefs.ErrInvalidArgument.
	NextToken string
}

// cursor is the position after the last item of a page.
type cursor struct {
	startedAt time.Time
	id        string
	asc       bool
}

const tokenSep = "__"

// encode gives the opaque token: base64url of
// "<RFC3339Nano startedAt>__<id>" plus "__asc" for ascending listings (the
// shape of E2B's reference server). Sandbox IDs cannot contain '_', so the
// parts are unambiguous.
func (c cursor) encode() string {
	s := c.startedAt.UTC().Format(time.RFC3339Nano) + tokenSep + c.id
	if c.asc {
		s += tokenSep + "asc"
	}
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeCursor(tok string) (cursor, error) {
	bad := errorf("store: invalid next token: %w", errdefs.ErrInvalidArgument)
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(tok, "="))
	if err != nil {
		return cursor{}, bad
	}
	parts := strings.Split(string(raw), tokenSep)
	var c cursor
	switch {
	case len(parts) == 2:
	case len(parts) == 3 && parts[2] == "asc":
		c.asc = true
	default:
		return cursor{}, bad
	}
	c.startedAt, err = time.Parse(time.RFC3339Nano, parts[0])
	if err != nil || !validSandboxID(parts[1]) {
		return cursor{}, bad
	}
	c.id = parts[1]
	return c, nil
}

// ListSandboxes returns one page of the sandboxes f selects, ordered by
// StartedAt then ID (descending unless f.Order is "asc"), and the token for
// the next page, which is "" when this page is the last. Walking the pages
// visits each matching sandbox exactly once, provided sandboxes are not
// created with a StartedAt behind the cursor in the meantime. Invalid input
// (state, order, token) gives errdefs.ErrInvalidArgument.
func (s *Store) ListSandboxes(ctx context.Context, f ListFilter) ([]Sandbox, string, error) {
	var asc bool
	switch f.Order {
	case "", "desc":
	case "asc":
		asc = true
	default:
		return nil, "", errorf("store: list sandboxes: order %q: %w", f.Order, errdefs.ErrInvalidArgument)
	}
	limit := f.Limit
	switch {
	case limit == 0:
		limit = DefaultListLimit
	case limit < 1:
		limit = 1
	case limit > MaxListLimit:
		limit = MaxListLimit
	}

	var (
		where []string
		args  []any
	)
	if f.KeyID != "" {
		where = append(where, `key_id = ?`)
		args = append(args, f.KeyID)
	}
	states := f.States
	if len(states) == 0 {
		states = []string{StateRunning, StatePaused}
	}
	ph := make([]string, 0, len(states))
	for _, st := range states {
		if !validState(st) {
			return nil, "", errorf("store: list sandboxes: state %q: %w", st, errdefs.ErrInvalidArgument)
		}
		ph = append(ph, "?")
		args = append(args, st)
	}
	where = append(where, `state IN (`+strings.Join(ph, ", ")+`)`)
	if !f.StartedAfter.IsZero() {
		where = append(where, `started_at >= ?`)
		args = append(args, toNanos(f.StartedAfter))
	}
	if f.Template != "" {
		where = append(where, `(template_id = ? OR alias = ?)`)
		args = append(args, f.Template, f.Template)
	}
	// json_each matches keys and values as plain strings, so no character
	// in them ('.', '"', spaces, '&', '=') needs escaping as it would in a
	// json_extract path.
	for k, v := range f.Metadata {
		where = append(where, `EXISTS (SELECT 1 FROM json_each(sandboxes.metadata) AS m
			WHERE m.key = ? AND m.type = 'text' AND m.value = ?)`)
		args = append(args, k, v)
	}
	if f.NextToken != "" {
		c, err := decodeCursor(f.NextToken)
		if err != nil {
			return nil, "", err
		}
		if c.asc != asc {
			return nil, "", errorf("store: invalid next token: issued for another order: %w", errdefs.ErrInvalidArgument)
		}
		op := "<"
		if asc {
			op = ">"
		}
		where = append(where, `(started_at `+op+` ? OR (started_at = ? AND id `+op+` ?))`)
		n := toNanos(c.startedAt)
		args = append(args, n, n, c.id)
	}
	dir := "DESC"
	if asc {
		dir = "ASC"
	}
	// Fetch one extra row to know whether another page exists.
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE ` + strings.Join(where, " AND ") +
		` ORDER BY started_at ` + dir + `, id ` + dir + ` LIMIT ?`
	args = append(args, limit+1)

	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", errorf("store: list sandboxes: %w", err)
	}
	items, err := collectSandboxes(rows)
	if err != nil {
		return nil, "", errorf("store: list sandboxes: %w", err)
	}
	if len(items) <= limit {
		return items, "", nil
	}
	items = items[:limit]
	last := items[limit-1]
	return items, cursor{startedAt: last.StartedAt, id: last.ID, asc: asc}.encode(), nil
}
