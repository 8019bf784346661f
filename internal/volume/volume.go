// Package volume is Hutch's volumes: directories on the host that outlive
// the sandboxes they are mounted into (E2B's Volume API). A volume has an
// id, a name unique among its API key's volumes, and a token of its own
// that opens its content API (content.go) without an API key.
//
// On disk a volume is DataDir/volumes/<id>, a root-owned directory of mode
// 1777 (like /tmp: every user of a sandbox may create files; only a file's
// owner removes it). Files keep the uids and gids they have inside the
// sandboxes, unshifted: the runtime mounts the directory idmapped into
// each sandbox's user namespace, so a file sandbox uid 1000 writes is
// owned by 1000 on disk, in every other sandbox and in the content API.
// DataDir/volumes is mode 0700, so no host user but root reaches them.
//
// Which volumes a sandbox mounts is in its store record: a volume is in use
// while any sandbox record (running or paused) names it, and Delete refuses
// it then.
package volume

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// Volume is one volume as its owner sees it.
type Volume struct {
	ID   string
	Name string
	// Token opens the volume's content API.
	Token   string
	KeyID   string
	Created time.Time
	// Dir is the volume's directory on the host.
	Dir string
}

// MaxNameLen is the longest volume name.
const MaxNameLen = 64

// validName is the name rule: E2B's SDKs and spec state none, so Hutch
// takes the one of its other identifiers that reach paths and URLs.
var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// ValidateName returns an errdefs.ErrInvalidArgument unless name is 1 to
// MaxNameLen characters of [a-zA-Z0-9_-].
func ValidateName(name string) error {
	if name == "" || len(name) > MaxNameLen || !validName.MatchString(name) {
		return fmt.Errorf("invalid volume name %q: use 1 to %d letters, digits, '-' or '_': %w", name, MaxNameLen, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Manager creates, finds and removes volumes. It is safe for concurrent use.
type Manager struct {
	store  *store.Store
	dir    string // DataDir/volumes
	size   int64  // each volume's size limit; 0: none (fs.go)
	perKey int    // the most volumes one key may have; 0: no cap
	logger *slog.Logger

	// creating is held across a Create, from the checks of the cap and
	// the room to the record: concurrent creates must not all pass them.
	creating sync.Mutex
	// lists bounds the content listings served at once (each holds up to
	// its bound of entries in memory).
	lists chan struct{}

	mu sync.Mutex
	// held counts, per volume id, sandboxes being created with the volume
	// that are not recorded yet (Hold): Delete refuses these as well.
	held map[string]int
}

// New returns a manager keeping volumes in dataDir/volumes, which it
// creates (mode 0700) if needed. size, when positive, gives each new
// volume a file system of its own of that many bytes (see fs.go); 0 makes
// volumes directories of the host's file system, without a limit. The
// images of volumes made with a limit are mounted if they are not. A nil
// logger discards.
func New(st *store.Store, dataDir string, size int64, logger *slog.Logger) (*Manager, error) {
	return NewWithCap(st, dataDir, size, 0, logger)
}

// NewWithCap is New with a cap on the volumes one key may have (0: none).
// Past it a Create fails with a *LimitError.
func NewWithCap(st *store.Store, dataDir string, size int64, perKey int, logger *slog.Logger) (*Manager, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dir := filepath.Join(dataDir, "volumes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes dir: %w", err)
	}
	// MkdirAll leaves an existing directory's mode alone; this one holds
	// files owned by sandbox uids that host users must not reach.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes dir: %w", err)
	}
	m := &Manager{store: st, dir: dir, size: size, perKey: perKey, logger: logger, held: map[string]int{}, lists: make(chan struct{}, maxListsAtOnce)}
	m.mountAll(context.Background())
	return m, nil
}

func (m *Manager) fromRecord(r store.Volume) Volume {
	return Volume{ID: r.ID, Name: r.Name, Token: r.Token, KeyID: r.KeyID, Created: r.Created, Dir: filepath.Join(m.dir, r.ID)}
}

// Create makes a volume named name for the key keyID: an invalid name
// gives errdefs.ErrInvalidArgument, one the key has used already
// errdefs.ErrAlreadyExists.
func (m *Manager) Create(ctx context.Context, keyID, name string) (_ Volume, retErr error) {
	if err := ValidateName(name); err != nil {
		return Volume{}, err
	}
	m.creating.Lock()
	defer m.creating.Unlock()
	if m.perKey > 0 {
		mine, err := m.store.ListVolumes(ctx, keyID)
		if err != nil {
			return Volume{}, err
		}
		if len(mine) >= m.perKey {
			return Volume{}, &LimitError{Limit: m.perKey}
		}
	}
	if err := m.checkRoom(); err != nil {
		return Volume{}, err
	}
	rec := store.Volume{ID: "vol-" + randomHex(10), Name: name, KeyID: keyID, Token: "vol_" + randomHex(24)}
	dir := filepath.Join(m.dir, rec.ID)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return Volume{}, fmt.Errorf("volume %s: %w", name, err)
	}
	defer func() {
		if retErr != nil {
			m.unmount(rec.ID, dir)
			os.RemoveAll(dir)
		}
	}()
	if m.size > 0 {
		if err := m.makeImage(rec.ID, dir); err != nil {
			return Volume{}, fmt.Errorf("volume %s: %w", name, err)
		}
	}
	// Mkdir's mode passes through the umask; the sticky bit does not
	// pass through Mkdir at all.
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		return Volume{}, fmt.Errorf("volume %s: %w", name, err)
	}
	if err := m.store.CreateVolume(ctx, &rec); err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return Volume{}, fmt.Errorf("a volume named %q exists already: %w", name, errdefs.ErrAlreadyExists)
		}
		return Volume{}, err
	}
	return m.fromRecord(rec), nil
}

