package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/metrics"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// A snapshot is a sandbox's files at one moment, kept as a build of the
// template store: the layers of the template the sandbox was made from,
// plus one layer of everything it changed. A sandbox is made from it like
// from any template (by its id or name), and it shares those layers on disk
// with the template and with every other snapshot of it. The sandbox is
// frozen only while its layer is captured (every file whole or absent, as
// at the freeze), then runs on as it was. A fork is a snapshot no one
// names, from which N sandboxes are made at once; it is removed when the
// last of them ends.
//
// Only files are kept: the native runtime cannot save processes, so a
// sandbox made from a snapshot or a fork starts its template's start
// command afresh.

// Snapshot is a snapshot as the manager reports it.
type Snapshot struct {
	// ID is the snapshot's build id: create sandboxes from it, delete it.
	ID string
	// Name is its template name; Refs are the "name:tag" refs that point
	// at it (empty once a newer snapshot took the name).
	Name string
	Refs []string
	// Sandbox is the sandbox it was taken of.
	Sandbox string
	// Created is when it was taken; Expires, when set, when it is removed.
	Created, Expires time.Time
}

// SnapshotRequest is what a snapshot is taken with.
type SnapshotRequest struct {
	// Name names the snapshot's template; "" picks "snapshot-<random>".
	// A name the key took for an earlier snapshot moves to the new one,
	// and the earlier is removed (once no sandbox uses it).
	Name string
	// TTL removes the snapshot that long after it was taken; 0 uses the
	// manager's default (Options.SnapshotTTL; 0 there keeps it until
	// deleted).
	TTL time.Duration
}

// MaxForks is the most forks one call makes (E2B's documented bound).
const MaxForks = 100

// CreateSnapshot captures sandbox id of keyID (running or paused) as a
// snapshot. A name that another key's template has is refused with
// errdefs.ErrPermissionDenied, one of a template that is not a snapshot
// with errdefs.ErrAlreadyExists.
func (m *Manager) CreateSnapshot(ctx context.Context, keyID, id string, req SnapshotRequest) (*Snapshot, error) {
	name := req.Name
	if name == "" {
		name = "snapshot-" + randomHex(6)
	}
	if !template.ValidName(name) || template.Builtin(name) || template.Reserved(name) {
		return nil, fmt.Errorf("snapshot name %q: 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit, not one of Hutch's own: %w", name, errdefs.ErrInvalidArgument)
	}
	if prev, err := m.templates.Get(name); err == nil && (prev.Snapshot == nil || prev.Snapshot.Kind != template.SnapshotUser) {
		if err := prev.MayUse(keyID); err != nil || prev.Owner != keyID {
			return nil, fmt.Errorf("snapshot name %q is another key's template: %w", name, errdefs.ErrPermissionDenied)
		}
		return nil, fmt.Errorf("snapshot name %q is taken by a template that is not a snapshot: %w", name, errdefs.ErrAlreadyExists)
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = m.snapshotTTL
	}
	if ttl < 0 {
		return nil, fmt.Errorf("snapshot retention %v: %w", ttl, errdefs.ErrInvalidArgument)
	}
	snap := template.SnapshotOf{Sandbox: id, Kind: template.SnapshotUser}
	if ttl > 0 {
		snap.Expires = time.Now().Add(ttl).UTC()
	}
	t, err := m.capture(ctx, keyID, id, name, true, snap)
	if err != nil {
		return nil, err
	}
	return toSnapshot(t), nil
}

