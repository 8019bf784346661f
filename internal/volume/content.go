package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Content is the files of one volume, as the host-side content API reads
// and writes them. Every path is resolved inside the volume's directory
// through an os.Root: no symlink, whatever a sandbox planted, and no ".."
// leads outside it (the kernel is asked with openat per component, so a
// symlink swapped in mid-walk does not either). Paths are the volume's
// own: "/" is its root.
//
// Safe for concurrent use; Close releases it.
type Content struct {
	root  *os.Root
	lists chan struct{} // the manager's bound on listings at once; nil: none
	keyID string        // the API key that owns the volume
}

// KeyID is the id of the API key that owns the volume ("" for none).
func (c *Content) KeyID() string { return c.keyID }

// Close releases the volume's directory.
func (c *Content) Close() error { return c.root.Close() }

// EntryType is what kind of file an Entry is.
type EntryType string

// The entry types (E2B's words).
const (
	TypeFile      EntryType = "file"
	TypeDirectory EntryType = "directory"
	TypeSymlink   EntryType = "symlink"
	TypeUnknown   EntryType = "unknown"
)

// Entry describes one file of a volume. Symlinks are described, never
// followed.
type Entry struct {
	Name string
	// Path is the entry's path in the volume, starting with "/".
	Path string
	Type EntryType
	Size int64
	// Mode is the permission bits, setuid, setgid and sticky included
	// (st_mode & 07777).
	Mode uint32
	// UID and GID are as every sandbox that mounts the volume sees them.
	UID, GID            uint32
	Atime, Mtime, Ctime time.Time
	// Target is a symlink's target, as written.
	Target string
}

// Owner is the uid, gid and mode a write gives the file or directory it
// makes, or an update sets; nil fields are left as they are (a new file
// gets 0, 0 and 0644, a new directory 0755).
type Owner struct {
	UID, GID *uint32
	Mode     *uint32
}

// ids are o's uid and gid as chown takes them: -1 for one not given.
func (o Owner) ids() (uid, gid int) {
	uid, gid = -1, -1
	if o.UID != nil {
		uid = int(*o.UID)
	}
	if o.GID != nil {
		gid = int(*o.GID)
	}
	return uid, gid
}

// MaxID is the highest uid or gid a volume's files may be given: ids
// above the sandboxes' user namespaces would show as nobody in every one.
const MaxID = 65535

// ErrEscapes is the error for a path that leads out of the volume: a ".."
// component, or a symlink whose target is outside. It matches
// errdefs.ErrInvalidArgument.
var ErrEscapes = fmt.Errorf("path leads outside the volume: %w", errdefs.ErrInvalidArgument)

// clean turns an API path into a name relative to the volume's root ("."
// for the root itself). Any ".." component is refused, even one that
// would stay inside: a client writing it means something else than it
// asked for.
func clean(p string) (string, error) {
	if len(p) > MaxPath {
		return "", fmt.Errorf("path of %d bytes: at most %d: %w", len(p), MaxPath, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q: %w", p, errdefs.ErrInvalidArgument)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("path %q: %w", p, ErrEscapes)
		}
	}
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return ".", nil
	}
	return rel, nil
}

// The bounds of a path and of a listing of the content API: PATH_MAX, and
// what one answer may hold (E2B's SDKs list with depth 1 by default).
const (
	MaxPath          = 4096
	MaxListDepth     = 32
	MaxListEntries   = 10000
	maxListPathBytes = 4 << 20
	// maxListsAtOnce bounds the listings a server answers at once: with
	// JSON's escapes, one may take some 30 MiB to answer.
	maxListsAtOnce = 4
)

// apiPath is the volume path of rel.
func apiPath(rel string) string {
	if rel == "." {
		return "/"
	}
	return "/" + rel
}

