package sandbox

import (
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Every sandbox holds host resources of its own — a loop device and its
// disk image, memory up to its limit, a uid range, tasks, connections — so
// the per-sandbox bounds are only bounds when the number of sandboxes is
// one too. The manager caps the sandboxes it runs, per key and in all.
//
// What counts: every sandbox the manager runs for a key (created, or
// adopted by Recover) plus every Create in flight, which reserves its slot
// before it starts anything, so concurrent creates cannot overshoot.
// A slot is given back when its Create fails or its sandbox is removed
// (killed, expired, or ended on its own). Warm sandboxes belong to no key
// and are not counted (the pool holds at most Options.Warm of them); the
// one a Create takes from the pool is counted from then on. Hutch has no
// paused sandboxes: were pausing added, a paused sandbox would hold its
// disk but no memory or tasks, and would count only when resumed, as at
// E2B, whose concurrency limit counts running sandboxes.

// LimitError is Create's error when a cap on running sandboxes is reached.
// It matches errdefs.ErrResourceExhausted; its message names the cap.
type LimitError struct {
	// Limit is the cap that was reached.
	Limit int
	// PerKey is true for the per-key cap, false for the total.
	PerKey bool
}

// Error says which cap was reached and what it is.
func (e *LimitError) Error() string {
	if e.PerKey {
		return fmt.Sprintf("sandbox limit reached: an API key may have at most %d sandboxes running at once; kill one first", e.Limit)
	}
	return fmt.Sprintf("sandbox limit reached: this server runs at most %d sandboxes at once; retry when some have ended", e.Limit)
}

// Is makes a LimitError match errdefs.ErrResourceExhausted.
func (e *LimitError) Is(target error) bool { return target == errdefs.ErrResourceExhausted }

// reserve takes a slot for a sandbox of keyID, or returns a *LimitError
// when a cap is reached. Release it with release unless the sandbox
// becomes live (adopt), whose removal releases it.
func (m *Manager) reserve(keyID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.maxPerKey > 0 && m.held[keyID] >= m.maxPerKey {
		return &LimitError{Limit: m.maxPerKey, PerKey: true}
	}
	if m.maxTotal > 0 && m.heldAll >= m.maxTotal {
		return &LimitError{Limit: m.maxTotal}
	}
	m.holdLocked(keyID)
	return nil
}

// hold counts a sandbox of keyID whatever the caps say: one that already
// runs, adopted after a restart (a lowered cap never kills anything; the
// key creates no more until it is under it again).
func (m *Manager) hold(keyID string) {
	m.mu.Lock()
	m.holdLocked(keyID)
	m.mu.Unlock()
}

func (m *Manager) holdLocked(keyID string) {
	m.held[keyID]++
	m.heldAll++
}

// release gives back a slot of keyID.
func (m *Manager) release(keyID string) {
	m.mu.Lock()
	m.releaseLocked(keyID)
	m.mu.Unlock()
}

func (m *Manager) releaseLocked(keyID string) {
	if n := m.held[keyID] - 1; n > 0 {
		m.held[keyID] = n
	} else {
		delete(m.held, keyID)
	}
	m.heldAll--
}

// running returns how many sandboxes keyID holds (running, or being
// created) and how many all keys hold together.
func (m *Manager) running(keyID string) (key, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held[keyID], m.heldAll
}
