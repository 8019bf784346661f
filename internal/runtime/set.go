package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Set is one Runtime made of several backends, by name: Create uses the
// backend Spec.Runtime names (the default one when empty), Load and List
// see every backend's sandboxes. Sandbox ids are unique across a Set's
// backends as long as each backend's are random (a Spec.ID given twice to
// two backends is the caller's to avoid: Create checks the others first).
type Set struct {
	def      string
	backends map[string]Runtime
	names    []string
}

// NewSet returns a Set of backends whose default is def.
func NewSet(def string, backends map[string]Runtime) (*Set, error) {
	if backends[def] == nil {
		return nil, fmt.Errorf("runtime %q is not available here (have %s): %w", def, strings.Join(sortedKeys(backends), ", "), errdefs.ErrInvalidArgument)
	}
	return &Set{def: def, backends: backends, names: sortedKeys(backends)}, nil
}

func sortedKeys(m map[string]Runtime) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Default is the name of the backend sandboxes run on unless told.
func (s *Set) Default() string { return s.def }

// Names lists the backends, sorted.
func (s *Set) Names() []string { return slices.Clone(s.names) }

// Backend returns the backend called name ("" for the default), or an
// error wrapping errdefs.ErrInvalidArgument naming those there are.
func (s *Set) Backend(name string) (Runtime, error) {
	if name == "" {
		name = s.def
	}
	if rt := s.backends[name]; rt != nil {
		return rt, nil
	}
	return nil, fmt.Errorf("runtime %q is not available on this server (it has %s): %w", name, strings.Join(s.names, ", "), errdefs.ErrInvalidArgument)
}

// Create implements Runtime on the backend spec.Runtime names.
func (s *Set) Create(ctx context.Context, spec Spec) (Sandbox, error) {
	rt, err := s.Backend(spec.Runtime)
	if err != nil {
		return nil, err
	}
	if spec.ID != "" {
		for name, other := range s.backends {
			if other == rt {
				continue
			}
			if _, err := other.Load(ctx, spec.ID); err == nil {
				return nil, fmt.Errorf("sandbox %s exists on runtime %s: %w", spec.ID, name, errdefs.ErrAlreadyExists)
			}
		}
	}
	return rt.Create(ctx, spec)
}

// Load implements Runtime: the first backend that has id.
func (s *Set) Load(ctx context.Context, id string) (Sandbox, error) {
	for _, name := range s.names {
		sbx, err := s.backends[name].Load(ctx, id)
		if err == nil || !errors.Is(err, errdefs.ErrNotFound) {
			return sbx, err
		}
	}
	return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
}

// List implements Runtime: every backend's sandboxes.
func (s *Set) List(ctx context.Context) ([]Status, error) {
	var out []Status
	for _, name := range s.names {
		l, err := s.backends[name].List(ctx)
		if err != nil {
			return nil, fmt.Errorf("runtime %s: %w", name, err)
		}
		out = append(out, l...)
	}
	return out, nil
}

// Capabilities implements Runtime: the default backend's. CapabilitiesOf
// tells another's.
func (s *Set) Capabilities(ctx context.Context) Capabilities {
	return s.backends[s.def].Capabilities(ctx)
}

// CapabilitiesOf is what backend name can do here; the zero value for a
// backend the Set does not have.
func (s *Set) CapabilitiesOf(ctx context.Context, name string) Capabilities {
	rt, err := s.Backend(name)
	if err != nil {
		return Capabilities{}
	}
	return rt.Capabilities(ctx)
}

// Checkpoint implements Checkpointer on the backend running id.
func (s *Set) Checkpoint(ctx context.Context, id, dir string) error {
	sbx, err := s.Load(ctx, id)
	if err != nil {
		return err
	}
	st, err := sbx.Status(ctx)
	if err != nil {
		return err
	}
	cp, err := s.checkpointer(st.Runtime)
	if err != nil {
		return err
	}
	return cp.Checkpoint(ctx, id, dir)
}

// Restore implements Checkpointer on the backend spec.Runtime names.
func (s *Set) Restore(ctx context.Context, dir string, spec RestoreSpec) (Sandbox, error) {
	cp, err := s.checkpointer(spec.Runtime)
	if err != nil {
		return nil, err
	}
	return cp.Restore(ctx, dir, spec)
}

func (s *Set) checkpointer(name string) (Checkpointer, error) {
	rt, err := s.Backend(name)
	if err != nil {
		return nil, err
	}
	cp, ok := rt.(Checkpointer)
	if !ok || !rt.Capabilities(context.Background()).Checkpoint.Available {
		if name == "" {
			name = s.def
		}
		why := "it cannot"
		if ok {
			why = rt.Capabilities(context.Background()).Checkpoint.Reason
		}
		return nil, fmt.Errorf("runtime %s cannot checkpoint sandboxes here (%s): %w", name, why, errdefs.ErrNotImplemented)
	}
	return cp, nil
}

var (
	_ Runtime      = (*Set)(nil)
	_ Checkpointer = (*Set)(nil)
)
