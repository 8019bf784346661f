package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"golang.org/x/sys/unix"
)

// initProcess is a sandbox init started by this process, which must reap it.
type initProcess struct {
	pid    int
	once   sync.Once
	status unix.WaitStatus
}

// wait reaps the init once and returns how it ended.
func (p *initProcess) wait() unix.WaitStatus {
	p.once.Do(func() {
		for {
			_, err := unix.Wait4(p.pid, &p.status, 0, nil)
			if err != unix.EINTR {
				return
			}
		}
	})
	return p.status
}

// initDied explains a broken sync socket by how the init ended.
func initDied(p *initProcess, err error) error {
	if !errors.Is(err, io.EOF) {
		return err
	}
	switch ws := p.wait(); {
	case ws.Signaled():
		return fmt.Errorf("init died during set-up: %v", ws.Signal())
	default:
		return fmt.Errorf("init exited during set-up with status %d", ws.ExitStatus())
	}
}

// sandbox implements runtime.Sandbox. A handle returned by Create also
// owns the init as its child and the first process's streams.
type sandbox struct {
	rt *Runtime
	id string

	init    *initProcess // nil for handles from Load
	sock    *os.File
	console *os.File
	done    chan struct{} // closed once the first process's exit is known
	exit    runtime.ExitStatus
}

func (s *sandbox) ID() string { return s.id }

// Output reads the output files of a detached first process, older first
// (see outputRing).
func (s *sandbox) Output(ctx context.Context) (runtime.OutputLog, error) {
	return readOutput(s.rt.sandboxDir(s.id), s.id)
}

func (s *sandbox) Status(ctx context.Context) (runtime.Status, error) {
	rec, err := s.rt.readRecord(s.id)
	if err != nil {
		return runtime.Status{}, err
	}
	return s.rt.status(rec), nil
}

// watch collects the exit message, drains the streams and reaps the init.
func (s *sandbox) watch(sio *stdio) {
	var m initMsg
	_, err := recvMsg(s.sock, &m)
	switch {
	case err == nil && m.Type == msgExited && m.Exit != nil:
		s.exit = *m.Exit
	default:
		s.exit = runtime.ExitStatus{Code: 255, Error: "sandbox init died"}
		if st := s.rt.readExit(s.id); st != nil {
			s.exit = *st
		}
	}
	sio.wait()
	s.init.wait()
	s.sock.Close()
	if s.console != nil {
		s.console.Close()
	}
	if rec, err := s.rt.readRecord(s.id); err == nil {
		if cg, err := loadCgroup(rec.CgroupPaths); err == nil {
			s.exit.OOMKilled = oomKilled(cg)
		}
	}
	close(s.done)
}

func (s *sandbox) Wait(ctx context.Context) (runtime.ExitStatus, error) {
	if s.done != nil {
		select {
		case <-s.done:
			return s.exit, nil
		case <-ctx.Done():
			return runtime.ExitStatus{}, ctx.Err()
		}
	}
	// Not our child: watch the init through a pidfd.
	rec, fd, err := s.openInit()
	if err != nil {
		return runtime.ExitStatus{}, err
	}
	if fd >= 0 {
		defer unix.Close(fd)
		if err := waitPidfd(ctx, fd); err != nil {
			return runtime.ExitStatus{}, err
		}
	}
	return *s.rt.status(rec).Exit, nil
}

// waitPidfd blocks until the process behind fd exits or ctx ends. It
// parks in Go's network poller (a pidfd is readable once its process has
// exited), so waiting on thousands of sandboxes costs no threads and no
// wake-ups.
func waitPidfd(ctx context.Context, fd int) error {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("dup pidfd: %w", err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return fmt.Errorf("pidfd: %w", err)
	}
	f := os.NewFile(uintptr(dup), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("pidfd: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Now()) })
	defer stop()
	err = rc.Read(func(uintptr) bool { return exited(fd) })
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("wait for pidfd: %w", err)
	}
	return nil
}

// openInit reads the sandbox's record and opens a pidfd for its init,
// which is -1 when the init no longer runs.
func (s *sandbox) openInit() (*record, int, error) {
	rec, err := s.rt.readRecord(s.id)
	if err != nil {
		return nil, -1, err
	}
	fd, err := openInit(rec)
	return rec, fd, err
}

func (s *sandbox) Signal(ctx context.Context, sig syscall.Signal) error {
	rec, fd, err := s.openInit()
	if err != nil {
		return err
	}
	if fd < 0 {
		return fmt.Errorf("sandbox %s is not running: %w", s.id, errdefs.ErrNotFound)
	}
	defer unix.Close(fd)
	// The init forwards signals, and it is frozen with the rest.
	if frozen, err := isFrozen(rec.CgroupPaths); err != nil {
		return fmt.Errorf("signal sandbox %s: %w", s.id, err)
	} else if frozen {
		return fmt.Errorf("signal sandbox %s: it is frozen: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
		return fmt.Errorf("signal sandbox %s: %w", s.id, err)
	}
	return nil
}

func (s *sandbox) ResizeConsole(ctx context.Context, size runtime.ConsoleSize) error {
	if s.console == nil {
		return fmt.Errorf("sandbox %s has no console: %w", s.id, errdefs.ErrInvalidArgument)
	}
	return unix.IoctlSetWinsize(int(s.console.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
}

func (s *sandbox) Delete(ctx context.Context) error {
	rec, fd, err := s.openInit()
	if err != nil {
		return err
	}
	if fd >= 0 {
		// SIGKILL to a pid namespace's init makes the kernel kill every
		// process in the namespace before the init itself goes; a frozen
		// sandbox must be thawed for that, after a kill of its own.
		err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		if err == nil {
			err = killFrozen(rec.CgroupPaths)
		}
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = waitPidfd(wctx, fd)
			cancel()
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("kill sandbox %s: %w", s.id, err)
		}
	}
	if s.done != nil {
		<-s.done // our child: let watch reap it
	}
	if len(rec.CgroupPaths) > 0 {
		// Whatever a frozen cgroup still holds can go only once thawed.
		if err := killFrozen(rec.CgroupPaths); err != nil {
			return fmt.Errorf("sandbox %s: %w", s.id, err)
		}
		cg, err := loadCgroup(rec.CgroupPaths)
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", s.id, err)
		}
		if err := destroyCgroup(cg); err != nil {
			return fmt.Errorf("sandbox %s: %w", s.id, err)
		}
	}
	dir := s.rt.sandboxDir(s.id)
	// Mounts live only in the sandbox's own mount namespace, which died with
	// its init. Should one ever be visible here, deleting through it could
	// reach the template: refuse instead.
	if m := mountsUnder(dir); len(m) > 0 {
		return fmt.Errorf("sandbox %s: refusing to remove %s while mounted: %s", s.id, dir, strings.Join(m, ", "))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove sandbox %s: %w", s.id, err)
	}
	s.rt.releaseSlot(rec.Slot, rec.ID)
	return nil
}

// mountsUnder lists mount points at or below dir in this mount namespace.
func mountsUnder(dir string) []string { return MountsUnder(dir) }

// MountsUnder lists the mount points at dir or below it in this
// process's mount namespace, deepest first (the order to unmount them).
func MountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := unescapeMountPath(f[4]); p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	// Longer paths first: children before their parents.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