// capture makes a build of sandbox id's files under its operation lock:
// a running sandbox is frozen for the capture and thawed after, a paused
// one captured as it is (frozen: its layer; paused without memory: the
// build its files are in).
func (m *Manager) capture(ctx context.Context, keyID, id, name string, tagged bool, snap template.SnapshotOf) (*template.Template, error) {
	unlock, err := m.lockOp(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return nil, err
	}
	var info runtimeInfo
	json.Unmarshal([]byte(rec.Runtime), &info)
	if info.Checkpoint != "" {
		cp, ok := m.checkpointerOf(ctx, info.Backend)
		if !ok {
			return nil, fmt.Errorf("snapshot of paused sandbox %s: its runtime cannot restore checkpoints here: %w", id, errdefs.ErrNotImplemented)
		}
		return m.captureCheckpoint(ctx, nil, info, cp, rec.EnvdAccessToken, rec.KeyID, name, tagged, snap)
	}
	if info.PausedBuild != "" {
		src, err := m.templates.Get(info.PausedBuild)
		if err != nil {
			return nil, fmt.Errorf("snapshot of paused sandbox %s: %w", id, err)
		}
		return m.commitCapture(src, src.Layers, rec.KeyID, name, tagged, snap)
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil || l.internal {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if cp, ok := m.checkpointerOf(ctx, backendOf(ctx, l.sbx)); ok {
		// Its memory too: the checkpoint stops it only while it is saved.
		t, err := m.captureCheckpoint(ctx, l, info, cp, rec.EnvdAccessToken, rec.KeyID, name, tagged, snap)
		if err == nil {
			m.step(fault.SnapshotCaptured)
		}
		return t, err
	}
	// A running sandbox is frozen while its layer is read, and thawed
	// before the store's work (captureSpooled); a paused one stays as it
	// is, and needs no spool: its layer is read straight into the store.
	var thaw func()
	if rec.State != string(StatePaused) {
		if err := l.sbx.Freeze(ctx); err != nil {
			return nil, fmt.Errorf("snapshot of sandbox %s: %w", id, err)
		}
		var once sync.Once
		thaw = func() { once.Do(func() { l.sbx.Thaw(context.Background()) }) }
		defer thaw()
	}
	t, err := m.captureBuild(ctx, l, rec.KeyID, name, tagged, snap, thaw)
	if err == nil {
		m.step(fault.SnapshotCaptured)
	}
	return t, err
}

// captureBuild makes a build of frozen sandbox l's files: its template's
// layers and the sandbox's own on top. thaw, when not nil, is called as
// soon as the layer is read (captureSpooled); with nil the sandbox stays
// frozen throughout.
func (m *Manager) captureBuild(ctx context.Context, l *live, keyID, name string, tagged bool, snap template.SnapshotOf, thaw func()) (*template.Template, error) {
	st, err := l.sbx.Status(ctx)
	if err != nil {
		return nil, err
	}
	src, err := m.templates.Get(st.TemplateID)
	if err != nil {
		return nil, fmt.Errorf("the template of sandbox %s: %w", snap.Sandbox, err)
	}
	lease, err := m.templates.NewLease()
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	var layer *template.Layer
	if thaw != nil {
		layer, err = m.captureSpooled(ctx, l.sbx, src.LowerDirs(), lease, "sandbox "+snap.Sandbox, thaw, m.captureLimit(src))
	} else {
		layer, err = m.captureLayer(ctx, l.sbx, src.LowerDirs(), lease, "sandbox "+snap.Sandbox, false, m.captureLimit(src))
	}
	if err != nil {
		return nil, err
	}
	return m.commitCapture(src, append(slices.Clone(src.Layers), layer.ID), keyID, name, tagged, snap)
}

// commitCapture registers layers, captured of a sandbox made from src, as
// a build of keyID's named name: tagged (its default tag), or untagged (a
// fork's, found by its id only).
func (m *Manager) commitCapture(src *template.Template, layers []string, keyID, name string, tagged bool, snap template.SnapshotOf) (*template.Template, error) {
	cfg := src.Config
	cfg.Owner, cfg.Snapshot, cfg.Built = keyID, &snap, time.Time{}
	cfg.Source = "sandbox " + snap.Sandbox
	cfg.RecipeHash, cfg.From = "", nil
	if tagged {
		return m.templates.Commit(name, nil, layers, cfg)
	}
	return m.templates.CommitAs(template.NewBuildID(), name, nil, layers, cfg)
}

// isSnapshot reports whether t is a snapshot of keyID's that is still
// there: a snapshot deleted, or superseded by a newer one of its name, lost
// its tag, and only the sandboxes made from it keep its build until they
// end.
func isSnapshot(t *template.Template, keyID string) bool {
	return t.Snapshot != nil && t.Snapshot.Kind == template.SnapshotUser && t.Owner == keyID && len(t.Tags) > 0
}

// toSnapshot is build t as a Snapshot.
func toSnapshot(t *template.Template) *Snapshot {
	s := &Snapshot{ID: t.ID, Name: t.Name, Created: t.Built}
	for _, tag := range t.Tags {
		s.Refs = append(s.Refs, t.Name+":"+tag)
	}
	if t.Snapshot != nil {
		s.Sandbox, s.Expires = t.Snapshot.Sandbox, t.Snapshot.Expires
	}
	return s
}

// SnapshotFilter selects snapshots in ListSnapshots.
type SnapshotFilter struct {
	// KeyID keeps the snapshots of this key.
	KeyID string
	// Sandbox keeps the snapshots of this sandbox; Name those of this name.
	Sandbox, Name string
	// Limit is the page size: 0 means 100, clamped to 1..100.
	Limit int
	// NextToken continues a previous listing.
	NextToken string
}

// ListSnapshots lists keyID's snapshots, newest first, a page at a time.
func (m *Manager) ListSnapshots(ctx context.Context, f SnapshotFilter) (page []*Snapshot, next string, err error) {
	limit := f.Limit
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	var after string
	if f.NextToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(f.NextToken)
		if err != nil {
			return nil, "", fmt.Errorf("invalid next token: %w", errdefs.ErrInvalidArgument)
		}
		after = string(b)
	}
	builds, err := m.templates.Builds()
	if err != nil {
		return nil, "", err
	}
	var all []*template.Template
	for _, b := range builds {
		s := b.Snapshot
		if s == nil || s.Kind != template.SnapshotUser || b.Owner != f.KeyID ||
			f.Sandbox != "" && s.Sandbox != f.Sandbox || f.Name != "" && b.Name != f.Name {
			continue
		}
		// Tags are read per build (Builds leaves them out).
		if t, err := m.templates.Get(b.ID); err == nil && isSnapshot(t, f.KeyID) {
			all = append(all, t)
		}
	}
	key := func(t *template.Template) string { return t.Built.UTC().Format(time.RFC3339Nano) + " " + t.ID }
	sort.Slice(all, func(i, j int) bool { return key(all[i]) > key(all[j]) })
	var last string
	for _, b := range all {
		k := key(b)
		if after != "" && k >= after {
			continue
		}
		if len(page) == limit {
			next = base64.RawURLEncoding.EncodeToString([]byte(last))
			break
		}
		page = append(page, toSnapshot(b))
		last = k
	}
	return page, next, nil
}

// DeleteSnapshot removes keyID's snapshot ref (its id or name); a sandbox
// made from it keeps its files until it ends.
func (m *Manager) DeleteSnapshot(ctx context.Context, keyID, ref string) error {
	t, err := m.templates.Get(ref)
	if err != nil {
		return err
	}
	if !isSnapshot(t, keyID) {
		return fmt.Errorf("snapshot %s: %w", ref, errdefs.ErrNotFound)
	}
	if err := m.templates.Remove(ref, nil); err != nil {
		return err
	}
	// At once: the disk it takes is free when the delete is answered.
	if t.Checkpoint != "" && filepath.Dir(t.Checkpoint) == m.checkpoints {
		os.RemoveAll(t.Checkpoint)
	}
	return nil
}

// removeCheckpointOf removes the checkpoint of build t, removed from the
// store, if it has one: sandboxes restored from it need it no more, and
// it is as large as their memory (the sweep would take it only later).
func (m *Manager) removeCheckpointOf(t *template.Template) {
	if t.Checkpoint != "" && filepath.Dir(t.Checkpoint) == m.checkpoints {
		go os.RemoveAll(t.Checkpoint)
	}
}

// IsSnapshot reports whether ref names a snapshot of keyID's.
func (m *Manager) IsSnapshot(keyID, ref string) bool {
	t, err := m.templates.Get(ref)
	return err == nil && t.Snapshot != nil && t.Snapshot.Kind == template.SnapshotUser && t.Owner == keyID
}

// errSnapshotGone is Create's error for a snapshot that was deleted.
func errSnapshotGone(ref string) error {
	return fmt.Errorf("snapshot %q was deleted: %w", ref, errdefs.ErrNotFound)
}

// ForkResult is one fork: its sandbox, or why it was not made.
type ForkResult struct {
	Sandbox *Sandbox
	Err     error
}

// Fork makes count new sandboxes (1 to MaxForks) from sandbox id's files,
// each with its own id and tokens, the metadata, envs, network and
// lifecycle of the source, and timeout d (0: DefaultTimeout). The source
// is frozen while its files are captured, then runs on, its id and expiry
// untouched. Each fork that could not be made (a cap reached, say) has its
// error; none is left half made. The forks share the captured layers.
func (m *Manager) Fork(ctx context.Context, keyID, id string, count int, d time.Duration) ([]ForkResult, error) {
	if count < 1 || count > MaxForks {
		return nil, fmt.Errorf("fork count %d: from 1 to %d: %w", count, MaxForks, errdefs.ErrInvalidArgument)
	}
	if d < 0 {
		return nil, fmt.Errorf("timeout %v: %w", d, errdefs.ErrInvalidArgument)
	}
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return nil, err
	}
	src := fromRecord(&rec)
	t, err := m.capture(ctx, keyID, id, src.TemplateID, false, template.SnapshotOf{Sandbox: id, Kind: template.SnapshotFork})
	if err != nil {
		return nil, err
	}
	m.step(fault.ForkCaptured)
	// Dropped once the forks have it mounted: removed when the last ends.
	// A checkpoint is read whole by each restore: removed after them.
	defer func() {
		m.templates.Remove(t.ID, nil)
		m.removeCheckpointOf(t)
	}()
	out := make([]ForkResult, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			sb, err := m.Create(ctx, CreateRequest{KeyID: keyID, Template: t.ID, alias: src.Alias, Timeout: d,
				Metadata: src.Metadata, Envs: src.Envs, Secure: src.Secure, Network: src.Network, Lifecycle: src.Lifecycle,
				// A fork mounts its source's volumes (shared, not copied).
				Volumes: src.Volumes})
			out[i] = ForkResult{Sandbox: sb, Err: err}
			if err == nil {
				m.step(fault.ForkCreated)
			}
		}()
	}
	wg.Wait()
	return out, nil
}

