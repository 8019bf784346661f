package sandbox

import (
	"context"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// Key is an API key as the manager knows it: never its secret.
type Key = store.Key

// Role is what an API key may do besides running sandboxes.
type Role = store.Role

// The roles.
const (
	RoleAdmin = store.RoleAdmin
	RoleUser  = store.RoleUser
)

// ParseRole returns the role named s; errdefs.ErrInvalidArgument if there
// is none.
func ParseRole(s string) (Role, error) { return store.ParseRole(s) }

// Key returns the API key whose id is id, revoked or not;
// errdefs.ErrNotFound if there is none.
func (m *Manager) Key(ctx context.Context, id string) (Key, error) {
	return m.store.GetKey(ctx, id)
}

// Keys returns every API key, revoked ones included, oldest first.
func (m *Manager) Keys(ctx context.Context) ([]Key, error) {
	return m.store.ListKeys(ctx)
}

// NewKey makes an API key of role and returns its plaintext, which is kept
// nowhere, with the stored key.
func (m *Manager) NewKey(ctx context.Context, name string, role Role) (string, Key, error) {
	return m.store.NewKey(ctx, name, role)
}

// RevokeKey revokes the API key whose id is id. Its sandboxes run on; it
// stops authenticating.
func (m *Manager) RevokeKey(ctx context.Context, id string) error {
	if _, err := m.store.GetKey(ctx, id); err != nil {
		return err
	}
	return m.store.RevokeKey(ctx, id)
}

// Principal returns, for running sandbox id, the id of the API key that
// made it and envd's access token ("" when it has none): who an accepted
// request to it acts for, and what proves it.
func (m *Manager) Principal(id string) (keyID, envdToken string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.live[id]
	if l == nil || l.route == nil {
		return "", "", false
	}
	return l.keyID, l.route.accessToken(), true
}