// wrap maps an os error on p to errdefs classes.
func wrap(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var pe *os.PathError
	// os.Root's error for a name that leads out of the root is not
	// exported (os.errPathEscapes): matched by its text, as no other
	// package offers it.
	if errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent" {
		return fmt.Errorf("%s %s: %w", op, p, ErrEscapes)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: path not found: %w", op, p, errdefs.ErrNotFound)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s %s: path exists already: %w", op, p, errdefs.ErrAlreadyExists)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s %s: not a directory: %w", op, p, errdefs.ErrInvalidArgument)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%s %s: is a directory: %w", op, p, errdefs.ErrInvalidArgument)
	case errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%s %s: directory not empty: %w", op, p, errdefs.ErrFailedPrecondition)
	case errors.Is(err, syscall.ENXIO), errors.Is(err, syscall.ENODEV):
		// A FIFO without a reader, a socket or a device node: a sandbox
		// may make the first two in its volume.
		return fmt.Errorf("%s %s: not a regular file: %w", op, p, errdefs.ErrInvalidArgument)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s %s: too many symlinks: %w", op, p, errdefs.ErrInvalidArgument)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%s %s: no space left: %w", op, p, errdefs.ErrResourceExhausted)
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

func checkOwner(o Owner) error {
	if o.UID != nil && *o.UID > MaxID || o.GID != nil && *o.GID > MaxID {
		return fmt.Errorf("uid and gid must be 0 to %d: %w", MaxID, errdefs.ErrInvalidArgument)
	}
	if o.Mode != nil && *o.Mode&^0o7777 != 0 {
		return fmt.Errorf("mode %#o: only permission bits (07777) may be set: %w", *o.Mode, errdefs.ErrInvalidArgument)
	}
	return nil
}

// entry describes rel without following it when it is a symlink.
func (c *Content) entry(rel string) (Entry, error) {
	fi, err := c.root.Lstat(rel)
	if err != nil {
		return Entry{}, wrap("stat", apiPath(rel), err)
	}
	e := fromInfo(rel, fi)
	if e.Type == TypeSymlink {
		e.Target, _ = c.root.Readlink(rel)
	}
	return e, nil
}

func fromInfo(rel string, fi fs.FileInfo) Entry {
	e := Entry{Name: fi.Name(), Path: apiPath(rel), Size: fi.Size(), Type: TypeUnknown, Mtime: fi.ModTime().UTC()}
	if rel == "." {
		e.Name = "/"
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = TypeFile
	case fi.IsDir():
		e.Type = TypeDirectory
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = TypeSymlink
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Mode = st.Mode & 0o7777
		e.UID, e.GID = st.Uid, st.Gid
		e.Atime = time.Unix(st.Atim.Unix()).UTC()
		e.Ctime = time.Unix(st.Ctim.Unix()).UTC()
	}
	return e
}