// Get returns the key's volume id; errdefs.ErrNotFound if there is none
// (or it is another key's).
func (m *Manager) Get(ctx context.Context, keyID, id string) (Volume, error) {
	r, err := m.store.GetVolume(ctx, keyID, id)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return Volume{}, fmt.Errorf("volume %s not found: %w", id, errdefs.ErrNotFound)
		}
		return Volume{}, err
	}
	return m.fromRecord(r), nil
}

// List returns the key's volumes, oldest first.
func (m *Manager) List(ctx context.Context, keyID string) ([]Volume, error) {
	recs, err := m.store.ListVolumes(ctx, keyID)
	if err != nil {
		return nil, err
	}
	out := make([]Volume, 0, len(recs))
	for _, r := range recs {
		out = append(out, m.fromRecord(r))
	}
	return out, nil
}

// Hold finds the key's volumes by name, for a sandbox about to mount them,
// and keeps Delete from removing them until release is called (once the
// sandbox is recorded, which then keeps them, or has failed). An unknown
// name gives errdefs.ErrNotFound and holds nothing.
func (m *Manager) Hold(ctx context.Context, keyID string, names []string) (_ []Volume, release func(), _ error) {
	vols := make([]Volume, 0, len(names))
	for _, n := range names {
		r, err := m.store.VolumeByName(ctx, keyID, n)
		if err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, nil, fmt.Errorf("volume %q not found: %w", n, errdefs.ErrNotFound)
			}
			return nil, nil, err
		}
		vols = append(vols, m.fromRecord(r))
	}
	m.mu.Lock()
	for _, v := range vols {
		m.held[v.ID]++
	}
	m.mu.Unlock()
	// The volume may have been deleted between the look-up and the hold.
	for _, v := range vols {
		if _, err := m.store.GetVolume(ctx, keyID, v.ID); err != nil {
			m.release(vols)
			return nil, nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		if err := m.ensureMounted(v.ID); err != nil {
			m.release(vols)
			return nil, nil, err
		}
	}
	var once sync.Once
	return vols, func() { once.Do(func() { m.release(vols) }) }, nil
}

func (m *Manager) release(vols []Volume) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range vols {
		if m.held[v.ID]--; m.held[v.ID] <= 0 {
			delete(m.held, v.ID)
		}
	}
}

