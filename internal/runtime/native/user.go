package native

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// execUser is who a sandbox process runs as, resolved from the sandbox's
// own /etc/passwd and /etc/group (never the host's).
type execUser struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32
	Home   string
	Shell  string
}

// lookupUser resolves spec ("name", "uid" or "uid:gid") against the
// passwd and group files under root.
func lookupUser(root, spec string) (*execUser, error) {
	name, gidPart, hasGID := strings.Cut(spec, ":")
	u := &execUser{Home: "/", Shell: "/bin/sh"}
	uid, numeric := parseID(name)
	found := false
	for _, f := range readColonFile(root + "/etc/passwd") {
		if len(f) < 7 {
			continue
		}
		fuid, ok1 := parseID(f[2])
		fgid, ok2 := parseID(f[3])
		if !ok1 || !ok2 {
			continue
		}
		if f[0] == name || (numeric && fuid == uid) {
			u.Name, u.UID, u.GID, u.Home, u.Shell = f[0], fuid, fgid, f[5], f[6]
			found = true
			break
		}
	}
	if !found {
		if !numeric {
			return nil, fmt.Errorf("user %q is not in the sandbox's /etc/passwd: %w", name, errdefs.ErrInvalidArgument)
		}
		u.Name, u.UID, u.GID = name, uid, uid
	}
	if hasGID {
		gid, ok := parseID(gidPart)
		if !ok {
			return nil, fmt.Errorf("group %q: not a number: %w", gidPart, errdefs.ErrInvalidArgument)
		}
		u.GID = gid
	}
	if u.UID >= uidRange || u.GID >= uidRange {
		return nil, fmt.Errorf("user %q: ids must be below %d: %w", spec, uidRange, errdefs.ErrInvalidArgument)
	}
	// Supplementary groups: every group that lists the user by name.
	for _, f := range readColonFile(root + "/etc/group") {
		if len(f) < 4 || u.Name == "" {
			continue
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == u.Name {
				if gid, ok := parseID(f[2]); ok && gid != u.GID && gid < uidRange {
					u.Groups = append(u.Groups, gid)
				}
			}
		}
	}
	return u, nil
}

func parseID(s string) (uint32, bool) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err == nil
}

func readColonFile(path string) [][]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}
