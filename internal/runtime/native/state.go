package native

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// On disk, under Options.DataDir:
//
//	sandboxes/<id>/state.json   record: what the sandbox is (this file)
//	sandboxes/<id>/exit.json    written by the sandbox's init when its first process ends
//	sandboxes/<id>/output.log, output.1.log  the first process's output when
//	                            nobody attached, kept by the init (see outputRing)
//	sandboxes/<id>/upper, work  the overlay's private writable layer
//	sandboxes/<id>/lower, rootfs  mount points, used only inside the sandbox's mount namespace
//
// and, host-wide, UIDRegistry/<slot> claims a uid range (see uids.go).
//
// The record is written once, before the sandbox's init runs, and updated
// once with the init's pid. Everything else about a sandbox is read live
// from the kernel (pidfd, cgroups).

// record is a sandbox's state file.
type record struct {
	ID       string `json:"id"`
	Template string `json:"template"`
	// TemplateID is the template build the sandbox was made from, and
	// TemplateLayers its layers' directories, bottom first.
	TemplateID      string            `json:"templateId,omitempty"`
	TemplateLayers  []string          `json:"templateLayers,omitempty"`
	Created         time.Time         `json:"created"`
	Slot            int               `json:"uidSlot"`
	Pid             int               `json:"pid"`
	PidStart        uint64            `json:"pidStartTime"` // /proc/<pid>/stat field 22: guards against pid reuse
	CgroupPaths     map[string]string `json:"cgroupPaths"`
	Command         []string          `json:"command"`
	Resources       runtime.Resources `json:"resources"`
	Labels          map[string]string `json:"labels,omitempty"`
	NoNewPrivileges bool              `json:"noNewPrivileges"`
}

func (r *record) hostUID() int { return uidBase + r.Slot*uidRange }

// ValidID reports whether id may name a sandbox of any backend (ids
// become directory, cgroup and runsc container names).
func ValidID(id string) bool { return validID(id) }

// NewID returns a random 20-character sandbox id in E2B's style.
func NewID() string { return newID() }

// ProcessStartTime is field 22 of /proc/<pid>/stat, which tells a
// process from a later one given the same pid.
func ProcessStartTime(pid int) (uint64, error) { return processStartTime(pid) }

// validID reports whether id may name a sandbox: 3-63 characters of
// [a-z0-9-], starting with a letter or digit. Ids become directory and
// cgroup names, so nothing else is allowed.
func validID(id string) bool {
	if len(id) < 3 || len(id) > 63 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && c == '-') {
			return false
		}
	}
	return true
}

// newID returns a random 20-character id in E2B's style.
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func (rt *Runtime) sandboxDir(id string) string { return filepath.Join(rt.dataDir, "sandboxes", id) }

func (rt *Runtime) readRecord(id string) (*record, error) {
	if !validID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	b, err := os.ReadFile(filepath.Join(rt.sandboxDir(id), "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: read state: %w", id, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("sandbox %s: corrupt state: %w", id, err)
	}
	return &r, nil
}

// writeRecord replaces the state file atomically.
func (rt *Runtime) writeRecord(r *record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	dir := rt.sandboxDir(r.ID)
	tmp := filepath.Join(dir, ".state.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "state.json")); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func (rt *Runtime) readExit(id string) *runtime.ExitStatus {
	b, err := os.ReadFile(filepath.Join(rt.sandboxDir(id), "exit.json"))
	if err != nil || len(b) == 0 {
		return nil
	}
	var st runtime.ExitStatus
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	return &st
}

// processStartTime reads field 22 of /proc/<pid>/stat, the process's start
// time in clock ticks since boot; with the pid it names a process uniquely.
func processStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: skip past its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// openInit returns a pidfd for the sandbox's init if it still runs, or -1.
func openInit(r *record) (int, error) {
	if r.Pid <= 0 {
		return -1, nil
	}
	fd, err := unix.PidfdOpen(r.Pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("pidfd_open %d: %w", r.Pid, err)
	}
	// The pidfd pins the process; now make sure it is ours and not a reuse.
	st, err := processStartTime(r.Pid)
	if err != nil || st != r.PidStart {
		unix.Close(fd)
		return -1, nil
	}
	// A zombie init has finished; treat it as gone.
	if exited(fd) {
		unix.Close(fd)
		return -1, nil
	}
	return fd, nil
}

// exited reports whether the process behind pidfd has terminated.
func exited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, 0)
	return n > 0
}
