package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// cacheGrace is how long a layer only the build cache refers to is kept:
// a build that failed at step 5 reruns none of steps 1-4 when fixed
// within it.
const cacheGrace = 24 * time.Hour

// lock takes the store's write lock, creating the store's directories on
// first use.
func (s *Store) lock() (func(), error) {
	if err := s.init(); err != nil {
		return nil, err
	}
	return lockFile(context.Background(), filepath.Join(s.dir, ".lock"))
}

// init makes the store's directories. layers/ is 0700: an image's files
// keep their setuid bits and owners, and no host user may run them.
func (s *Store) init() error {
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"", 0o755}, {"layers", 0o700}, {"builds", 0o755}, {"names", 0o755}, {"cache", 0o700}, {"files", 0o700}, {"leases", 0o700}} {
		p := filepath.Join(s.dir, d.name)
		if err := os.MkdirAll(p, d.mode); err != nil {
			return fmt.Errorf("template store: %w", err)
		}
		if d.name != "" {
			if err := os.Chmod(p, d.mode); err != nil {
				return fmt.Errorf("template store: %w", err)
			}
		}
	}
	return nil
}

// Lease keeps the layers added under it from being collected until it is
// released or its process exits: an unfinished build's layers are in no
// build yet. A lease is a file its holder keeps locked.
type Lease struct {
	s    *Store
	f    *os.File
	ids  []string
	path string
}

// NewLease starts a lease.
func (s *Store) NewLease() (*Lease, error) {
	if err := s.init(); err != nil {
		return nil, err
	}
	path := filepath.Join(s.dir, "leases", newBuildID()+".json")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("template lease: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("template lease: %w", err)
	}
	return &Lease{s: s, f: f, path: path}, nil
}

// Add records layer ids as held by the lease.
func (l *Lease) Add(ids ...string) error {
	l.ids = append(l.ids, ids...)
	b, _ := json.Marshal(l.ids)
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt(b, 0)
	return err
}

// Release ends the lease.
func (l *Lease) Release() {
	if l == nil || l.f == nil {
		return
	}
	os.Remove(l.path)
	l.f.Close()
	l.f = nil
}

// AddLayer adds a layer to the store: fill writes its files into an empty
// directory and returns the layer's id (see the package doc). When the
// store has a layer of that id already, the new files are discarded and
// that one is kept. The layer is added to lease, so that it is not
// collected before a build refers to it.
func (s *Store) AddLayer(lease *Lease, source string, fill func(rootfs string) (id string, err error)) (*Layer, error) {
	return s.addLayer(lease, source, false, fill)
}

// addLayer is AddLayer; content says whether the id fill returns is the
// SHA-256 of the layer's tar (Layer.Content).
func (s *Store) addLayer(lease *Lease, source string, content bool, fill func(rootfs string) (id string, err error)) (*Layer, error) {
	if err := s.init(); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "layers"), ".new-")
	if err != nil {
		return nil, fmt.Errorf("new layer: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing once renamed
	root := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, fmt.Errorf("new layer: %w", err)
	}
	id, err := fill(root)
	if err != nil {
		return nil, err
	}
	if !validLayerID(id) {
		return nil, fmt.Errorf("new layer: bad id %q", id)
	}
	size, err := diskUsage(root)
	if err != nil {
		return nil, fmt.Errorf("new layer: %w", err)
	}
	l := &Layer{ID: id, Size: size, Created: time.Now().UTC(), Source: source, Content: content}
	b, _ := json.MarshalIndent(l, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "layer.json"), append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("new layer: %w", err)
	}
	if err := syncTree(tmp); err != nil {
		return nil, fmt.Errorf("new layer: %w", err)
	}
	// Leased and in place under the store's lock: a collection reads the
	// leases and then deletes what none holds, so a lease taken or a
	// layer renamed in between would lose a layer still being added (or
	// one found already there, with the same content).
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := lease.Add(id); err != nil {
		return nil, fmt.Errorf("new layer: %w", err)
	}
	if s.HasLayer(id) {
		return s.Layer(id)
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "layers", id)); err != nil {
		if s.HasLayer(id) { // another process added it meanwhile
			return s.Layer(id)
		}
		return nil, fmt.Errorf("new layer: %w", err)
	}
	return l, nil
}

// ValidHash reports whether s is a SHA-256 as the store writes one: 64
// lowercase hex digits (a layer id, a cache key, an upload's hash).
func ValidHash(s string) bool { return validLayerID(s) }

