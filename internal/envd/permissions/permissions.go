// Package permissions resolves who an envd request acts as and what its
// paths mean: the user named by the request (or the default), that user's
// ids and home, and paths expanded against them. envd runs inside the
// sandbox's mount namespace, so the sandbox's root is the boundary for every
// path; nothing here needs to confine paths further.
package permissions

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// User is an account of the sandbox, from its /etc/passwd and /etc/group.
type User struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32 // supplementary groups, without GID
	Home   string
	Shell  string
}

// ErrUnknownUser is returned (wrapped) for a user the sandbox does not have.
var ErrUnknownUser = errors.New("unknown user")

// Lookup finds name in the sandbox's /etc/passwd; errors wrap
// ErrUnknownUser and errdefs.ErrNotFound when there is no such user.
func Lookup(name string) (*User, error) { return LookupIn("/", name) }

// LookupIn is Lookup against the passwd and group files under root.
func LookupIn(root, name string) (*User, error) {
	var u *User
	for _, f := range colonFile(filepath.Join(root, "etc/passwd")) {
		if len(f) < 7 || f[0] != name {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		u = &User{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: f[5], Shell: f[6]}
		break
	}
	if u == nil {
		return nil, fmt.Errorf("user %q: %w: %w", name, ErrUnknownUser, errdefs.ErrNotFound)
	}
	for _, f := range colonFile(filepath.Join(root, "etc/group")) {
		if len(f) < 4 {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m != u.Name {
				continue
			}
			if gid, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(gid) != u.GID {
				u.Groups = append(u.Groups, uint32(gid))
			}
		}
	}
	return u, nil
}

func colonFile(path string) [][]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, strings.Split(line, ":"))
		}
	}
	return out
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
