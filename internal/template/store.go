// Package template keeps the template store: immutable stacks of
// content-addressed, read-only layers plus their config, which sandboxes
// use as the lower layers of their overlay root.
//
// A store is a directory (default /var/lib/hutch/templates) holding
//
//	layers/               0700: an image's setuid files are never reachable by host users
//	  <id>/rootfs         one layer's files, in overlayfs's lower-layer form: a
//	                      deleted path is a 0/0 character device, a directory
//	                      that hides the ones below has user.overlay.opaque=y
//	  <id>/layer.json     Layer: size on disk, where it came from, when
//	  <id>/export.json    the digest of the layer's stream for peers, once
//	                      one asked (see WriteLayer)
//	builds/<build>.json   one immutable version of a template: its layers (bottom
//	                      first) and Config
//	names/<name>.json     the tags of a template name ("default", "v2", ...), each
//	                      pointing at a build
//	cache/<key>           the build cache: a step's key -> the layer it made
//	files/<sha256>        archives uploaded for COPY steps
//	.lock                 held while the store is written
//
// A layer's id is the SHA-256 of its content as an uncompressed OCI layer
// tar (an image's diff id) or, for layers that are not made from one, of
// the inputs that determine the content. Layers are shared: two templates
// built from base use base's layers on disk, not copies. Builds are never
// changed in place; a rebuild makes a new build and moves the tag. A layer
// is deleted when no build refers to it and no mount table names it, so
// several Hutch processes may share one store while sandboxes use it.
//
// The files are owned by real root with the ids the image gave them;
// sandboxes see them through an idmapped mount (see the native runtime).
package template

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// DefaultDir is where templates live unless told otherwise.
const DefaultDir = "/var/lib/hutch/templates"

// DefaultTag is the tag a name without one means.
const DefaultTag = "default"

// Config is what a template says about the sandboxes made from it.
type Config struct {
	Name           string `json:"name"`           // the template's name in its store
	DefaultUser    string `json:"defaultUser"`    // user sandboxes run as unless told otherwise
	DefaultWorkdir string `json:"defaultWorkdir"` // where their commands start
	// Env holds KEY=VALUE defaults for every process (an image's Env, a
	// build's ENV steps).
	Env []string `json:"env,omitempty"`
	// Cmd is the image's Entrypoint followed by its Cmd: what the image
	// would run. Hutch does not start it; `StartCmd` is what starts.
	Cmd []string `json:"cmd,omitempty"`
	// Entrypoint is the image's Entrypoint alone: the part of Cmd that
	// arguments given to run the image do not replace.
	Entrypoint []string `json:"entrypoint,omitempty"`
	// StartCmd, when set, is started (with /bin/sh -c, in the background,
	// as DefaultUser in DefaultWorkdir) in every sandbox of the template,
	// and ReadyCmd must exit 0 before the sandbox is handed out.
	StartCmd string `json:"startCommand,omitempty"`
	ReadyCmd string `json:"readyCommand,omitempty"`
	// CPUCount and MemoryMB are the build's resources, as E2B records them.
	CPUCount int `json:"cpus,omitempty"`
	MemoryMB int `json:"memoryMiB,omitempty"`
	// DiskSizeMB, when set, is the disk limit of the template's sandboxes
	// (their writable layer), instead of the server's default.
	DiskSizeMB int `json:"diskSizeMB,omitempty"`
	// Runtime names the runtime backend the template needs; empty means any.
	Runtime string `json:"runtime,omitempty"`
	// Checkpoint, when set, is the directory of a checkpoint of a running
	// sandbox (a snapshot with its memory, on backend Runtime): sandboxes
	// of this build are restored from it, their processes going on,
	// rather than started. Its files are in the checkpoint; Layers are
	// the saved sandbox's template's.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Source says where the template came from: "recipe base", an image
	// reference and digest, "build".
	Source string `json:"source,omitempty"`
	// Owner is the id of the API key whose build this is; empty for the
	// host's operator (the CLI, the recipes).
	Owner string `json:"owner,omitempty"`

	// For templates built from an embedded recipe (base, mcp-gateway):
	RecipeHash string `json:"recipeHash,omitempty"` // sha256 of the recipe (and of From and HutchSHA256)
	// From is the build of the template this one was made from, if any.
	From *Origin `json:"from,omitempty"`
	// HutchSHA256 is the SHA-256 of the hutch binary the template carries, if any.
	HutchSHA256 string `json:"hutchSha256,omitempty"`

	Built time.Time `json:"built"` // when the build finished (UTC)

	// Snapshot is set on a build made from a sandbox's files rather than
	// built: a snapshot, a fork's, or the files of a paused sandbox.
	Snapshot *SnapshotOf `json:"snapshot,omitempty"`
}