// Delete removes the key's volume id and its files. A volume that a
// sandbox mounts (running or paused, or being created) is refused with
// errdefs.ErrFailedPrecondition: its files stay until every such sandbox
// is gone. An unknown volume gives errdefs.ErrNotFound.
func (m *Manager) Delete(ctx context.Context, keyID, id string) error {
	// The lock spans the check and the removal of the record: a Hold
	// either counts before it (and Delete refuses) or looks the volume up
	// again after it (and finds none).
	m.mu.Lock()
	if m.held[id] > 0 {
		m.mu.Unlock()
		return fmt.Errorf("volume %s is being mounted into a sandbox: %w", id, errdefs.ErrFailedPrecondition)
	}
	err := m.store.DeleteVolume(ctx, keyID, id)
	m.mu.Unlock()
	if err != nil {
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			return fmt.Errorf("volume %s not found: %w", id, errdefs.ErrNotFound)
		case errors.Is(err, errdefs.ErrFailedPrecondition):
			users, _ := m.store.VolumeUsers(ctx, id)
			return fmt.Errorf("volume %s is mounted in sandbox(es) %v: kill them first: %w", id, users, errdefs.ErrFailedPrecondition)
		}
		return err
	}
	// The record is gone: rename first, so that a half-finished removal
	// never leaves a directory under a live volume's name, then remove.
	dir := filepath.Join(m.dir, id)
	if err := m.unmount(id, dir); err != nil {
		m.logger.Error("volume: remove files of a deleted volume", "volume", id, "err", err)
		return nil
	}
	trash := filepath.Join(m.dir, ".deleted-"+id)
	if err := os.Rename(dir, trash); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		m.logger.Error("volume: remove files of a deleted volume", "volume", id, "err", err)
		return nil
	}
	// os.RemoveAll never follows a symlink the sandboxes planted: it
	// unlinks names in their parent directories (unlinkat).
	if err := os.RemoveAll(trash); err != nil {
		m.logger.Error("volume: remove files of a deleted volume", "volume", id, "err", err)
	}
	return nil
}

// Dir is the host directory of volume id, whether or not it exists.
func (m *Manager) Dir(id string) string { return filepath.Join(m.dir, id) }

// Sweep removes what deletions interrupted by a crash left behind.
func (m *Manager) Sweep() {
	ents, _ := os.ReadDir(m.dir)
	for _, e := range ents {
		if len(e.Name()) > 9 && e.Name()[:9] == ".deleted-" {
			os.RemoveAll(filepath.Join(m.dir, e.Name()))
		}
	}
}

// LimitError is Create's error when the key has as many volumes as it may.
// It matches errdefs.ErrResourceExhausted (E2B's 429).
type LimitError struct {
	Limit int
}

// Error names the cap.
func (e *LimitError) Error() string {
	return fmt.Sprintf("volume limit reached: an API key may have at most %d volumes; destroy one first", e.Limit)
}

// Is makes a LimitError match errdefs.ErrResourceExhausted.
func (e *LimitError) Is(target error) bool { return target == errdefs.ErrResourceExhausted }

// ErrBadToken is Open's error for a wrong token or an unknown volume (the
// same, so that tokens cannot be used to probe for ids). It matches
// errdefs.ErrPermissionDenied; E2B answers it 401.
var ErrBadToken = fmt.Errorf("invalid volume token: %w", errdefs.ErrPermissionDenied)

// Open returns the content of volume id for a request that presents token,
// checked in constant time; ErrBadToken if it does not match. The caller
// closes the Content.
func (m *Manager) Open(ctx context.Context, id, token string) (*Content, error) {
	r, err := m.store.GetVolume(ctx, "", id)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, err
	}
	if err != nil || token == "" || subtle.ConstantTimeCompare([]byte(r.Token), []byte(token)) != 1 {
		return nil, ErrBadToken
	}
	if err := m.ensureMounted(r.ID); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(filepath.Join(m.dir, r.ID))
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", id, err)
	}
	return &Content{root: root, lists: m.lists, keyID: r.KeyID}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
