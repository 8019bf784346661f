package native

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Sandboxes must reach their layers under the data dir. Each sandbox's
// init runs as an unprivileged host uid of its own, in a mount namespace of
// its own, and attaches its layers at DataDir/sandboxes/<id>/... by path:
// that needs search permission on every directory on the way. A data dir
// made by `mktemp -d` (mode 0700) failed every create with "attach
// template: permission denied".

// openToSandboxes gives each of dirs (the data dir and the directories in
// it on the sandboxes' way, which are Hutch's own) that is closed to other
// users search permission for group and others: 0700 becomes 0711. Never
// read: no sandbox can list them.
func openToSandboxes(dirs ...string) error {
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if fi.Mode().Perm()&0o001 != 0 {
			continue
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
			return fmt.Errorf("data dir: let sandboxes pass through %s: %w", d, err)
		}
	}
	return nil
}

// reachable checks the directories above dataDir (an absolute path), which
// are not Hutch's to change: the first one closed to other users is an
// *unreachableError that names it and the fix. It looks each time, so that
// a directory opened since (or closed) counts at once.
func reachable(dataDir string) error {
	for p := filepath.Dir(dataDir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		if perm := fi.Mode().Perm(); perm&0o001 == 0 {
			return &unreachableError{dataDir: dataDir, dir: p, perm: perm}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// unreachableError is reachable's refusal: a directory above the data dir
// that sandboxes cannot pass through.
type unreachableError struct {
	dataDir, dir string
	perm         fs.FileMode
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("data dir %s: sandboxes cannot reach it: %s (mode %04o) is closed to other users, "+
		"and every sandbox runs as an unprivileged user that must pass through it to its files; "+
		"allow passing through with `chmod o+x %s` (nobody gains the right to list it), "+
		"or use a --data-dir whose parent directories others may pass through (such as the default, %s)",
		e.dataDir, e.dir, e.perm, e.dir, DefaultDataDir)
}

// Unwrap classes the refusal as unavailable: no sandbox can be made until
// the host's directories change.
func (e *unreachableError) Unwrap() error { return errdefs.ErrUnavailable }
