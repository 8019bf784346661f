package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// sandbox is a handle on one gVisor sandbox; the creator's also holds the
// first process's streams.
type sandbox struct {
	rt      *Runtime
	id, dir string
	rec     *record  // as loaded: Wait finds the shim after a Delete
	sio     *stdio   // the creator's only
	console *os.File // the creator's only, with a terminal
}

func (s *sandbox) ID() string { return s.id }

func (s *sandbox) record() (*record, error) { return s.rt.readRecord(s.id) }

func (s *sandbox) Status(ctx context.Context) (runtime.Status, error) {
	rec, err := s.record()
	if err != nil {
		return runtime.Status{}, err
	}
	return s.rt.status(rec), nil
}

// Wait waits for the shim to go (it outlives runsc by the time it takes to
// write exit.json), then for the creator's copies of the output.
func (s *sandbox) Wait(ctx context.Context) (runtime.ExitStatus, error) {
	rec, err := s.record()
	if errors.Is(err, errdefs.ErrNotFound) && s.rec != nil {
		rec = s.rec // deleted: its shim is gone or going
	} else if err != nil {
		return runtime.ExitStatus{}, err
	}
	if fd := openShim(rec); fd >= 0 {
		err := waitPidfd(ctx, fd)
		unix.Close(fd)
		if err != nil {
			return runtime.ExitStatus{}, err
		}
	}
	if s.sio != nil {
		select {
		case <-s.sio.done:
		case <-ctx.Done():
			return runtime.ExitStatus{}, ctx.Err()
		}
	}
	if st := readExit(s.dir); st != nil {
		return *st, nil
	}
	if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
		// Deleted meanwhile: killed.
		return runtime.ExitStatus{Code: 128 + 9, Signal: syscall.SIGKILL}, nil
	}
	return runtime.ExitStatus{Code: 128 + 9, Signal: syscall.SIGKILL, Error: "the sandbox's shim is gone"}, nil
}