// sweepSnapshots removes the snapshots past their retention, and the
// sandboxes paused longer than Options.PausedRetention.
func (m *Manager) sweepSnapshots(ctx context.Context) {
	builds, err := m.templates.Builds()
	if err != nil {
		return
	}
	now := time.Now()
	for _, b := range builds {
		if s := b.Snapshot; s != nil && s.Kind == template.SnapshotUser && !s.Expires.IsZero() && now.After(s.Expires) {
			if err := m.templates.Remove(b.ID, nil); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				m.logger.Warn("remove an expired snapshot", "id", b.ID, "err", err)
				continue
			}
			m.removeCheckpointOf(b)
			m.logger.Info("snapshot removed at the end of its retention", "id", b.ID, "name", b.Name)
		}
	}
	m.sweepCheckpoints(ctx)
	if m.pausedTTL <= 0 {
		return
	}
	recs, err := m.store.AllSandboxes(ctx)
	if err != nil {
		return
	}
	for _, rec := range recs {
		if rec.State != string(StatePaused) {
			continue
		}
		var info runtimeInfo
		json.Unmarshal([]byte(rec.Runtime), &info)
		if info.PausedAt.IsZero() || now.Sub(info.PausedAt) < m.pausedTTL {
			continue
		}
		m.removePaused(ctx, rec.ID)
	}
}

// removePaused removes sandbox id if it is still paused, for longer than
// the paused retention.
func (m *Manager) removePaused(ctx context.Context, id string) {
	unlock, err := m.lockOp(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	rec, err := m.store.GetSandbox(ctx, "", id)
	if err != nil || rec.State != string(StatePaused) {
		return
	}
	var info runtimeInfo
	json.Unmarshal([]byte(rec.Runtime), &info)
	if info.PausedAt.IsZero() || time.Since(info.PausedAt) < m.pausedTTL {
		return
	}
	err = m.removeLocked(ctx, id)
	m.metrics.Kill(metrics.KillRetention, err)
	if err != nil {
		m.logger.Warn("remove a sandbox paused past its retention", "id", id, "err", err)
		return
	}
	m.logger.Info("paused sandbox removed at the end of its retention", "id", id)
}

// sweepLoop runs sweepSnapshots every interval until the manager closes.
func (m *Manager) sweepLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
			m.sweepSnapshots(m.ctx)
		}
	}
}
