package native

import (
	"errors"
	"fmt"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/passwd"
)

// execUser is who a sandbox process runs as.
type execUser = passwd.User

// lookupUser resolves spec ("name", "uid" or "uid:gid") against the
// sandbox's own passwd and group files under root; every failure is the
// caller's (ErrInvalidArgument).
func lookupUser(root, spec string) (*execUser, error) {
	u, err := passwd.Lookup(root, spec)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("user %q is not in the sandbox's /etc/passwd: %w", spec, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, err
	}
	if u.UID >= uidRange || u.GID >= uidRange {
		return nil, fmt.Errorf("user %q: ids must be below %d: %w", spec, uidRange, errdefs.ErrInvalidArgument)
	}
	kept := u.Groups[:0]
	for _, g := range u.Groups {
		if g < uidRange {
			kept = append(kept, g)
		}
	}
	u.Groups = kept
	return u, nil
}
