// Package template keeps the template store: immutable root filesystems,
// one directory each, that sandboxes use as their read-only lower layer.
//
// A store is a directory (default /var/lib/hutch/templates) holding
//
//	<name>/rootfs          the root filesystem, owned by real root
//	<name>/template.json   Config: default user, workdir, recipe hash
//
// A template may be built on another (mcp-gateway on base): its recipe
// copies that one's root, and the hash it records covers that one's build.
//
// A template directory is never changed in place: a rebuild writes a new
// directory and renames it over the old one, so several Hutch processes may
// share one store read-only while sandboxes use it.
package template

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// DefaultDir is where templates live unless told otherwise.
const DefaultDir = "/var/lib/hutch/templates"

// Config is the metadata stored beside a template's root filesystem.
type Config struct {
	Name           string    `json:"name"`           // the template's name in its store
	DefaultUser    string    `json:"defaultUser"`    // user sandboxes run as unless told otherwise
	DefaultWorkdir string    `json:"defaultWorkdir"` // that user's working directory
	RecipeHash     string    `json:"recipeHash"`     // sha256 of the recipe it was built from (and of From and HutchSHA256)
	Built          time.Time `json:"built"`          // when the build finished (UTC)
	// From is the build of the template this one was made from, if any.
	From *Origin `json:"from,omitempty"`
	// HutchSHA256 is the SHA-256 of the hutch binary the template carries, if any.
	HutchSHA256 string `json:"hutchSha256,omitempty"`
	// DiskSizeMB, when set, is the disk limit of the template's sandboxes
	// (their writable layer), instead of the server's default.
	DiskSizeMB int `json:"diskSizeMB,omitempty"`
}

// Origin names one build of a template.
type Origin struct {
	Name       string    `json:"name"`
	RecipeHash string    `json:"recipeHash"`
	Built      time.Time `json:"built"`
}

// Template is one built template in a store.
type Template struct {
	Config
	// Dir is the template's directory; RootFS is Dir/rootfs.
	Dir    string
	RootFS string
}

// Store is a template directory. The zero value is not usable; use Open.
type Store struct {
	dir string
}

// ValidName reports whether name may name a template: 1-63 characters of
// [a-z0-9._-], starting with a letter or digit.
func ValidName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Open returns the store in dir. The directory need not exist yet.
func Open(dir string) *Store {
	if dir == "" {
		dir = DefaultDir
	}
	return &Store{dir: dir}
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Get returns the template called name, or an error wrapping
// errdefs.ErrNotFound if it has not been built.
func (s *Store) Get(name string) (*Template, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	dir := filepath.Join(s.dir, name)
	b, err := os.ReadFile(filepath.Join(dir, "template.json"))
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("template %q is not built (build it with `hutch template build %s`): %w", name, name, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read template %q: %w", name, err)
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("template %q: bad template.json: %w", name, err)
	}
	cfg.Name = name
	return &Template{Config: cfg, Dir: dir, RootFS: filepath.Join(dir, "rootfs")}, nil
}

// List returns every built template, by name.
func (s *Store) List() ([]*Template, error) {
	ents, err := os.ReadDir(s.dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []*Template
	for _, e := range ents {
		if !e.IsDir() || !ValidName(e.Name()) {
			continue
		}
		if t, err := s.Get(e.Name()); err == nil {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