// openDir opens directory rel to read it. A sandbox may have swapped it
// for a FIFO or a symlink since it was seen to be a directory (review 19:
// a listing waited forever on a FIFO, holding its slot): the open never
// waits and never follows, and fails for anything but a directory.
func (c *Content) openDir(rel string) (*os.File, error) {
	return c.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// Stat describes the entry at p (a symlink itself, not its target).
func (c *Content) Stat(p string) (Entry, error) {
	rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	return c.entry(rel)
}

// List describes the entries of the directory p and, to depth levels
// (1: its own entries only; less than 1 counts as 1), of its
// subdirectories. Symlinks are listed, never entered. It waits for its
// turn among the listings of the server (see maxListsAtOnce) until ctx
// ends.
func (c *Content) List(ctx context.Context, p string, depth int) ([]Entry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, err
	}
	if depth > MaxListDepth {
		return nil, fmt.Errorf("depth %d: at most %d: %w", depth, MaxListDepth, errdefs.ErrInvalidArgument)
	}
	depth = max(depth, 1)
	if c.lists != nil {
		select {
		case c.lists <- struct{}{}:
			defer func() { <-c.lists }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := []Entry{}
	// A sandbox makes the tree: what one listing holds is bounded, in
	// entries and in the bytes of their paths and symlink targets (paths
	// grow with the depth; JSON may write a byte as six).
	var pathBytes int
	tooMany := fmt.Errorf("list %s: more than %d entries or %d MiB of paths: list a directory further down, or with a lower depth: %w",
		apiPath(rel), MaxListEntries, maxListPathBytes>>20, errdefs.ErrInvalidArgument)
	var walk func(rel string, level int) error
	walk = func(rel string, level int) error {
		d, err := c.openDir(rel)
		if err != nil {
			return wrap("list", apiPath(rel), err)
		}
		defer d.Close()
		for {
			fis, err := d.Readdir(256)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return wrap("list", apiPath(rel), err)
			}
			for _, fi := range fis {
				child := path.Join(rel, fi.Name())
				if pathBytes += len(child); len(out) >= MaxListEntries || pathBytes > maxListPathBytes {
					return tooMany
				}
				e := fromInfo(child, fi)
				if e.Type == TypeSymlink {
					e.Target, _ = c.root.Readlink(child)
					if pathBytes += len(e.Target); pathBytes > maxListPathBytes {
						return tooMany
					}
				}
				out = append(out, e)
				if e.Type == TypeDirectory && level < depth {
					if err := walk(child, level+1); err != nil {
						return err
					}
				}
			}
		}
	}
	// The directory itself must be one: Open of a file would succeed.
	if e, err := c.entry(rel); err != nil {
		return nil, err
	} else if e.Type != TypeDirectory {
		return nil, fmt.Errorf("list %s: not a directory: %w", apiPath(rel), errdefs.ErrInvalidArgument)
	}
	if err := walk(rel, 1); err != nil {
		return nil, err
	}
	return out, nil
}

// MakeDir creates the directory p with o's owner and mode. Without
// parents, p's parent must exist and p must not (errdefs.ErrAlreadyExists);
// with parents, missing parents are made too, with the same owner and
// mode, and an existing directory is fine.
func (c *Content) MakeDir(p string, o Owner, parents bool) (Entry, error) {
	rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if err := checkOwner(o); err != nil {
		return Entry{}, err
	}
	if rel == "." {
		if parents {
			return c.entry(rel)
		}
		return Entry{}, fmt.Errorf("make directory /: %w", errdefs.ErrAlreadyExists)
	}
	if parents {
		if err := c.mkdirAll(path.Dir(rel), o); err != nil {
			return Entry{}, err
		}
	}
	err = c.root.Mkdir(rel, 0o755)
	if parents && errors.Is(err, fs.ErrExist) {
		if e, err := c.entry(rel); err != nil || e.Type == TypeDirectory {
			return e, err
		}
		return Entry{}, wrap("make directory", apiPath(rel), fs.ErrExist)
	}
	if err != nil {
		return Entry{}, wrap("make directory", apiPath(rel), err)
	}
	if err := c.apply(rel, o, 0o755); err != nil {
		return Entry{}, err
	}
	return c.entry(rel)
}

// mkdirAll makes rel and its missing parents, each with o.
func (c *Content) mkdirAll(rel string, o Owner) error {
	if rel == "." {
		return nil
	}
	fi, err := c.root.Stat(rel)
	if err == nil {
		if !fi.IsDir() {
			return wrap("make directory", apiPath(rel), syscall.ENOTDIR)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return wrap("make directory", apiPath(rel), err)
	}
	if err := c.mkdirAll(path.Dir(rel), o); err != nil {
		return err
	}
	if err := c.root.Mkdir(rel, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return wrap("make directory", apiPath(rel), err)
	}
	return c.apply(rel, o, 0o755)
}

// apply sets o on rel, which this call just made; mode is the default
// when o has none.
func (c *Content) apply(rel string, o Owner, mode uint32) error {
	if o.Mode != nil {
		mode = *o.Mode
	}
	uid, gid := o.ids()
	// Lchown: rel may have been replaced by a symlink meanwhile (by a
	// sandbox); the link is changed then, never its target.
	if uid >= 0 || gid >= 0 {
		if err := c.root.Lchown(rel, uid, gid); err != nil {
			return wrap("chown", apiPath(rel), err)
		}
	}
	if err := c.chmod(rel, mode); err != nil {
		return err
	}
	return nil
}

// chmod sets mode on rel through a descriptor of rel itself: os.Root's
// Chmod would follow a symlink (inside the volume), and the mode bits
// are given in the Unix sense, setuid and sticky included.
func (c *Content) chmod(rel string, mode uint32) error {
	f, err := c.root.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			// A symlink: its mode means nothing on Linux.
			return nil
		}
		return wrap("chmod", apiPath(rel), err)
	}
	defer f.Close()
	if err := syscall.Fchmod(int(f.Fd()), mode); err != nil {
		return wrap("chmod", apiPath(rel), err)
	}
	return nil
}

