package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// A sandbox is frozen with a cgroup freezer, which stops every task of the
// cgroup at once and keeps new ones (forks) stopped too:
//
//   - cgroup v2 (pure, or the unified tree of a hybrid host, where each
//     sandbox has a cgroup even though no controller lives there):
//     cgroup.freeze, then "frozen 1" in cgroup.events once every task has
//     stopped;
//   - cgroup v1: the freezer controller's freezer.state (FROZEN, THAWED).
//
// A hybrid host may offer both; v2's is preferred. Its tasks stop in a
// signal-like trap that a fatal signal ends, so a frozen sandbox can be
// killed outright (cgroup.kill, the OOM killer), whereas v1's frozen tasks
// act on SIGKILL only once thawed, and v1 can stay FREEZING while tasks
// fork (opencontainers/cgroups retries up to a thousand times for that).
// Both are driven through opencontainers/cgroups: its v2 Freeze writes
// cgroup.freeze and waits (up to 10 s) for cgroup.events, its v1 Freeze
// retries FREEZING and thaws again when it gives up. Written by hand here:
// which freezer a sandbox has (the library's managers assume one), reading
// the v2 state without waiting (below), and killing a frozen sandbox
// (killFrozen).

// freezer is one cgroup freezer holding a sandbox's tasks.
type freezer struct {
	// name says which it is, in errors and Capabilities.
	name string
	// v2 is true for cgroup.freeze, false for v1's freezer.state.
	v2 bool
	// dir is the sandbox's cgroup directory in that hierarchy.
	dir string
	m   cgroups.Manager
}

// freezersOf lists the freezers a sandbox's cgroups have on this host, the
// one Freeze uses first. paths are the record's CgroupPaths. Thaw and the
// frozen state look at all of them, so a sandbox frozen through either is
// seen and thawed whichever is preferred.
func freezersOf(paths map[string]string) []freezer {
	var out []freezer
	// The key "" is the v2 cgroup: the only one on a pure v2 host, the
	// unified tree's on a hybrid one.
	if dir := paths[""]; dir != "" && exists(filepath.Join(dir, "cgroup.freeze")) {
		// The library's v2 Freeze refuses a manager without Resources.
		m, err := fs2.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{}}, dir)
		if err == nil {
			out = append(out, freezer{name: "cgroup v2 freezer (cgroup.freeze)", v2: true, dir: dir, m: m})
		}
	}
	if dir := paths["freezer"]; dir != "" && exists(filepath.Join(dir, "freezer.state")) {
		m, err := fs.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{SkipDevices: true}}, map[string]string{"freezer": dir})
		if err == nil {
			out = append(out, freezer{name: "cgroup v1 freezer (freezer.state)", dir: dir, m: m})
		}
	}
	return out
}

// frozen reports whether the freezer holds its tasks stopped, or is
// stopping them.
func (f freezer) frozen() (bool, error) {
	if f.v2 {
		// The library's GetFreezerState waits until the freeze is complete,
		// up to 10 s; Status and Signal must not. cgroup.freeze is what
		// was asked, and a Freeze either completes it or thaws again.
		b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.freeze"))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return false, nil // the cgroup is being removed
		}
		if err != nil {
			return false, err
		}
		return strings.TrimSpace(string(b)) == "1", nil
	}
	st, err := f.m.GetFreezerState()
	return st == cgroups.Frozen, err
}

// isFrozen reports whether any freezer of the sandbox holds it.
func isFrozen(paths map[string]string) (bool, error) {
	for _, f := range freezersOf(paths) {
		frozen, err := f.frozen()
		if err != nil {
			return false, fmt.Errorf("%s: %w", f.name, err)
		}
		if frozen {
			return true, nil
		}
	}
	return false, nil
}