// SnapshotOf says which sandbox a build was captured from, and why.
type SnapshotOf struct {
	// Sandbox is the id of the sandbox it was captured from.
	Sandbox string `json:"sandbox"`
	// Kind is what the capture is for: SnapshotUser, SnapshotPause or
	// SnapshotFork.
	Kind string `json:"kind"`
	// Expires, when set, is when Hutch removes the snapshot (its
	// retention); a snapshot in use is removed once unused.
	Expires time.Time `json:"expires,omitzero"`
}

// The kinds of SnapshotOf.
const (
	// SnapshotUser is a snapshot a user asked for: listed, usable to
	// create sandboxes, removed by its owner or at its Expires.
	SnapshotUser = "snapshot"
	// SnapshotPause keeps the files of a sandbox paused without its
	// memory; it is the sandbox's own, neither listed nor usable by name.
	SnapshotPause = "pause"
	// SnapshotFork is the sandbox's files at a fork, shared by the forks.
	SnapshotFork = "fork"
)

// PausedPrefix starts the names under which the files of sandboxes paused
// without their memory are kept ("paused-<sandbox id>"). Such names are
// Hutch's own: no build, import, tag or snapshot may take one, or it could
// keep a sandbox of another key from pausing.
const PausedPrefix = "paused-"

// Reserved reports whether name is one no template may be built, tagged or
// committed under except by Hutch itself (PausedPrefix).
func Reserved(name string) bool { return strings.HasPrefix(name, PausedPrefix) }

// errReserved is the error for a reserved name.
func errReserved(name string) error {
	return fmt.Errorf("template name %q: names starting with %q are Hutch's own: %w", name, PausedPrefix, errdefs.ErrInvalidArgument)
}

// Listed reports whether t belongs in a listing of templates: true for
// everything but captures of a sandbox (snapshots are listed as such).
func (t *Template) Listed() bool { return t.Snapshot == nil }

// Origin names one build of a template.
type Origin struct {
	Name       string    `json:"name"`
	RecipeHash string    `json:"recipeHash"`
	Built      time.Time `json:"built"`
}

// Layer is one read-only layer in the store.
type Layer struct {
	ID string `json:"id"` // hex SHA-256, see the package doc
	// Size is what its files take on disk, in bytes.
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	// Source says what made it: "oci sha256:<diff id>", "build", "recipe base".
	Source string `json:"source,omitempty"`
	// Content is true when ID is the SHA-256 of the layer as a tar (an
	// image's diff id, a captured RUN step): such a layer may stand in for
	// any image layer of that diff id. Other ids hash the inputs that
	// made the layer, and only those inputs find it again.
	Content bool `json:"contentAddressed,omitempty"`
}

// contentAddressed reports whether l's id is its content's (see Content).
func (l *Layer) contentAddressed() bool { return l.Content || strings.HasPrefix(l.Source, "oci ") }

// Template is one build of a template: its layers and config.
type Template struct {
	Config
	// ID is the build's id (E2B's buildID); a ref may name it directly.
	ID string `json:"id"`
	// Layers are its layers' ids, bottom first.
	Layers []string `json:"layers"`
	// Tags are the tags of Name that point at this build, when read
	// through Get or List.
	Tags []string `json:"-"`

	store string
}

// LowerDirs are the directories of t's layers, bottom first.
func (t *Template) LowerDirs() []string {
	dirs := make([]string, len(t.Layers))
	for i, id := range t.Layers {
		dirs[i] = layerRoot(t.store, id)
	}
	return dirs
}

