package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// On a runtime backend that saves a sandbox's memory to disk
// (runtime.Checkpointer: gVisor), the lifecycle keeps memory without
// keeping RAM:
//
//   - a pause that keeps memory checkpoints the sandbox into
//     DataDir/checkpoints/paused-<id> and deletes it (its processes, RAM
//     and slot are freed, as a pause of its files frees them); a connect
//     restores it under its id, its processes going on from where they
//     were, with the same tokens and files. It survives a restart of the
//     server and of the host: the checkpoint is on disk.
//   - a snapshot of it is a checkpoint too (DataDir/checkpoints/build-*),
//     kept with a template build (Config.Checkpoint); each sandbox made
//     from it is restored, its processes going on. A fork restores one
//     checkpoint N times.
//
// A backend without checkpoints pauses and snapshots as pause.go and
// snapshot.go say.

// backendName is the name of backend name ("" for the default).
func (m *Manager) backendName(name string) string {
	if name != "" {
		return name
	}
	if set, ok := m.rt.(*runtime.Set); ok {
		return set.Default()
	}
	return ""
}

// backendFor is the backend a sandbox of tpl runs on when asked for
// asked: the template's, when it needs one (asking for another is
// refused), else the one asked for, else the server's default ("").
func (m *Manager) backendFor(tpl *template.Template, asked string) (string, error) {
	if set, ok := m.rt.(*runtime.Set); ok && asked != "" {
		if _, err := set.Backend(asked); err != nil {
			return "", err
		}
	}
	backend := asked
	switch {
	case tpl.Runtime != "" && asked != "" && asked != tpl.Runtime:
		return "", fmt.Errorf("template %s runs on the %s runtime, not %s: %w", tpl.Name, tpl.Runtime, asked, errdefs.ErrInvalidArgument)
	case tpl.Runtime != "":
		backend = tpl.Runtime
	}
	if m.runtimes != nil {
		if name := m.backendName(backend); !slices.Contains(m.runtimes, name) {
			return "", fmt.Errorf("runtime %s is not allowed on this server (it allows %s): %w", name, strings.Join(m.runtimes, ", "), errdefs.ErrInvalidArgument)
		}
	}
	return backend, nil
}

// checkpointerOf returns the Checkpointer for sandboxes of backend, when
// that backend can checkpoint here.
func (m *Manager) checkpointerOf(ctx context.Context, backend string) (runtime.Checkpointer, bool) {
	cp, ok := m.rt.(runtime.Checkpointer)
	if !ok {
		return nil, false
	}
	caps := m.rt.Capabilities(ctx)
	if set, ok := m.rt.(*runtime.Set); ok {
		caps = set.CapabilitiesOf(ctx, backend)
	}
	return cp, caps.Checkpoint.Available
}

// backendOf is the backend live sandbox sbx runs on.
func backendOf(ctx context.Context, sbx runtime.Sandbox) string {
	st, err := sbx.Status(ctx)
	if err != nil {
		return ""
	}
	return st.Runtime
}

func (m *Manager) checkpointDir(name string) string { return filepath.Join(m.checkpoints, name) }

// envdTokenFile, in a snapshot's checkpoint, holds its source's envd
// access token ("" for none).
const envdTokenFile = "hutch-envd-token"

// restoreAs makes sandbox id from the checkpoint in dir on backend, with
// envd sockets of its own; its envd keeps the settings it was saved with
// until an /init.
func (m *Manager) restoreAs(ctx context.Context, id, dir, backend string) (_ *started, retErr error) {
	cp, ok := m.checkpointerOf(ctx, backend)
	if !ok {
		return nil, fmt.Errorf("the %s runtime cannot restore checkpoints here: %w", m.backendName(backend), errdefs.ErrNotImplemented)
	}
	if err := m.dataRoom(); err != nil {
		return nil, err
	}
	api, control, files, err := m.envdSockets(id)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
		if retErr != nil {
			os.Remove(api)
			os.Remove(control)
		}
	}()
	sbx, err := cp.Restore(ctx, dir, runtime.RestoreSpec{
		ID: id, Runtime: backend, Labels: map[string]string{controlPlaneLabel: "true"}, ExtraFiles: files,
	})
	if err != nil {
		return nil, err
	}
	st, err := sbx.Status(ctx)
	if err != nil {
		sbx.Delete(context.Background())
		return nil, err
	}
	prev, _ := os.ReadFile(filepath.Join(dir, envdTokenFile))
	return &started{sbx: sbx, route: newRoute(api, control), build: st.TemplateID, backend: st.Runtime, prevToken: string(prev)}, nil
}

// pauseCheckpoint turns frozen sandbox l into a checkpoint on disk,
// recorded with the sandbox, which is then deleted.
func (m *Manager) pauseCheckpoint(ctx context.Context, l *live, rec *store.Sandbox, cp runtime.Checkpointer) error {
	id := rec.ID
	st, err := l.sbx.Status(ctx)
	if err != nil {
		return err
	}
	unlock, err := m.lockOp(ctx, checkpointsOp)
	if err != nil {
		return err
	}
	defer unlock()
	if err := m.admitCheckpoint(ctx, rec.KeyID, id, l.sbx, true); err != nil {
		return err
	}
	dir := m.checkpointDir(pausedName(id))
	os.RemoveAll(dir) // a crashed pause's
	if err := cp.Checkpoint(ctx, id, dir); err != nil {
		os.RemoveAll(dir)
		return err
	}
	m.step(fault.PauseCheckpointed)
	info, _ := json.Marshal(runtimeInfo{Checkpoint: dir, Backend: st.Runtime, Build: st.TemplateID, PausedAt: time.Now().UTC()})
	if err := m.store.SetStateRuntime(ctx, id, string(StatePaused), string(info)); err != nil {
		os.RemoveAll(dir)
		return err
	}
	m.step(fault.PauseRecorded)
	// Recorded: from here the sandbox is its checkpoint.
	// Its runtime sandbox goes after the answer: it holds nothing the
	// checkpoint needs, and a resume of the same id waits for it
	// (waitDropped).
	done := make(chan struct{})
	m.mu.Lock()
	delete(m.live, id)
	m.releaseLiveLocked(l)
	m.dropping[id] = done
	m.mu.Unlock()
	l.route.close()
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := m.dropRuntime(ctx, id); err != nil {
			m.logger.Warn("a sandbox paused to a checkpoint", "id", id, "err", err)
		}
		m.mu.Lock()
		if m.dropping[id] == done {
			delete(m.dropping, id)
		}
		m.mu.Unlock()
	}()
	return nil
}

