package sandbox

import (
	"fmt"
	goruntime "runtime"

	"github.com/hutch-sandbox/hutch/internal/runtime"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Every sandbox holds host resources of its own — a loop device and its
// disk image, memory up to its limit, a uid range, tasks, connections — so
// the per-sandbox bounds are only bounds when the number of sandboxes is
// one too. The manager caps the sandboxes it runs, per key and in all.
//
// What counts as running: every sandbox the manager runs for a key
// (created, resumed, or adopted by Recover) plus every Create in flight,
// which reserves its slot before it starts anything, so concurrent creates
// cannot overshoot. A slot is given back when its Create fails or its
// sandbox is removed (killed, expired, or ended on its own) or paused.
// Warm sandboxes belong to no key and are not counted (the pool holds at
// most Options.Warm of them); the one a Create takes from the pool is
// counted from then on.
//
// A paused sandbox does not count as running, as at E2B, whose concurrency
// limit counts running sandboxes. One paused without its memory holds only
// disk. One paused with its memory (frozen) still holds that memory, its
// uid range and its disk: those have caps of their own, the same numbers as
// the running caps (a key may have N running and N frozen), so that pausing
// is no way around the bounds. A resume takes a running slot again, and
// fails as a create would when none is free.

// LimitError is the error of a Create, resume or pause when a cap is
// reached. It matches errdefs.ErrResourceExhausted; its message names the
// cap.
type LimitError struct {
	// Limit is the cap that was reached.
	Limit int
	// PerKey is true for the per-key cap, false for the total.
	PerKey bool
	// Frozen is true for the caps on sandboxes paused with their memory.
	Frozen bool
}

// Error says which cap was reached and what it is.
func (e *LimitError) Error() string {
	switch {
	case e.Frozen && e.PerKey:
		return fmt.Sprintf("paused sandbox limit reached: an API key may have at most %d sandboxes paused with their memory; pause without memory (keepMemory false) or kill one first", e.Limit)
	case e.Frozen:
		return fmt.Sprintf("paused sandbox limit reached: this server keeps at most %d sandboxes paused with their memory; pause without memory (keepMemory false) or retry when some have ended", e.Limit)
	case e.PerKey:
		return fmt.Sprintf("sandbox limit reached: an API key may have at most %d sandboxes running at once; kill or pause one first", e.Limit)
	}
	return fmt.Sprintf("sandbox limit reached: this server runs at most %d sandboxes at once; retry when some have ended", e.Limit)
}

// Is makes a LimitError match errdefs.ErrResourceExhausted.
func (e *LimitError) Is(target error) bool { return target == errdefs.ErrResourceExhausted }

// slots counts the sandboxes of each key holding one kind of slot (running,
// or frozen) under a per-key and a total cap (0: none). The manager's lock
// guards it.
type slots struct {
	perKey, total int
	frozen        bool // for LimitError
	held          map[string]int
	all           int
}

func newSlots(perKey, total int, frozen bool) *slots {
	return &slots{perKey: perKey, total: total, frozen: frozen, held: map[string]int{}}
}

// take takes a slot of keyID, or returns a *LimitError at a cap.
func (s *slots) take(keyID string) error {
	if s.perKey > 0 && s.held[keyID] >= s.perKey {
		return &LimitError{Limit: s.perKey, PerKey: true, Frozen: s.frozen}
	}
	if s.total > 0 && s.all >= s.total {
		return &LimitError{Limit: s.total, Frozen: s.frozen}
	}
	s.add(keyID)
	return nil
}

// add takes a slot whatever the caps say.
func (s *slots) add(keyID string) {
	s.held[keyID]++
	s.all++
}

// give gives back a slot of keyID.
func (s *slots) give(keyID string) {
	if n := s.held[keyID] - 1; n > 0 {
		s.held[keyID] = n
	} else {
		delete(s.held, keyID)
	}
	s.all--
}

// reserve takes a running slot for a sandbox of keyID, or returns a
// *LimitError when a cap is reached. Release it with release unless the
// sandbox becomes live (adopt), whose removal releases it.
func (m *Manager) reserve(keyID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run.take(keyID)
}

// hold counts a running sandbox of keyID whatever the caps say: one that
// already runs, adopted after a restart (a lowered cap never kills
// anything; the key creates no more until it is under it again).
func (m *Manager) hold(keyID string) {
	m.mu.Lock()
	m.run.add(keyID)
	m.mu.Unlock()
}

// release gives back a running slot of keyID.
func (m *Manager) release(keyID string) {
	m.mu.Lock()
	m.run.give(keyID)
	m.mu.Unlock()
}

// releaseLiveLocked gives back the slot live sandbox l holds: a frozen
// one's when it is paused, a running one's otherwise. The manager's lock
// is held.
func (m *Manager) releaseLiveLocked(l *live) {
	if l.paused {
		m.frozen.give(l.keyID)
	} else {
		m.run.give(l.keyID)
	}
}

// running returns how many sandboxes keyID holds (running, or being
// created) and how many all keys hold together.
func (m *Manager) running(keyID string) (key, total int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run.held[keyID], m.run.all
}

// Bounds on the resources a create may ask for (CreateRequest.Resources):
// below them a sandbox cannot run envd and a shell usefully.
const (
	minCPUMillis = 100
	minMemoryMB  = 64
)

// maxResources is max with its zero fields filled in: this host's cores,
// and a quarter of its memory but at least every sandbox's own.
func maxResources(defaults, bound runtime.Resources) runtime.Resources {
	if bound.CPUs <= 0 {
		bound.CPUs = float64(goruntime.NumCPU())
	}
	if bound.MemoryBytes <= 0 {
		bound.MemoryBytes = max(int64(hostMemory()/4), defaults.MemoryBytes, 512<<20)
	}
	return bound
}

// CheckResources refuses resources a sandbox may not ask for here: a
// quota below a tenth of a core or above the server's bound
// (Options.MaxResources), memory below 64 MiB or above its bound. One
// sandbox must not take the host whole. The error is an
// errdefs.ErrInvalidArgument that names the bound.
func (m *Manager) CheckResources(r Resources) error {
	if c := r.CPUMillis; c != 0 {
		if most := int(m.maxResources.CPUs * 1000); c < minCPUMillis || c > most {
			return fmt.Errorf("cpu %dm: want %dm to %dm (this server's bound; hutch serve --max-cpus): %w", c, minCPUMillis, most, errdefs.ErrInvalidArgument)
		}
	}
	if mb := r.MemoryMB; mb != 0 {
		if most := int(m.maxResources.MemoryBytes >> 20); mb < minMemoryMB || mb > most {
			return fmt.Errorf("memory %d MiB: want %d MiB to %d MiB (this server's bound; hutch serve --max-memory): %w", mb, minMemoryMB, most, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