func validLayerID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// syncTree flushes a new layer to disk before it is named: the file
// system the store is on is synced once (syncfs), not file by file.
func syncTree(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// diskUsage is the space the files under root take, each inode once.
func diskUsage(root string) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !d.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

// InUseError is Remove's error for a template that sandboxes use.
type InUseError struct {
	Ref       string
	Sandboxes []string
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("template %s is in use by %d sandbox(es) (%s): kill them first", e.Ref, len(e.Sandboxes), strings.Join(e.Sandboxes, ", "))
}

// Is makes an InUseError match errdefs.ErrFailedPrecondition.
func (e *InUseError) Is(target error) bool { return target == errdefs.ErrFailedPrecondition }

// Remove removes what ref names: a template name with every tag and
// build ("name"), one tag ("name:tag"), or one build (its id; the tags
// pointing at it go with it). usedBy lists the sandboxes running a
// build; a build that some sandbox uses is not removed (an *InUseError).
// Layers no remaining build refers to are deleted, unless some mount
// table still names them (then a later collection deletes them).
func (s *Store) Remove(ref string, usedBy func(buildID string) []string) error {
	return s.RemoveAs("", ref, usedBy)
}

// RemoveAs is Remove by API key by (empty: the host's operator), which
// must own the template (errdefs.ErrPermissionDenied).
func (s *Store) RemoveAs(by, ref string, usedBy func(buildID string) []string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	var name string
	var tags, builds []string
	if isBuildID(ref) {
		t, err := s.build(ref)
		if err != nil {
			return err
		}
		name, tags, builds = t.Name, t.Tags, []string{t.ID}
	} else {
		var tag string
		if name, tag, err = ParseRef(ref); err != nil {
			return err
		}
		n, err := s.readNames(name)
		if err != nil {
			return err
		}
		if n == nil {
			return fmt.Errorf("template %q does not exist: %w", name, errdefs.ErrNotFound)
		}
		if strings.Contains(ref, ":") {
			id, ok := n.Tags[tag]
			if !ok {
				return fmt.Errorf("template %q has no tag %q: %w", name, tag, errdefs.ErrNotFound)
			}
			tags, builds = []string{tag}, []string{id}
		} else {
			for tag, id := range n.Tags {
				tags = append(tags, tag)
				builds = append(builds, id)
			}
			// and its untagged builds: the remover's own (a name that
			// changed hands may have an earlier key's build still in use,
			// which is not this key's to remove, nor to see the users of)
			all, _ := s.Builds()
			for _, b := range all {
				if b.Name == name && (by == "" || b.Owner == by) {
					builds = append(builds, b.ID)
				}
			}
		}
	}
	if err := s.mayChange(name, by); err != nil {
		return err
	}
	if isBuildID(ref) && by != "" {
		if t, err := s.build(ref); err == nil && t.Owner != by {
			return fmt.Errorf("template build %s belongs to another API key: %w", ref, errdefs.ErrPermissionDenied)
		}
	}
	if usedBy != nil {
		var users []string
		for _, id := range uniq(builds) {
			users = append(users, usedBy(id)...)
		}
		if len(users) > 0 {
			return &InUseError{Ref: ref, Sandboxes: uniq(users)}
		}
	}
	if n, err := s.readNames(name); err == nil && n != nil {
		for _, tag := range tags {
			delete(n.Tags, tag)
			delete(n.TagsCreated, tag)
		}
		// A build removed by id takes every tag that points at it.
		for tag, id := range n.Tags {
			for _, b := range builds {
				if id == b {
					delete(n.Tags, tag)
				}
			}
		}
		if len(n.Tags) == 0 {
			err = os.Remove(s.namesPath(name))
		} else {
			err = writeJSON(s.namesPath(name), n)
		}
		if err != nil {
			return fmt.Errorf("remove %s: %w", ref, err)
		}
	}
	// A build a sandbox has mounted stays, untagged, until it is gone.
	s.collectLocked(uniq(builds))
	return nil
}

func uniq(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Collect deletes the builds no tag points at among candidates, and then
// every layer nothing refers to; it returns the bytes freed.
func (s *Store) Collect() (int64, error) {
	unlock, err := s.lock()
	if err != nil {
		return 0, err
	}
	defer unlock()
	return s.collectLocked(nil), nil
}

// collectLocked deletes the builds among candidates, and any other, that
// no tag points at any more and no mount table names (MountSource), then
// every layer that no build, live lease or recent cache entry refers to
// and no mount table names. The lock must be held. It returns the bytes
// freed. Errors are not fatal: what is left is collected next time.
func (s *Store) collectLocked(candidates []string) int64 {
	tagged := map[string]bool{}
	if ents, err := os.ReadDir(filepath.Join(s.dir, "names")); err == nil {
		for _, e := range ents {
			if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
				if n, err := s.readNames(name); err == nil && n != nil {
					for _, id := range n.Tags {
						tagged[id] = true
					}
				}
			}
		}
	}
	var mounted map[string]bool
	dropped := map[string]bool{}
	for _, id := range candidates {
		dropped[id] = true
	}
	all, _ := s.Builds()
	for _, b := range all {
		candidates = append(candidates, b.ID)
	}
	for _, id := range uniq(candidates) {
		if tagged[id] {
			continue
		}
		// An untagged build made within the hour that no removal dropped
		// (here or earlier: its .dropped mark) is one still being used to
		// make something (a build step's sandbox, a build in progress,
		// CommitAs's caller): the mount that would protect it may not be
		// there yet.
		mark := strings.TrimSuffix(s.buildPath(id), ".json") + ".dropped"
		if _, err := os.Stat(mark); err == nil {
			dropped[id] = true
		}
		if fi, err := os.Stat(s.buildPath(id)); !dropped[id] && err == nil && time.Since(fi.ModTime()) < time.Hour {
			continue
		}
		if mounted == nil {
			mounted = mountedPaths()
		}
		if mounted[MountSource(id)] {
			if dropped[id] {
				os.WriteFile(mark, nil, 0o644) // collected once unmounted
			}
			continue
		}
		os.Remove(s.buildPath(id))
		os.Remove(mark)
	}
	used := map[string]bool{}
	builds, _ := s.Builds()
	for _, b := range builds {
		for _, l := range b.Layers {
			used[l] = true
		}
	}
	leases, _ := filepath.Glob(filepath.Join(s.dir, "leases", "*.json"))
	for _, p := range leases {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.Remove(p) // its holder is gone
			f.Close()
			continue
		}
		var ids []string
		b, _ := os.ReadFile(p)
		json.Unmarshal(b, &ids)
		for _, id := range ids {
			used[id] = true
		}
		f.Close()
	}
	if ents, err := os.ReadDir(filepath.Join(s.dir, "cache")); err == nil {
		for _, e := range ents {
			fi, err := e.Info()
			if err != nil {
				continue
			}
			b, _ := os.ReadFile(filepath.Join(s.dir, "cache", e.Name()))
			id := strings.TrimSpace(string(b))
			if time.Since(fi.ModTime()) < cacheGrace {
				used[id] = true
			} else if !used[id] {
				os.Remove(filepath.Join(s.dir, "cache", e.Name()))
			}
		}
	}
	// Uploads not used for cacheGrace (a COPY step touches its archive).
	uploads, _ := filepath.Glob(filepath.Join(s.dir, "files", "*", "*"))
	for _, p := range uploads {
		if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > cacheGrace {
			os.Remove(p)
		}
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "layers"))
	if err != nil {
		return 0
	}
	var freed int64
	for _, e := range ents {
		id := e.Name()
		dir := filepath.Join(s.dir, "layers", id)
		if strings.HasPrefix(id, ".new-") {
			// An interrupted AddLayer's; a live one is recent.
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.RemoveAll(dir)
			}
			continue
		}
		if used[id] || !validLayerID(id) {
			continue
		}
		if mounted == nil {
			mounted = mountedPaths()
		}
		if isMounted(mounted, id) {
			continue
		}
		if l, err := s.Layer(id); err == nil {
			freed += l.Size
		}
		// Rename first: a half-deleted layer never looks whole.
		gone := filepath.Join(s.dir, "layers", ".new-gone-"+id)
		if os.Rename(dir, gone) == nil {
			os.RemoveAll(gone)
		}
	}
	return freed
}

