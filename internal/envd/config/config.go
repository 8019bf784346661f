// Package config holds envd's run-time settings: the sandbox-wide defaults
// that POST /init sets (environment, access token, default user and working
// directory) and that every service reads. Safe for concurrent use.
package config

import (
	"maps"
	"sync"
)

// State is envd's mutable configuration. The zero value is not usable; use New.
type State struct {
	version string

	mu      sync.RWMutex
	envs    map[string]string
	token   string
	user    string
	workdir string
}

// New returns the state envd starts with: user is the default user, version
// the envd version this server reports.
func New(version, user string) *State {
	return &State{version: version, user: user, envs: map[string]string{}}
}

// Version is the envd protocol version this server implements.
func (s *State) Version() string { return s.version }

// Envs returns a copy of the sandbox-wide environment.
func (s *State) Envs() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.envs)
}

// SetEnvs adds or replaces sandbox-wide environment variables.
func (s *State) SetEnvs(envs map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range envs {
		s.envs[k] = v
	}
}

// Token is the access token requests must carry; empty means unsecured.
func (s *State) Token() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.token
}

// SetToken sets the access token.
func (s *State) SetToken(t string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = t
}

// DefaultUser is the user for requests that name none.
func (s *State) DefaultUser() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.user
}

// DefaultWorkdir is where relative paths and commands start when set;
// empty means the user's home.
func (s *State) DefaultWorkdir() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.workdir
}

// SetDefaults sets the default user and working directory; empty values
// leave the current ones.
func (s *State) SetDefaults(user, workdir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if user != "" {
		s.user = user
	}
	if workdir != "" {
		s.workdir = workdir
	}
}