// Update sets o on the existing entry p (a symlink itself is changed,
// never its target) and describes it.
func (c *Content) Update(p string, o Owner) (Entry, error) {
	rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if err := checkOwner(o); err != nil {
		return Entry{}, err
	}
	e, err := c.entry(rel)
	if err != nil {
		return Entry{}, err
	}
	if o.Mode == nil {
		m := e.Mode
		o.Mode = &m
	}
	if err := c.apply(rel, o, e.Mode); err != nil {
		return Entry{}, err
	}
	return c.entry(rel)
}

// Open opens the regular file p for reading. Anything else (a directory,
// a FIFO or device a sandbox made) is refused without reading from it.
func (c *Content) Open(p string) (*os.File, Entry, error) {
	rel, err := clean(p)
	if err != nil {
		return nil, Entry{}, err
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := c.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, Entry{}, wrap("read", apiPath(rel), err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Entry{}, wrap("read", apiPath(rel), err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, Entry{}, fmt.Errorf("read %s: not a regular file: %w", apiPath(rel), errdefs.ErrInvalidArgument)
	}
	return f, fromInfo(rel, fi), nil
}

// WriteFile writes r to the file p, replacing what it held, and gives it
// o (a new file's defaults: 0, 0, 0644; an existing file keeps its owner
// and mode unless o says otherwise). Missing parent directories are made
// (0755, with o's uid and gid). The file is written in place: a reader
// may see it half-written.
func (c *Content) WriteFile(p string, r io.Reader, o Owner) (Entry, error) {
	rel, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if rel == "." {
		return Entry{}, fmt.Errorf("write /: is a directory: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkOwner(o); err != nil {
		return Entry{}, err
	}
	dirOwner := Owner{UID: o.UID, GID: o.GID}
	if err := c.mkdirAll(path.Dir(rel), dirOwner); err != nil {
		return Entry{}, err
	}
	_, statErr := c.root.Lstat(rel)
	created := errors.Is(statErr, fs.ErrNotExist)
	// O_NONBLOCK: a FIFO a sandbox put there must not hang the write;
	// it is refused below.
	f, err := c.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0o644)
	if err != nil {
		return Entry{}, wrap("write", apiPath(rel), err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Entry{}, wrap("write", apiPath(rel), err)
	}
	if !fi.Mode().IsRegular() {
		return Entry{}, fmt.Errorf("write %s: not a regular file: %w", apiPath(rel), errdefs.ErrInvalidArgument)
	}
	// Owner and mode on the descriptor: the name may be swapped meanwhile.
	fd := int(f.Fd())
	uid, gid := o.ids()
	if uid >= 0 || gid >= 0 {
		if err := syscall.Fchown(fd, uid, gid); err != nil {
			return Entry{}, wrap("chown", apiPath(rel), err)
		}
	}
	if o.Mode != nil || created {
		mode := uint32(0o644)
		if o.Mode != nil {
			mode = *o.Mode
		}
		if err := syscall.Fchmod(fd, mode); err != nil {
			return Entry{}, wrap("chmod", apiPath(rel), err)
		}
	}
	if err := f.Truncate(0); err != nil {
		return Entry{}, wrap("write", apiPath(rel), err)
	}
	if _, err := io.Copy(f, r); err != nil {
		return Entry{}, wrap("write", apiPath(rel), err)
	}
	if err := f.Sync(); err != nil {
		return Entry{}, wrap("write", apiPath(rel), err)
	}
	if fi, err = f.Stat(); err != nil {
		return Entry{}, wrap("write", apiPath(rel), err)
	}
	return fromInfo(rel, fi), nil
}

// Remove removes the entry p, a directory with everything in it (a
// symlink itself, never its target). The volume's root cannot be
// removed.
func (c *Content) Remove(p string) error {
	rel, err := clean(p)
	if err != nil {
		return err
	}
	if rel == "." {
		return fmt.Errorf("remove /: the volume's root cannot be removed: %w", errdefs.ErrInvalidArgument)
	}
	if _, err := c.root.Lstat(rel); err != nil {
		return wrap("remove", apiPath(rel), err)
	}
	return wrap("remove", apiPath(rel), c.root.RemoveAll(rel))
}