// isMounted reports whether any mount root or mount point in mounted
// lies in the layer with that id. Matched by the id, not the whole path:
// a mount root is relative to its file system's root, which need not be /.
func isMounted(mounted map[string]bool, id string) bool {
	mark := "/" + id + "/"
	for p := range mounted {
		if strings.Contains(p+"/", mark) {
			return true
		}
	}
	return false
}

// MountSource is the source a sandbox's root is mounted with: a mount
// table that names it keeps that build (and so its layers) from being
// collected. A sandbox's own mount table names no layer directory: the
// layers are mounted before its root is, and detached with the host's
// tree.
func MountSource(buildID string) string { return "hutch-template:" + buildID }

// mountedPaths collects the paths every process's mount table names, as
// mount roots and mount points (/proc/*/mountinfo fields 4 and 5), and
// the mounts' sources, so that mounts inside sandboxes' own mount
// namespaces count too.
func mountedPaths() map[string]bool {
	seen := map[string]bool{}
	infos, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	tables := map[string]bool{} // by mount namespace, read each once
	for _, info := range infos {
		ns, err := os.Readlink(filepath.Join(filepath.Dir(info), "ns", "mnt"))
		if err != nil || tables[ns] {
			continue
		}
		tables[ns] = true
		b, err := os.ReadFile(info)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 {
				seen[f[3]], seen[f[4]] = true, true
			}
			// After the optional fields: " - fstype source options".
			if i := slices.Index(f, "-"); i > 4 && i+2 < len(f) {
				seen[f[i+2]] = true
			}
		}
	}
	return seen
}

