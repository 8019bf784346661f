package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/store"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// Pausing keeps a sandbox to be resumed later, as E2B's pause does, in one
// of two modes:
//
//   - keeping memory (E2B's default): every process of the sandbox is
//     frozen in place (the runtime's Freeze: no CPU, no scheduling); its
//     memory stays where it is, and so does its slot under the caps, since
//     the host still holds that memory. Resuming thaws it.
//   - keeping files (keepMemory false, E2B's "filesystem" mode): the
//     sandbox's writable layer becomes a build of the template store (named
//     pausedName(id), of kind template.SnapshotPause) and the sandbox is
//     deleted: no process, no memory, no slot, no network link. Resuming
//     boots a new sandbox of the same id on that build (its template's start
//     command runs again) and hands it the same tokens, envs and metadata.
//
// Either way the files, id, tokens, metadata and envs are kept, and a paused
// sandbox has no expiry (it is kept until killed, or the paused retention).
//
//	running ─Pause(memory)─► freeze ─► record paused ─────────Connect─► thaw ─► record running
//	running ─Pause(files)──► freeze ─► capture build ─► record paused+build ─► delete sandbox
//	paused+build ─Connect──► start sandbox of the build, same id ─► record running ─► adopt
//
// The record changes after the runtime did, and Recover makes the runtime
// agree with the record: a server killed in between finds each sandbox
// running or paused, never half. One operation at a time changes a
// sandbox's state (lockOp): a second pause waits for the first, then finds
// the sandbox paused.

// ErrAlreadyPaused is Pause's error for a sandbox that is paused. It matches
// errdefs.ErrFailedPrecondition.
var ErrAlreadyPaused = fmt.Errorf("sandbox is already paused: %w", errdefs.ErrFailedPrecondition)

// pausedName is the template store name of the files of sandbox id paused
// without its memory.
func pausedName(id string) string { return template.PausedPrefix + id }

// opLock is one sandbox's operation lock; refs counts holders and waiters.
type opLock struct {
	ch   chan struct{}
	refs int
}