// waitPidfd waits for the process of pidfd fd to exit, or ctx.
func waitPidfd(ctx context.Context, fd int) error {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 50)
		if err != nil && err != unix.EINTR {
			return err
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (s *sandbox) Signal(ctx context.Context, sig syscall.Signal) error {
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	switch st.State {
	case runtime.StateFrozen:
		return fmt.Errorf("sandbox %s is frozen: %w", s.id, errdefs.ErrFailedPrecondition)
	case runtime.StateExited:
		return fmt.Errorf("sandbox %s has exited: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	// To PID 1, GuestInit, which passes it on to the first process.
	_, err = s.rt.runscCmd(ctx, s.dir, "kill", s.id, strconv.Itoa(int(sig)))
	return err
}

func (s *sandbox) ResizeConsole(ctx context.Context, size runtime.ConsoleSize) error {
	if s.console == nil {
		return fmt.Errorf("sandbox %s has no console here: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	return unix.IoctlSetWinsize(int(s.console.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
}

// Stats reads what runsc reports of the sandbox's cgroups.
func (s *sandbox) Stats(ctx context.Context) (runtime.Stats, error) {
	rec, err := s.record()
	if err != nil {
		return runtime.Stats{}, err
	}
	if !shimAlive(rec) {
		return runtime.Stats{}, fmt.Errorf("sandbox %s has exited: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	// Read from the cgroups runsc made, not with `runsc events`: a
	// process per sample per sandbox would cost more than the sandbox.
	st, err := native.CgroupStats(s.rt.cgroupsPath(s.id))
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("sandbox %s stats: %w", s.id, err)
	}
	st.MemoryLimit = 0
	if l := rec.Resources.MemoryBytes; l > 0 {
		st.MemoryLimit = uint64(l)
	}
	return st, nil
}

// DiskUsage is what the overlay's file store holds on the host: runsc
// keeps the writable layer's contents in a file it made in upper/ and
// unlinked, which its sandbox process holds open.
func (s *sandbox) DiskUsage(ctx context.Context) (runtime.DiskUsage, error) {
	rec, err := s.record()
	if err != nil {
		return runtime.DiskUsage{}, err
	}
	upper := filepath.Join(s.dir, "upper")
	var fs unix.Statfs_t
	if err := unix.Statfs(upper, &fs); err != nil {
		return runtime.DiskUsage{}, err
	}
	total := fs.Blocks * uint64(fs.Bsize)
	if rec.Resources.DiskBytes > 0 {
		// The image holds nothing else.
		return runtime.DiskUsage{Used: (fs.Blocks - fs.Bfree) * uint64(fs.Bsize), Total: min(total, uint64(rec.Resources.DiskBytes))}, nil
	}
	var used uint64
	if b, err := os.ReadFile(filepath.Join(s.dir, "init.pid")); err == nil {
		fdDir := "/proc/" + strings.TrimSpace(string(b)) + "/fd"
		ents, _ := os.ReadDir(fdDir)
		for _, e := range ents {
			target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
			if err != nil || !strings.HasPrefix(target, upper+"/") {
				continue
			}
			var st unix.Stat_t
			if unix.Stat(filepath.Join(fdDir, e.Name()), &st) == nil {
				used += uint64(st.Blocks) * 512
			}
		}
	}
	return runtime.DiskUsage{Used: used, Total: total}, nil
}

func (s *sandbox) Output(ctx context.Context) (runtime.OutputLog, error) {
	return native.ReadOutput(s.dir, s.id)
}

func (s *sandbox) Freeze(ctx context.Context) error {
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	switch st.State {
	case runtime.StateFrozen:
		return nil
	case runtime.StateExited:
		return fmt.Errorf("sandbox %s has exited: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	if _, err := s.rt.runscCmd(ctx, s.dir, "pause", s.id); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "frozen"), nil, 0o600)
}

func (s *sandbox) Thaw(ctx context.Context) error {
	st, err := s.Status(ctx)
	if err != nil {
		return err
	}
	if st.State != runtime.StateFrozen {
		return nil
	}
	if _, err := s.rt.runscCmd(ctx, s.dir, "resume", s.id); err != nil {
		return err
	}
	return os.Remove(filepath.Join(s.dir, "frozen"))
}

// Delete stops runsc, the shim, and takes down everything the sandbox
// had on the host.
func (s *sandbox) Delete(ctx context.Context) error {
	rec, err := s.record()
	if err != nil {
		return err
	}
	// Gone from Load and List first: a second Delete finds nothing.
	if err := os.Rename(filepath.Join(s.dir, "state.json"), filepath.Join(s.dir, "state.deleting")); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sandbox %s: %w", s.id, errdefs.ErrNotFound)
		}
		return err
	}
	return s.rt.teardown(ctx, rec)
}

// teardown removes what sandbox rec has on the host, its record already
// renamed state.deleting (by Delete, or by one a crash interrupted:
// Sweep and boot finish it).
func (rt *Runtime) teardown(ctx context.Context, rec *record) error {
	dir := rt.sandboxDir(rec.ID)
	if _, err := rt.runscCmd(ctx, dir, "delete", "--force", rec.ID); err != nil {
		// A sandbox runsc has forgotten (its state lost) still has a shim.
		if fd := openShim(rec); fd >= 0 {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			unix.Close(fd)
		}
	}
	if fd := openShim(rec); fd >= 0 {
		// runsc run ends with its sandbox; the shim right after it.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if waitPidfd(wctx, fd) != nil {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			waitPidfd(ctx, fd)
		}
		cancel()
		unix.Close(fd)
	}
	rt.removeCgroups(rec.ID)
	if ents, err := os.ReadDir(rt.sandboxesDir()); err == nil && len(ents) <= 1 {
		// The last sandbox of the data dir: its cgroup parent goes too
		// (runsc makes it again for the next).
		rt.removeCgroups("")
	}
	unmountAll(dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", rec.ID, err)
	}
	rt.native.ReleaseIDs(idRange(rec), dir)
	return nil
}

// finishDelete completes the Delete of sandbox id that a crash
// interrupted (its record is state.deleting); it reports whether there
// was one.
func (rt *Runtime) finishDelete(ctx context.Context, id string) bool {
	b, err := os.ReadFile(filepath.Join(rt.sandboxDir(id), "state.deleting"))
	if err != nil {
		return false
	}
	var rec record
	if json.Unmarshal(b, &rec) != nil || rec.ID != id {
		return false
	}
	return rt.teardown(ctx, &rec) == nil
}