// Usage is what a template's builds take on disk.
type Usage struct {
	// Own is the size of the layers only this template name's builds use.
	Own int64
	// Shared is the size of its layers other templates use too.
	Shared int64
}

// Usage returns the disk use of every template name in the store.
func (s *Store) Usage() (map[string]Usage, error) {
	builds, err := s.Builds()
	if err != nil {
		return nil, err
	}
	users := map[string]map[string]bool{} // layer -> names
	for _, b := range builds {
		for _, l := range b.Layers {
			if users[l] == nil {
				users[l] = map[string]bool{}
			}
			users[l][b.Name] = true
		}
	}
	out := map[string]Usage{}
	for id, names := range users {
		l, err := s.Layer(id)
		if err != nil {
			continue
		}
		for n := range names {
			u := out[n]
			if len(names) == 1 {
				u.Own += l.Size
			} else {
				u.Shared += l.Size
			}
			out[n] = u
		}
	}
	return out, nil
}

// CacheGet returns the layer the build cache holds for key, if it is
// still in the store.
func (s *Store) CacheGet(key string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, "cache", key))
	if err != nil {
		return "", false
	}
	id := strings.TrimSpace(string(b))
	if !validLayerID(id) || !s.HasLayer(id) {
		return "", false
	}
	now := time.Now()
	os.Chtimes(filepath.Join(s.dir, "cache", key), now, now)
	return id, true
}

// CachePut records that the step with key made layer id.
func (s *Store) CachePut(key, id string) error {
	if !validLayerID(key) {
		return fmt.Errorf("cache key %q: %w", key, errdefs.ErrInvalidArgument)
	}
	if err := s.init(); err != nil {
		return err
	}
	p := filepath.Join(s.dir, "cache", key)
	tmp := p + ".tmp-" + newBuildID()[:8]
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// cacheDrop removes the cache entry key if it still names layer id.
func (s *Store) cacheDrop(key, id string) {
	p := filepath.Join(s.dir, "cache", key)
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == id {
		os.Remove(p)
	}
}

// AddLayerFromTar adds the layer an uncompressed OCI layer tar captured of
// a sandbox holds (see unpack for what is refused; a symlink may point
// anywhere); its id is the tar's diff id.
func (s *Store) AddLayerFromTar(ctx context.Context, lease *Lease, source string, r io.Reader) (*Layer, error) {
	return s.addLayer(lease, source, true, func(root string) (string, error) {
		return unpack(ctx, root, r, unpackOptions{anySymlink: true, room: func(int64) error { return room(root) }})
	})
}

// AddLayerOver adds a layer made by fn changing an overlay of the layers
// below (ids, bottom first): fn gets the merged directory, in a mount
// namespace of its own; what it changed becomes the layer, whose id is id
// (the hash of the inputs that made it).
func (s *Store) AddLayerOver(lease *Lease, source, id string, below []string, fn func(merged string) error) (*Layer, error) {
	dirs := make([]string, len(below))
	for i, l := range below {
		dirs[i] = layerRoot(s.dir, l)
	}
	return s.AddLayer(lease, source, func(root string) (string, error) {
		if err := withOverlay(dirs, root, fn); err != nil {
			return "", err
		}
		return id, nil
	})
}

// FilePath is where the archive API key owner uploaded for COPY steps
// under hash is kept: each key's uploads apart, so that no key can put
// files into another's build.
func (s *Store) FilePath(owner, hash string) string {
	dir := "operator"
	if owner != "" {
		sum := sha256.Sum256([]byte(owner))
		dir = "k-" + hex.EncodeToString(sum[:12])
	}
	return filepath.Join(s.dir, "files", dir, hash)
}

// CheckRoom reports, as an error wrapping errdefs.ErrResourceExhausted,
// whether the template store's file system is down to its last 256 MiB or
// its last inodes (see room): imports, uploads, builds and captures stop
// there rather than fill the disk.
func (s *Store) CheckRoom() error {
	if err := s.init(); err != nil {
		return err
	}
	return room(s.dir)
}