// Freeze implements runtime.Sandbox.
func (s *sandbox) Freeze(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rec, fd, err := s.openInit()
	if err != nil {
		return err
	}
	if fd < 0 {
		return fmt.Errorf("freeze sandbox %s: it has exited: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	// Holding the pidfd keeps the init's pid from being reused meanwhile.
	defer unix.Close(fd)
	fz := freezersOf(rec.CgroupPaths)
	if len(fz) == 0 {
		return fmt.Errorf("freeze sandbox %s: %s: %w", s.id, noFreezer, errdefs.ErrNotImplemented)
	}
	freeze := func() error { return fz[0].m.Freeze(cgroups.Frozen) }
	if fz[0].v2 {
		freeze = func() error { return freezeV2(ctx, fz[0].dir) }
	}
	if err := freeze(); err != nil {
		// The v2 freezer is left asking for a freeze when its wait times
		// out (a task stuck in the kernel); a sandbox half frozen is worse
		// than one running. (v1's Freeze thaws again itself.)
		fz[0].m.Freeze(cgroups.Thawed)
		return fmt.Errorf("freeze sandbox %s: %s: %w", s.id, fz[0].name, err)
	}
	return nil
}

// freezeMax bounds the wait for a v2 freeze to complete, as the library's.
const freezeMax = 10 * time.Second

// freezeV2 asks cgroup dir's v2 freezer to freeze and waits until
// cgroup.events says "frozen 1". The kernel wakes a poll (POLLPRI) of
// cgroup.events at each change, so the wait ends as the freeze does.
// Written by hand: the library's v2 Freeze sleeps 10 ms between reads of
// the file, which was most of a pause's time on a busy host.
func freezeV2(ctx context.Context, dir string) error {
	ev, err := os.Open(filepath.Join(dir, "cgroup.events"))
	if err != nil {
		return err
	}
	defer ev.Close()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte("1"), 0); err != nil {
		return err
	}
	deadline := time.Now().Add(freezeMax)
	buf := make([]byte, 512)
	for {
		// A read also marks the file's events seen, for the poll below.
		n, err := ev.ReadAt(buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			if strings.TrimSpace(line) == "frozen 1" {
				return nil
			}
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return fmt.Errorf("the freeze did not complete within %v", freezeMax)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Woken by the change, or after a while regardless (a change
		// between the read and the poll is seen by the poll too).
		fds := []unix.PollFd{{Fd: int32(ev.Fd()), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, int(min(wait, 100*time.Millisecond).Milliseconds())+1); err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// Thaw implements runtime.Sandbox.
func (s *sandbox) Thaw(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rec, err := s.rt.readRecord(s.id)
	if err != nil {
		return err
	}
	if err := thaw(rec.CgroupPaths); err != nil {
		return fmt.Errorf("thaw sandbox %s: %w", s.id, err)
	}
	return nil
}

// thaw resumes the tasks of every freezer of a sandbox; thawing one that
// is not frozen does nothing.
func thaw(paths map[string]string) error {
	var errs []error
	for _, f := range freezersOf(paths) {
		if err := f.m.Freeze(cgroups.Thawed); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
		}
	}
	return errors.Join(errs...)
}

// killFrozen kills every task of a frozen sandbox, then thaws it, so that
// the tasks die at once without running another instruction of their own.
// Killing only the init would not do on a v1 freezer: its SIGKILL waits
// for the thaw, and the init's death then leaves the kernel to kill the
// rest of the pid namespace while they already run again. It does nothing
// to a sandbox that is not frozen.
func killFrozen(paths map[string]string) error {
	frozen, err := isFrozen(paths)
	if err != nil || !frozen {
		return err
	}
	var errs []error
	if dir := paths[""]; dir != "" && exists(filepath.Join(dir, "cgroup.kill")) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup.kill: %w", err))
		}
	} else if dir := paths["freezer"]; dir != "" {
		// A v1-only host has no cgroup.kill: signal each task. Frozen tasks
		// cannot exit, so none of these pids can have been reused.
		pids, err := cgroups.GetAllPids(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("list tasks: %w", err))
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
		}
	}
	if err := thaw(paths); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// noFreezer explains a host without any cgroup freezer.
const noFreezer = "no cgroup freezer on this host (cgroup v2 with cgroup.freeze, Linux 5.2+, or the cgroup v1 freezer controller mounted)"