// lockOp takes sandbox id's operation lock: pause, resume, snapshot, fork
// and removal of one sandbox happen one at a time. It waits, or fails with
// ctx's error.
func (m *Manager) lockOp(ctx context.Context, id string) (unlock func(), err error) {
	m.mu.Lock()
	o := m.ops[id]
	if o == nil {
		o = &opLock{ch: make(chan struct{}, 1)}
		m.ops[id] = o
	}
	o.refs++
	m.mu.Unlock()
	done := func() {
		m.mu.Lock()
		if o.refs--; o.refs == 0 {
			delete(m.ops, id)
		}
		m.mu.Unlock()
	}
	select {
	case o.ch <- struct{}{}:
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
	return func() { <-o.ch; done() }, nil
}

// Pause pauses sandbox id of keyID, keeping its memory or only its files
// (see above). A paused sandbox gives ErrAlreadyPaused, an unknown one
// errdefs.ErrNotFound.
func (m *Manager) Pause(ctx context.Context, keyID, id string, keepMemory bool) error {
	unlock, err := m.lockOp(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	return m.pauseLocked(ctx, keyID, id, keepMemory)
}

// pauseLocked is Pause with the sandbox's operation lock held; it counts
// the pause in the metrics.
func (m *Manager) pauseLocked(ctx context.Context, keyID, id string, keepMemory bool) (retErr error) {
	defer func() { m.metrics.Pause(keepMemory, retErr) }()
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return err
	}
	if rec.State == string(StatePaused) {
		return ErrAlreadyPaused
	}
	m.mu.Lock()
	l := m.live[id]
	if l == nil || l.internal {
		m.mu.Unlock()
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	// On a backend that checkpoints, memory is kept on disk: the sandbox
	// then holds no slot while paused, as one paused as its files.
	cp, checkpoint := m.checkpointerOf(ctx, backendOf(ctx, l.sbx))
	checkpoint = checkpoint && keepMemory
	frozenSlot := keepMemory && !checkpoint
	if frozenSlot {
		// Frozen, it still holds its memory: a frozen slot of its own.
		if err := m.frozen.take(l.keyID); err != nil {
			m.mu.Unlock()
			return fmt.Errorf("pause sandbox %s: %w", id, err)
		}
	}
	// From here nothing routes to it: a request that reached it before
	// may still be answered, one after waits for no frozen process.
	l.pausing = true
	if t := m.timers[id]; t != nil {
		t.Stop()
		delete(m.timers, id)
	}
	m.mu.Unlock()
	undo := func() {
		l.sbx.Thaw(context.Background())
		m.mu.Lock()
		l.pausing = false
		if frozenSlot {
			m.frozen.give(l.keyID)
		}
		m.mu.Unlock()
		m.schedule(id, rec.EndAt)
	}
	if checkpoint {
		// No freeze first: the checkpoint stops the sandbox while it saves
		// it, and nothing routes to it meanwhile.
		if err := m.pauseCheckpoint(ctx, l, &rec, cp); err != nil {
			undo()
			return fmt.Errorf("pause sandbox %s: %w", id, err)
		}
		return nil
	}
	if err := l.sbx.Freeze(ctx); err != nil {
		undo()
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	m.step(fault.PauseFrozen)
	if !keepMemory {
		if err := m.pauseFiles(ctx, l, &rec); err != nil {
			undo()
			return fmt.Errorf("pause sandbox %s: %w", id, err)
		}
		return nil
	}
	var info runtimeInfo
	json.Unmarshal([]byte(rec.Runtime), &info)
	info.PausedAt = time.Now().UTC()
	paused, _ := json.Marshal(info)
	if err := m.store.SetStateRuntime(ctx, id, string(StatePaused), string(paused)); err != nil {
		undo()
		return fmt.Errorf("pause sandbox %s: %w", id, err)
	}
	m.mu.Lock()
	l.pausing, l.paused = false, true
	m.run.give(l.keyID) // it holds the frozen slot taken above instead
	m.mu.Unlock()
	return nil
}

// pauseFiles turns frozen sandbox l into its files: a build of the template
// store, recorded with the sandbox, which is then deleted.
func (m *Manager) pauseFiles(ctx context.Context, l *live, rec *store.Sandbox) error {
	id := rec.ID
	t, err := m.captureBuild(ctx, l, rec.KeyID, pausedName(id), true, template.SnapshotOf{Sandbox: id, Kind: template.SnapshotPause}, nil)
	if err != nil {
		return err
	}
	m.step(fault.PauseCaptured)
	info, _ := json.Marshal(runtimeInfo{PausedBuild: t.ID, PausedAt: time.Now().UTC(), Backend: backendOf(ctx, l.sbx)})
	if err := m.store.SetStateRuntime(ctx, id, string(StatePaused), string(info)); err != nil {
		m.templates.Remove(t.ID, nil)
		return err
	}
	m.step(fault.PauseRecorded)
	// Recorded: from here the sandbox is its files. Its processes go; a
	// failure to delete them is logged and swept by the next Recover.
	m.mu.Lock()
	delete(m.live, id)
	m.releaseLiveLocked(l)
	m.mu.Unlock()
	l.route.close()
	if _, err := m.dropRuntime(ctx, id); err != nil {
		m.logger.Warn("a sandbox paused without memory", "id", id, "err", err)
	}
	return nil
}

// dropRuntime removes what sandbox id holds on the host while it runs
// beside its route: its network link, runtime sandbox and envd sockets.
// It reports the template build the sandbox ran on. Its record, live
// entry and route are the caller's.
func (m *Manager) dropRuntime(ctx context.Context, id string) (build string, err error) {
	if m.net != nil {
		if err := m.net.Detach(ctx, id); err != nil {
			m.logger.Warn("detach sandbox network", "id", id, "err", err)
		}
	}
	if sbx, err := m.rt.Load(ctx, id); err == nil {
		if st, err := sbx.Status(ctx); err == nil {
			build = st.TemplateID
		}
		if err := sbx.Delete(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return build, fmt.Errorf("kill sandbox %s: %w", id, err)
		}
	}
	api, control := m.socketPaths(id)
	os.Remove(api)
	os.Remove(control)
	return build, nil
}

// minResumeLife is the least a resumed sandbox lives: clients connect
// with a second to say "do not extend" (Hutch's CLI and MCP tools do),
// which must not end a sandbox they resumed a second later.
const minResumeLife = time.Minute

// resumeLocked resumes paused sandbox rec and gives it d (at least
// minResumeLife) to live; the sandbox's operation lock is held. reboot
// boots one that kept its memory again on its files instead. It counts
// the resume in the metrics.
func (m *Manager) resumeLocked(ctx context.Context, rec *store.Sandbox, d time.Duration, reboot bool) (retErr error) {
	defer func() { m.metrics.Resume(retErr) }()
	d = max(d, minResumeLife)
	id := rec.ID
	var info runtimeInfo
	json.Unmarshal([]byte(rec.Runtime), &info)
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if info.Checkpoint != "" {
		if err := m.resumeCheckpoint(ctx, rec, info, d); err != nil || !reboot {
			return err
		}
		// Booted again on its files: restored, its files captured, and
		// started on them.
		m.mu.Lock()
		l = m.live[id]
		m.mu.Unlock()
		if err := l.sbx.Freeze(ctx); err != nil {
			return fmt.Errorf("reboot sandbox %s: %w", id, err)
		}
		if err := m.pauseFiles(ctx, l, rec); err != nil {
			return fmt.Errorf("reboot sandbox %s: %w", id, err)
		}
		r, err := m.store.GetSandbox(ctx, "", id)
		if err != nil {
			return err
		}
		*rec = r
		info = runtimeInfo{}
		json.Unmarshal([]byte(rec.Runtime), &info)
		return m.resumeFiles(ctx, rec, info.PausedBuild, info.Backend, d)
	}
	if reboot && info.PausedBuild == "" && l != nil && l.paused {
		if err := m.pauseFiles(ctx, l, rec); err != nil {
			return fmt.Errorf("reboot sandbox %s: %w", id, err)
		}
		r, err := m.store.GetSandbox(ctx, "", id)
		if err != nil {
			return err
		}
		*rec = r
		json.Unmarshal([]byte(rec.Runtime), &info)
	}
	if info.PausedBuild != "" {
		return m.resumeFiles(ctx, rec, info.PausedBuild, info.Backend, d)
	}
	m.mu.Lock()
	if l == nil || !l.paused {
		m.mu.Unlock()
		return fmt.Errorf("paused sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	// Running again, it takes a running slot (and gives its frozen one
	// back once it runs).
	if err := m.run.take(l.keyID); err != nil {
		m.mu.Unlock()
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	l.pausing = true // resuming
	m.mu.Unlock()
	fail := func(err error) error {
		l.sbx.Freeze(context.Background())
		m.mu.Lock()
		l.pausing = false
		m.run.give(l.keyID)
		m.mu.Unlock()
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	if err := l.sbx.Thaw(ctx); err != nil {
		return fail(err)
	}
	m.step(fault.ResumeThawed)
	end := time.Now().Add(d)
	if err := m.store.SetEndAt(ctx, id, end); err != nil {
		return fail(err)
	}
	info.PausedAt = time.Time{}
	running, _ := json.Marshal(info)
	if err := m.store.SetStateRuntime(ctx, id, string(StateRunning), string(running)); err != nil {
		return fail(err)
	}
	m.mu.Lock()
	l.pausing, l.paused = false, false
	m.frozen.give(l.keyID)
	m.mu.Unlock()
	m.schedule(id, end)
	return nil
}

// resumeFiles boots sandbox rec again from the build its files were kept
// in (pauseFiles), under its own id and tokens, on backend, for d.
func (m *Manager) resumeFiles(ctx context.Context, rec *store.Sandbox, build, backend string, d time.Duration) error {
	tpl, err := m.templates.Get(build)
	if err != nil {
		return fmt.Errorf("resume sandbox %s: its files: %w", rec.ID, err)
	}
	if backend == "" {
		backend = tpl.Runtime // recorded before pauses named it
	}
	return m.resumeWith(ctx, rec, d, resumePlan{
		step: fault.ResumeStarted,
		make: func(ctx context.Context, sb *Sandbox) (*started, error) {
			mounts, err := m.mountsOf(sb)
			if err != nil {
				return nil, err
			}
			images, err := m.imageRoots(sb.KeyID, sb.Images, false)
			if err != nil {
				return nil, err
			}
			return m.startOn(ctx, rec.ID, tpl, attached{mounts, images}, backend, ownResources(sb))
		},
		init: func(ctx context.Context, st *started, sb *Sandbox) error {
			if err := m.initEnvd(ctx, st.route, sb, tpl); err != nil {
				return err
			}
			// Booted again: its main process too.
			return startEntrypoint(ctx, st.route, sb.EnvdAccessToken, sb.Entrypoint)
		},
	})
}

// resumePlan is what sets one kind of resume apart (resumeWith).
type resumePlan struct {
	// step names, for tests, the point where the sandbox is made.
	step string
	// make makes the sandbox in the runtime: booted on its files, or
	// restored from its memory.
	make func(ctx context.Context, sb *Sandbox) (*started, error)
	// token is envd's access token, for a restored envd that kept its
	// settings ("" for one that waits for its /init).
	token string
	// init, when not nil, runs once the sandbox has its network (envd's
	// /init for a fresh boot).
	init func(ctx context.Context, st *started, sb *Sandbox) error
	// done, when not nil, runs once the sandbox is recorded running.
	done func()
}

// resumeWith is what every resume of a sandbox that has left the runtime
// shares: take a slot for its key, make it (p.make), give it its network,
// record it running with d to live, and adopt it; on failure, what was
// done is undone.
func (m *Manager) resumeWith(ctx context.Context, rec *store.Sandbox, d time.Duration, p resumePlan) (retErr error) {
	id := rec.ID
	sb := fromRecord(rec)
	egress, err := parseEgress(sb.Network)
	if err != nil {
		return err
	}
	if err := m.reserve(rec.KeyID); err != nil {
		return err
	}
	adopted := false
	defer func() {
		if !adopted {
			m.release(rec.KeyID)
		}
	}()
	st, err := p.make(ctx, sb)
	if err != nil {
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	m.step(p.step)
	defer func() {
		if retErr != nil {
			if m.net != nil {
				m.net.Detach(context.Background(), id)
			}
			st.discard()
		}
	}()
	if err := m.attachNetwork(ctx, st.sbx, st.route, egress, p.token); err != nil {
		return err
	}
	if p.init != nil {
		if err := p.init(ctx, st, sb); err != nil {
			return err
		}
	}
	end := time.Now().Add(d)
	if err := m.store.SetEndAt(ctx, id, end); err != nil {
		return err
	}
	info, _ := json.Marshal(runtimeInfo{Socket: st.route.api, Control: st.route.control, Backend: st.backend})
	if err := m.store.SetStateRuntime(ctx, id, string(StateRunning), string(info)); err != nil {
		return err
	}
	m.step(fault.ResumeRecorded)
	if p.done != nil {
		p.done()
	}
	sb.State, sb.EndAt, sb.Runtime = StateRunning, end, st.backend
	m.adopt(st.sbx, st.route, sb, false)
	adopted = true
	return nil
}

// agree makes a recovered sandbox's runtime state what its record says:
// frozen when paused, running when running (a server killed between the
// runtime's step and the record's left them apart).
func agree(ctx context.Context, sbx runtime.Sandbox, st runtime.State, paused bool) error {
	switch {
	case paused && st == runtime.StateRunning:
		return sbx.Freeze(ctx)
	case !paused && st == runtime.StateFrozen:
		return sbx.Thaw(ctx)
	}
	return nil
}

// routable reports whether traffic may reach the sandbox: not one of
// Hutch's own, not paused or being paused. The manager's lock is held.
func (l *live) routable() bool { return !l.internal && !l.paused && !l.pausing }

// Refresh extends running sandbox id of keyID to at least d from now; a
// paused one, which has no expiry, is left as it is.
func (m *Manager) Refresh(ctx context.Context, keyID, id string, d time.Duration) error {
	rec, err := m.store.GetSandbox(ctx, keyID, id)
	if err != nil {
		return err
	}
	if rec.State == string(StatePaused) {
		return nil
	}
	return m.extend(ctx, id, d)
}

// extend moves running sandbox id's end to d from now when that is later,
// never earlier, and rearms its expiry.
func (m *Manager) extend(ctx context.Context, id string, d time.Duration) error {
	end, err := m.store.ExtendEndAt(ctx, id, time.Now().Add(d))
	if err != nil {
		return err
	}
	m.schedule(id, end)
	return nil
}

// WakeRules tells, for a paused sandbox that traffic resumes (Wake), what
// a request must carry before it may wake it: the sandbox's traffic
// access token for its ports (empty: none needed) and envd's access token
// for envd (empty: none). ok is false for every other sandbox. The router
// checks them first: a request that would be refused once the sandbox runs
// must not resume it (and take a slot of its key) on the way.
func (m *Manager) WakeRules(id string) (traffic, envd string, ok bool) {
	m.mu.Lock()
	l := m.live[id]
	if l == nil {
		m.mu.Unlock()
		return m.checkpointWakeRules(id)
	}
	defer m.mu.Unlock()
	if !(l.paused || l.pausing) || !l.autoResume || l.internal {
		return "", "", false
	}
	return l.trafficToken, l.route.accessToken(), true
}

// checkpointWakeRules is WakeRules for a sandbox paused into a checkpoint,
// which has no live entry: its record has the rules.
func (m *Manager) checkpointWakeRules(id string) (traffic, envd string, ok bool) {
	rec, ok := m.checkpointPaused(id)
	if !ok || !rec.AutoResume {
		return "", "", false
	}
	return rec.TrafficAccessToken, rec.EnvdAccessToken, true
}

// checkpointPaused returns the record of sandbox id when it is paused into
// a checkpoint.
func (m *Manager) checkpointPaused(id string) (store.Sandbox, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := m.store.GetSandbox(ctx, "", id)
	if err != nil || rec.State != string(StatePaused) {
		return rec, false
	}
	var info runtimeInfo
	json.Unmarshal([]byte(rec.Runtime), &info)
	return rec, info.Checkpoint != ""
}

// Wake resumes paused sandbox id when it was made to resume on traffic
// (E2B's autoResume), for DefaultTimeout: the edge router calls it for a
// request to a sandbox it found no route to. It reports whether the
// sandbox runs now. Only a sandbox paused with its memory is woken this way
// (a pause of files only must be resumed by a connect, as at E2B).
func (m *Manager) Wake(ctx context.Context, id string) bool {
	m.mu.Lock()
	l := m.live[id]
	ok := l != nil && (l.paused || l.pausing) && l.autoResume && !l.internal
	m.mu.Unlock()
	if l == nil {
		// Paused into a checkpoint: not live, recorded.
		rec, paused := m.checkpointPaused(id)
		ok = paused && rec.AutoResume
	}
	if !ok {
		return false
	}
	unlock, err := m.lockOp(ctx, id)
	if err != nil {
		return false
	}
	defer unlock()
	rec, err := m.store.GetSandbox(ctx, "", id)
	if err != nil {
		return false
	}
	if rec.State != string(StatePaused) {
		return true // resumed by the request it waited for
	}
	if err := m.resumeLocked(ctx, &rec, DefaultTimeout, false); err != nil {
		m.logger.Info("auto-resume of a paused sandbox", "id", id, "err", err)
		return false
	}
	m.logger.Info("sandbox resumed by traffic", "id", id)
	return true
}
