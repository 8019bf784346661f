// Package permissions resolves who an envd request acts as and what its
// paths mean: the user named by the request (or the default), that user's
// ids and home, and paths expanded against them. envd runs inside the
// sandbox's mount namespace, so the sandbox's root is the boundary for every
// path; nothing here needs to confine paths further.
package permissions

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/passwd"
)

// User is an account of the sandbox.
type User = passwd.User

// ErrUnknownUser is returned (wrapped) for a user the sandbox does not have.
var ErrUnknownUser = errors.New("unknown user")

// Lookup finds name in the sandbox's /etc/passwd; errors wrap
// ErrUnknownUser and errdefs.ErrNotFound when there is no such user.
func Lookup(name string) (*User, error) { return LookupIn("/", name) }

// LookupIn is Lookup against the passwd and group files under root.
func LookupIn(root, name string) (*User, error) {
	u, err := passwd.Lookup(root, name)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w: %w", name, ErrUnknownUser, err)
	}
	return u, nil
}

// UsernameFromHeader returns the user an RPC names with
// "Authorization: Basic base64(<user>:)", or "" when it names none.
func UsernameFromHeader(h http.Header) (string, error) {
	auth := h.Get("Authorization")
	if auth == "" {
		return "", nil
	}
	scheme, rest, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", fmt.Errorf("authorization header is not Basic: %w", errdefs.ErrInvalidArgument)
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", fmt.Errorf("authorization header: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	name, _, _ := strings.Cut(string(raw), ":")
	return name, nil
}

// UserFromHeader returns the user a request acts as: the one its Basic
// Authorization header names, else def. A garbled header names no valid
// user: its error wraps ErrUnknownUser too.
func UserFromHeader(h http.Header, def string) (*User, error) {
	name, err := UsernameFromHeader(h)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnknownUser, err)
	}
	return Resolve(name, def)
}

// Resolve returns the user named (by name, or def when name is empty).
func Resolve(name, def string) (*User, error) {
	if name == "" {
		name = def
	}
	if name == "" {
		name = "root"
	}
	return Lookup(name)
}

// ExpandAndResolve turns a request path into an absolute, clean path:
// a leading ~ is the user's home; a relative or empty path is taken against
// workdir when set, else the user's home.
func ExpandAndResolve(path string, u *User, workdir string) (string, error) {
	base := u.Home
	if workdir != "" {
		base = workdir
	}
	switch {
	case path == "~" || strings.HasPrefix(path, "~/"):
		path = filepath.Join(u.Home, strings.TrimPrefix(path, "~"))
	case strings.HasPrefix(path, "~"):
		return "", fmt.Errorf("path %q: only ~ and ~/ are expanded: %w", path, errdefs.ErrInvalidArgument)
	case !filepath.IsAbs(path):
		path = filepath.Join(base, path)
	}
	if strings.ContainsRune(path, 0) {
		return "", fmt.Errorf("path contains a NUL byte: %w", errdefs.ErrInvalidArgument)
	}
	return filepath.Clean(path), nil
}

// MkdirAllAs creates dir and any missing parents, giving each directory it
// creates to u. Existing directories are left as they are.
func MkdirAllAs(dir string, u *User, perm os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory: %w", dir, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAllAs(parent, u, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.Lchown(dir, int(u.UID), int(u.GID))
}