// Ref is how t is named for display: name:tag for its first tag, else
// its build id.
func (t *Template) Ref() string {
	if len(t.Tags) > 0 {
		if t.Tags[0] == DefaultTag {
			return t.Name
		}
		return t.Name + ":" + t.Tags[0]
	}
	return t.ID
}

// names is the tags of one template name.
type names struct {
	Name    string            `json:"name"`
	Created time.Time         `json:"created"`
	Tags    map[string]string `json:"tags"` // tag -> build id
	// Owner is the API key the name belongs to: only it may build, tag
	// or remove it through the API. Empty: the host's operator's.
	Owner string `json:"owner,omitempty"`
	// TagsCreated is when each tag was last pointed at its build.
	TagsCreated map[string]time.Time `json:"tagsCreated,omitempty"`
}

// Store is a template directory. The zero value is not usable; use Open.
type Store struct {
	dir string
}

// ValidName reports whether name may name a template: 1-63 characters of
// [a-z0-9._-], starting with a letter or digit. Tags follow the same rule.
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

// ParseRef splits "name" or "name:tag" (the default tag when none) and
// checks both parts. A team prefix as E2B writes it ("team/name:tag") is
// not accepted: there are no teams here.
func ParseRef(ref string) (name, tag string, err error) {
	name, tag, ok := strings.Cut(ref, ":")
	if !ok {
		tag = DefaultTag
	}
	if !ValidName(name) {
		return "", "", fmt.Errorf("template name %q: 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit: %w", name, errdefs.ErrInvalidArgument)
	}
	if !ValidName(tag) {
		return "", "", fmt.Errorf("template tag %q: 1-63 characters of a-z, 0-9, '.', '_' and '-': %w", tag, errdefs.ErrInvalidArgument)
	}
	return name, tag, nil
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

func layerRoot(store, id string) string { return filepath.Join(store, "layers", id, "rootfs") }

func (s *Store) buildPath(id string) string { return filepath.Join(s.dir, "builds", id+".json") }
func (s *Store) namesPath(n string) string  { return filepath.Join(s.dir, "names", n+".json") }

// isBuildID reports whether ref has the form of a build id (a UUID).
func isBuildID(ref string) bool {
	if len(ref) != 36 {
		return false
	}
	for i := 0; i < len(ref); i++ {
		c := ref[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// Get returns the build ref names: "name" (its default tag), "name:tag",
// or a build id. An unknown one is an error wrapping errdefs.ErrNotFound,
// a malformed one errdefs.ErrInvalidArgument.
func (s *Store) Get(ref string) (*Template, error) {
	if isBuildID(ref) {
		return s.build(ref)
	}
	name, tag, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	n, err := s.readNames(name)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("template %q does not exist (see `hutch template ls`): %w", name, errdefs.ErrNotFound)
	}
	id, ok := n.Tags[tag]
	if !ok {
		return nil, fmt.Errorf("template %q has no tag %q: %w", name, tag, errdefs.ErrNotFound)
	}
	return s.buildOf(id, n)
}

// build reads one build and the tags that point at it.
func (s *Store) build(id string) (*Template, error) { return s.buildOf(id, nil) }

// buildOf is build with the tags of the build's name already read (n, or
// nil to read them), as Get and List have them.
func (s *Store) buildOf(id string, n *names) (*Template, error) {
	if !isBuildID(id) {
		return nil, fmt.Errorf("template build id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	b, err := os.ReadFile(s.buildPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("template build %s does not exist: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read template build %s: %w", id, err)
	}
	t := &Template{}
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("template build %s: %w", id, err)
	}
	t.ID, t.store = id, s.dir
	if n == nil || n.Name != t.Name {
		n, _ = s.readNames(t.Name)
	}
	if n != nil {
		for tag, bid := range n.Tags {
			if bid == id {
				t.Tags = append(t.Tags, tag)
			}
		}
		sortTags(t.Tags)
	}
	return t, nil
}

// sortTags puts "default" first, then the others by name.
func sortTags(tags []string) {
	sort.Slice(tags, func(i, j int) bool {
		if (tags[i] == DefaultTag) != (tags[j] == DefaultTag) {
			return tags[i] == DefaultTag
		}
		return tags[i] < tags[j]
	})
}

func (s *Store) readNames(name string) (*names, error) {
	if !ValidName(name) {
		// Never a path: names come from the API.
		return nil, fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	b, err := os.ReadFile(s.namesPath(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read template %q: %w", name, err)
	}
	n := &names{}
	if err := json.Unmarshal(b, n); err != nil {
		return nil, fmt.Errorf("template %q: %w", name, err)
	}
	if n.Tags == nil {
		n.Tags = map[string]string{}
	}
	return n, nil
}

// List returns every build that a tag points at, by name, default tag first.
func (s *Store) List() ([]*Template, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "names"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []*Template
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !ValidName(name) {
			continue
		}
		n, err := s.readNames(name)
		if err != nil || n == nil {
			continue
		}
		seen := map[string]bool{}
		for _, id := range n.Tags {
			if seen[id] {
				continue
			}
			seen[id] = true
			if t, err := s.buildOf(id, n); err == nil {
				out = append(out, t)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Ref() < out[j].Ref() || out[i].Ref() == out[i].Name
	})
	return out, nil
}

// Builds returns every build in the store, tagged or not.
func (s *Store) Builds() ([]*Template, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "builds"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list template builds: %w", err)
	}
	var out []*Template
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !isBuildID(id) {
			continue
		}
		if t, err := s.build(id); err == nil {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Built.Before(out[j].Built) })
	return out, nil
}

// Layer returns what the store knows of layer id.
func (s *Store) Layer(id string) (*Layer, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "layers", id, "layer.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("layer %.12s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("layer %.12s: %w", id, err)
	}
	l := &Layer{}
	if err := json.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("layer %.12s: %w", id, err)
	}
	return l, nil
}

// HasLayer reports whether layer id is in the store.
func (s *Store) HasLayer(id string) bool {
	_, err := os.Stat(filepath.Join(s.dir, "layers", id, "layer.json"))
	return err == nil
}

// newBuildID returns a random UUID (version 4), the form E2B's build ids have.
func newBuildID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// writeJSON writes v to path atomically (a reader sees the old file or
// the new one) and durably.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp-%s", path, newBuildID()[:8])
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Commit registers a new build of template name made of layers (bottom
// first, each already in the store) with cfg, and points tags at it
// ("default" when none are given). The tags' previous builds are removed
// when nothing else refers to them (see Remove).
func (s *Store) Commit(name string, tags []string, layers []string, cfg Config) (*Template, error) {
	if len(tags) == 0 {
		tags = []string{DefaultTag}
	}
	return s.CommitAs(newBuildID(), name, tags, layers, cfg)
}

// NewBuildID returns a fresh build id, for CommitAs.
func NewBuildID() string { return newBuildID() }

// CommitAs is Commit with the build's id given (the E2B API hands it out
// before the build runs) and no default tag: a build without tags is in
// the store (Get by its id finds it, List does not show it) until Remove
// removes it. A stack deeper than MaxStack has its top layers squashed
// into one (see flatten).
func (s *Store) CommitAs(id, name string, tags []string, layers []string, cfg Config) (*Template, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if !isBuildID(id) {
		return nil, fmt.Errorf("template build id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	if Reserved(name) && (cfg.Snapshot == nil || cfg.Snapshot.Kind != SnapshotPause) {
		return nil, errReserved(name)
	}
	if _, err := os.Stat(s.buildPath(id)); err == nil {
		return nil, fmt.Errorf("template build %s: %w", id, errdefs.ErrAlreadyExists)
	}
	for _, tag := range tags {
		if !ValidName(tag) {
			return nil, fmt.Errorf("template tag %q: %w", tag, errdefs.ErrInvalidArgument)
		}
	}
	for _, l := range layers {
		if !s.HasLayer(l) {
			return nil, fmt.Errorf("template %s: layer %.12s is not in the store: %w", name, l, errdefs.ErrNotFound)
		}
	}
	if len(layers) > MaxStack {
		lease, err := s.NewLease()
		if err != nil {
			return nil, err
		}
		defer lease.Release()
		if layers, err = s.flatten(lease, layers); err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if len(tags) > 0 {
		if err := s.mayChange(name, cfg.Owner); err != nil {
			return nil, err
		}
	}
	cfg.Name = name
	if cfg.Built.IsZero() {
		cfg.Built = time.Now().UTC()
	}
	t := &Template{Config: cfg, ID: id, Layers: slices.Clone(layers), store: s.dir}
	if err := writeJSON(s.buildPath(t.ID), t); err != nil {
		return nil, err
	}
	if len(tags) == 0 {
		return t, nil
	}
	replaced, err := s.setTags(name, t.ID, tags, &cfg.Owner)
	if err != nil {
		os.Remove(s.buildPath(t.ID))
		return nil, err
	}
	t.Tags = slices.Clone(tags)
	sortTags(t.Tags)
	s.collectLocked(replaced)
	return t, nil
}

// setTags points name's tags at build id and returns the builds they
// pointed at before. A new name belongs to the build's owner; owner, when
// not nil, makes it that one's whatever it was (a commit: the committer
// may, or mayChange would have refused). The store's lock must be held.
// MaxTags is how many tags one template name may have: its names file is
// read and written whole, under the store's lock, at every change (13
// requests of 80,000 tags made it 110 MB and held every tenant's builds
// for a minute, review 27 round 2, G5).
const MaxTags = 256

func (s *Store) setTags(name, id string, tags []string, owner *string) (replaced []string, err error) {
	n, err := s.readNames(name)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	if n == nil {
		n = &names{Name: name, Created: now, Tags: map[string]string{}}
		if b, _ := s.build(id); b != nil {
			n.Owner = b.Owner
		}
	}
	if owner != nil {
		n.Owner = *owner
	}
	if n.TagsCreated == nil {
		n.TagsCreated = map[string]time.Time{}
	}
	added := 0
	for _, tag := range slices.Compact(slices.Sorted(slices.Values(tags))) {
		if _, ok := n.Tags[tag]; !ok {
			added++
		}
	}
	if len(n.Tags)+added > MaxTags {
		return nil, fmt.Errorf("template %s would have %d tags, past the %d a name may have; remove some first: %w", name, len(n.Tags)+added, MaxTags, errdefs.ErrResourceExhausted)
	}
	for _, tag := range tags {
		if old, ok := n.Tags[tag]; ok && old != id {
			replaced = append(replaced, old)
		}
		n.Tags[tag] = id
		n.TagsCreated[tag] = now
	}
	return replaced, writeJSON(s.namesPath(name), n)
}

// Tag points tags of ref's template name at the build ref names, as
// `docker tag` does, and returns that build.
func (s *Store) Tag(ref string, tags ...string) (*Template, error) { return s.TagAs("", ref, tags...) }

// TagAs is Tag by API key by (empty: the host's operator), which must own
// the name (errdefs.ErrPermissionDenied).
func (s *Store) TagAs(by, ref string, tags ...string) (*Template, error) {
	t, err := s.Get(ref)
	if err != nil {
		return nil, err
	}
	if Reserved(t.Name) {
		return nil, errReserved(t.Name)
	}
	for _, tag := range tags {
		if !ValidName(tag) {
			return nil, fmt.Errorf("template tag %q: %w", tag, errdefs.ErrInvalidArgument)
		}
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.mayChange(t.Name, by); err != nil {
		return nil, err
	}
	if by != "" && t.Owner != by {
		// Not even to bring back a name its owner removed.
		return nil, fmt.Errorf("template build %s belongs to another API key: %w", t.ID, errdefs.ErrPermissionDenied)
	}
	replaced, err := s.setTags(t.Name, t.ID, tags, nil)
	if err != nil {
		return nil, err
	}
	s.collectLocked(replaced)
	return s.build(t.ID)
}

// TagInfo is one tag of a template name.
type TagInfo struct {
	Tag     string
	BuildID string
	Created time.Time
}

// Tags lists the tags of template name.
func (s *Store) Tags(name string) ([]TagInfo, error) {
	n, err := s.readNames(name)
	if err != nil {
		return nil, err
	}
	if n == nil {
		return nil, fmt.Errorf("template %q does not exist: %w", name, errdefs.ErrNotFound)
	}
	var out []TagInfo
	for tag, id := range n.Tags {
		out = append(out, TagInfo{Tag: tag, BuildID: id, Created: n.TagsCreated[tag]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out, nil
}

// Untag removes tags from template name; its builds no tag points at any
// more are removed when nothing uses them. Removing the last tag removes
// the name.
func (s *Store) Untag(name string, tags ...string) error { return s.UntagAs("", name, tags...) }

// UntagAs is Untag by API key by (empty: the host's operator), which must
// own the name (errdefs.ErrPermissionDenied).
func (s *Store) UntagAs(by, name string, tags ...string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.mayChange(name, by); err != nil {
		return err
	}
	n, err := s.readNames(name)
	if err != nil {
		return err
	}
	if n == nil {
		return fmt.Errorf("template %q does not exist: %w", name, errdefs.ErrNotFound)
	}
	var dropped []string
	for _, tag := range tags {
		id, ok := n.Tags[tag]
		if !ok {
			return fmt.Errorf("template %q has no tag %q: %w", name, tag, errdefs.ErrNotFound)
		}
		delete(n.Tags, tag)
		delete(n.TagsCreated, tag)
		dropped = append(dropped, id)
	}
	if len(n.Tags) == 0 {
		err = os.Remove(s.namesPath(name))
	} else {
		err = writeJSON(s.namesPath(name), n)
	}
	if err != nil {
		return fmt.Errorf("untag %s: %w", name, err)
	}
	s.collectLocked(dropped)
	return nil
}

// emptyLayerID is the id of the layer with no files: the SHA-256 of an
// empty tar archive (two 512-byte zero blocks... as OCI writes it, 1024).
const emptyLayerID = "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"

// Scratch registers template name (its default tag) as one empty layer
// with cfg: Dockerfile's `FROM scratch`, and a template that is found but
// runs nothing, for tests.
func (s *Store) Scratch(name string, cfg Config) (*Template, error) {
	lease, err := s.NewLease()
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	l, err := s.AddLayer(lease, "scratch", func(string) (string, error) { return emptyLayerID, nil })
	if err != nil {
		return nil, err
	}
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "root"
	}
	if cfg.DefaultWorkdir == "" {
		cfg.DefaultWorkdir = "/"
	}
	return s.Commit(name, nil, []string{l.ID}, cfg)
}

// mayChange checks that API key by may change template name: its owner
// may, the host's operator (by empty) may change any, and a name nobody
// has yet is anyone's to take. The store's lock must be held.
func (s *Store) mayChange(name, by string) error {
	if by == "" {
		return nil
	}
	n, err := s.readNames(name)
	if err != nil {
		return err
	}
	if n != nil && n.Owner != by {
		return fmt.Errorf("template %s belongs to another API key (or to the server's operator); build yours under another name: %w", name, errdefs.ErrPermissionDenied)
	}
	return nil
}

// MayChange reports, as an error wrapping errdefs.ErrPermissionDenied,
// whether API key by may build, tag or remove template name (see
// mayChange).
func (s *Store) MayChange(name, by string) error {
	if !ValidName(name) {
		return fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	return s.mayChange(name, by)
}

// MayUse reports, as an error wrapping errdefs.ErrPermissionDenied,
// whether API key by may make sandboxes of t: a key's templates are its
// own (as an E2B team's are), the operator's (no owner) everyone's.
func (t *Template) MayUse(by string) error {
	if t.Owner == "" || by == "" || t.Owner == by {
		return nil
	}
	return fmt.Errorf("template %s belongs to another API key: %w", t.Name, errdefs.ErrPermissionDenied)
}

// NameOwner returns the API key template name belongs to ("" for the
// host's operator), or an error wrapping errdefs.ErrNotFound.
func (s *Store) NameOwner(name string) (string, error) {
	n, err := s.readNames(name)
	if err != nil {
		return "", err
	}
	if n == nil {
		return "", fmt.Errorf("template %q does not exist: %w", name, errdefs.ErrNotFound)
	}
	return n.Owner, nil
}
