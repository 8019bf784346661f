package osbexecd

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// permission is execd's Permission: mode is written as octal digits read
// as a decimal number (755 means 0755), as the SDKs send it; 0 leaves the
// mode as it is.
type permission struct {
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

// modeText checks mode and returns it as chmod reads it ("" for 0).
func modeText(mode int) (string, error) {
	if mode == 0 {
		return "", nil
	}
	s := strconv.Itoa(mode)
	if mode < 0 || len(s) > 4 || strings.Trim(s, "01234567") != "" {
		return "", badRequest("mode %d is not an octal file mode such as 644 or 755", mode)
	}
	return "0" + s, nil
}

// ownerText checks owner and group and returns them as chown reads them
// ("" when neither is given). Names are looked up by chown inside the
// sandbox, in its own /etc/passwd and /etc/group.
func ownerText(owner, group string) (string, error) {
	for _, n := range []struct{ what, name string }{{"owner", owner}, {"group", group}} {
		if n.name == "" {
			continue
		}
		if len(n.name) > 256 || strings.ContainsAny(n.name, ":/\\") || strings.IndexFunc(n.name, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return "", badRequest("%s %q is not a valid user or group name", n.what, n.name)
		}
	}
	switch {
	case owner != "" && group != "":
		return owner + ":" + group, nil
	case group != "":
		return ":" + group, nil
	}
	return owner, nil
}

// permOp is what to change of one file: chown to owner ("user",
// "user:group", ":group"), then chmod to mode; "" leaves either.
type permOp struct {
	path, mode, owner string
}

// checkPermission checks p and returns the op for path.
func checkPermission(path string, p permission) (permOp, error) {
	mode, err := modeText(p.Mode)
	if err != nil {
		return permOp{}, err
	}
	owner, err := ownerText(p.Owner, p.Group)
	if err != nil {
		return permOp{}, err
	}
	return permOp{path: path, mode: mode, owner: owner}, nil
}

// permScript applies (path, mode, owner) triples given as its arguments.
// Every client string is an argument of its own, never part of the
// script, and "--" ends the options of each tool, so no path or name is
// interpreted. chown first: it may clear the mode's set-id bits.
const permScript = `set -e
while [ "$#" -ge 3 ]; do
	if [ -n "$3" ]; then chown -- "$3" "$1"; fi
	if [ -n "$2" ]; then chmod -- "$2" "$1"; fi
	shift 3
done`

// applyPerms applies ops in the sandbox as its root, since envd has no
// call to change a file's mode or owner. ops' paths must be absolute
// (envd's resolved paths): the helper's shell would not expand "~".
func (h *Handler) applyPerms(ctx context.Context, c *call, ops []permOp) error {
	// Batches keep each helper's arguments well below the kernel's limit.
	const maxArgBytes = 256 << 10
	head := []string{"/bin/sh", "-c", permScript, "sh"}
	args, size := head, 0
	run := func() error {
		if len(args) == len(head) {
			return nil
		}
		err := h.client(c, "root").helper(ctx, args...)
		args, size = append([]string(nil), head...), 0
		return err
	}
	for _, op := range ops {
		if op.mode == "" && op.owner == "" {
			continue
		}
		if size > maxArgBytes {
			if err := run(); err != nil {
				return err
			}
		}
		args = append(args, op.path, op.mode, op.owner)
		size += len(op.path) + len(op.mode) + len(op.owner) + 3
	}
	return run()
}

// sandboxNames is the user and group names of a sandbox's own
// /etc/passwd and /etc/group.
type sandboxNames struct {
	users, groups map[string]bool
}

// names reads the sandbox's user and group names.
func (ec *envdClient) names(ctx context.Context) (*sandboxNames, error) {
	n := &sandboxNames{users: map[string]bool{}, groups: map[string]bool{}}
	for _, f := range []struct {
		path string
		into map[string]bool
	}{{"/etc/passwd", n.users}, {"/etc/group", n.groups}} {
		b, err := ec.as("root").readFile(ctx, f.path, 4<<20)
		if err != nil {
			return nil, fmt.Errorf("reading the sandbox's %s: %w", f.path, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, ok := strings.Cut(line, ":"); ok && name != "" && !strings.HasPrefix(name, "#") {
				f.into[name] = true
			}
		}
	}
	return n, nil
}

// check refuses an owner or group the sandbox does not have; numeric ids
// are taken as they are, as chown takes them.
func (n *sandboxNames) check(owner, group string) error {
	numeric := func(s string) bool { return strings.Trim(s, "0123456789") == "" }
	if owner != "" && !numeric(owner) && !n.users[owner] {
		return badRequest("the sandbox has no user %q", owner)
	}
	if group != "" && !numeric(group) && !n.groups[group] {
		return badRequest("the sandbox has no group %q", group)
	}
	return nil
}

// namesChecker returns a check of owners and groups that reads the
// sandbox's names once, when a request first names one.
func (h *Handler) namesChecker(ctx context.Context, c *call) func(owner, group string) error {
	var n *sandboxNames
	return func(owner, group string) error {
		if owner == "" && group == "" {
			return nil
		}
		if n == nil {
			var err error
			if n, err = h.client(c, "root").names(ctx); err != nil {
				return err
			}
		}
		return n.check(owner, group)
	}
}