// waitDropped waits until the runtime sandbox of id, paused into a
// checkpoint, is gone.
func (m *Manager) waitDropped(ctx context.Context, id string) error {
	m.mu.Lock()
	done := m.dropping[id]
	m.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resumeCheckpoint restores sandbox rec from the checkpoint it was paused
// into, under its own id, for d.
func (m *Manager) resumeCheckpoint(ctx context.Context, rec *store.Sandbox, info runtimeInfo, d time.Duration) error {
	return m.resumeWith(ctx, rec, d, resumePlan{
		step: fault.ResumeRestored,
		make: func(ctx context.Context, _ *Sandbox) (*started, error) {
			if err := m.waitDropped(ctx, rec.ID); err != nil {
				return nil, err
			}
			return m.restoreAs(ctx, rec.ID, info.Checkpoint, info.Backend)
		},
		// Its envd kept its token and settings: the resolv.conf write
		// needs it.
		token: rec.EnvdAccessToken,
		// Running again on its own: the checkpoint is not needed any more
		// (removed after the answer: hundreds of MiB take a while).
		done: func() { go os.RemoveAll(info.Checkpoint) },
	})
}

// captureCheckpoint makes a build of sandbox id — live l, or paused into
// the checkpoint of info — whose sandboxes are restored from a checkpoint
// of it: a snapshot with its memory.
func (m *Manager) captureCheckpoint(ctx context.Context, l *live, info runtimeInfo, cp runtime.Checkpointer, token, keyID, name string, tagged bool, snap template.SnapshotOf) (*template.Template, error) {
	dir := m.checkpointDir("build-" + randomHex(8))
	build, backend := info.Build, info.Backend
	if l != nil {
		st, err := l.sbx.Status(ctx)
		if err != nil {
			return nil, err
		}
		build, backend = st.TemplateID, st.Runtime
		unlock, err := m.lockOp(ctx, checkpointsOp)
		if err != nil {
			return nil, err
		}
		defer unlock()
		if err := m.admitCheckpoint(ctx, keyID, snap.Sandbox, l.sbx, false); err != nil {
			return nil, fmt.Errorf("snapshot of sandbox %s: %w", snap.Sandbox, err)
		}
		if err := cp.Checkpoint(ctx, snap.Sandbox, dir); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("snapshot of sandbox %s: %w", snap.Sandbox, err)
		}
	} else if err := linkTree(info.Checkpoint, dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("snapshot of paused sandbox %s: %w", snap.Sandbox, err)
	}
	// The restored envd keeps the source's token until its /init, which
	// must give it: kept beside the checkpoint, as private as it is.
	if err := os.WriteFile(filepath.Join(dir, envdTokenFile), []byte(token), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	src, err := m.templates.Get(build)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("the template of sandbox %s: %w", snap.Sandbox, err)
	}
	cfg := src.Config
	cfg.Owner, cfg.Snapshot, cfg.Built = keyID, &snap, time.Time{}
	cfg.Source = "sandbox " + snap.Sandbox
	cfg.RecipeHash, cfg.From = "", nil
	cfg.Checkpoint, cfg.Runtime = dir, backend
	var t *template.Template
	if tagged {
		t, err = m.templates.Commit(name, nil, src.Layers, cfg)
	} else {
		t, err = m.templates.CommitAs(template.NewBuildID(), name, nil, src.Layers, cfg)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return t, nil
}

// linkTree copies the checkpoint in from into to as hard links: a
// checkpoint's files are written once and only read after.
func linkTree(from, to string) error {
	return filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		return os.Link(p, dst)
	})
}

// sweepCheckpoints removes the checkpoints nothing refers to any more: a
// snapshot's whose build is gone, a paused sandbox's that was resumed or
// killed while the server was down (or died in the middle of it).
func (m *Manager) sweepCheckpoints(ctx context.Context) {
	ents, err := os.ReadDir(m.checkpoints)
	if err != nil || len(ents) == 0 {
		return
	}
	used := map[string]bool{}
	if builds, err := m.templates.Builds(); err == nil {
		for _, b := range builds {
			if b.Checkpoint != "" {
				used[b.Checkpoint] = true
			}
		}
	} else {
		return
	}
	recs, err := m.store.AllSandboxes(ctx)
	if err != nil {
		return
	}
	for _, rec := range recs {
		var info runtimeInfo
		if json.Unmarshal([]byte(rec.Runtime), &info) == nil && info.Checkpoint != "" {
			used[info.Checkpoint] = true
		}
	}
	for _, e := range ents {
		dir := m.checkpointDir(e.Name())
		if used[dir] {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue // being made
		}
		if strings.HasPrefix(e.Name(), "build-") || strings.HasPrefix(e.Name(), template.PausedPrefix) {
			if err := os.RemoveAll(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
				m.logger.Warn("remove an unused checkpoint", "dir", dir, "err", err)
			}
		}
	}
}
