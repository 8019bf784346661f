package template

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// StackFS is a read-only view of layers (bottom first) as a sandbox sees
// them, for reading a few files: a name is looked up from the top down,
// and a whiteout hides it. (Opaque directories are not honoured: enough
// for the CA bundle filter, which reads known files.)
type StackFS []string

// Open implements fs.FS.
func (s StackFS) Open(name string) (fs.File, error) {
	p, err := s.find(name)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	// Never through a symlink (ReadLink is how the reader follows one,
	// inside the stack), never a FIFO or device.
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !(fi.Mode().IsRegular() || fi.IsDir()) {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return f, nil
}

// ReadLink implements fs.ReadLinkFS, which the CA bundle filter needs.
func (s StackFS) ReadLink(name string) (string, error) {
	p, err := s.find(name)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return os.Readlink(p)
}

// Lstat implements fs.ReadLinkFS.
func (s StackFS) Lstat(name string) (fs.FileInfo, error) {
	p, err := s.find(name)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return os.Lstat(p)
}

func (s StackFS) find(name string) (string, error) {
	if !fs.ValidPath(name) {
		return "", fs.ErrInvalid
	}
	for i := len(s) - 1; i >= 0; i-- {
		p := filepath.Join(s[i], name)
		if symlinkedParent(s[i], name) {
			// The host would follow it out of the layer: what it leads to
			// in the sandbox is not this view's to find.
			return "", fs.ErrNotExist
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 {
			return "", fs.ErrNotExist
		}
		return p, nil
	}
	return "", fs.ErrNotExist
}

// symlinkedParent reports whether a directory on the way from root to
// name (a slash-separated path under it) is a symlink, or cannot be told.
func symlinkedParent(root, name string) bool {
	dir := root
	parts := strings.Split(name, "/")
	for _, part := range parts[:len(parts)-1] {
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		if err != nil {
			return false // missing: nothing to follow
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return true
		}
	}
	return false
}

// IsDir reports whether name is a directory in the view (a symlink on the
// way, or a whiteout, says no).
func (s StackFS) IsDir(name string) bool {
	if name == "" {
		return true
	}
	p, err := s.find(name)
	if err != nil {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}
