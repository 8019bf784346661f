package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// On disk, under Options.DataDir:
//
//	gvisor/runsc/                 runsc's own state (its --root)
//	gvisor/sandboxes/<id>/state.json  record (this file)
//	  bundle/config.json          the OCI spec runsc runs
//	  lower/<n>/                  the template's layers, idmapped (host mounts)
//	  rootfs/                     their read-only overlay: the sandbox's lower root
//	  vol/<n>/                    volumes, idmapped (host mounts)
//	  imglower/<i>/<n>/           image root i's layers, idmapped (host mounts)
//	  img/<i>/                    their overlay: image root i (images.go)
//	  upper/                      runsc's overlay file store: the writable
//	                              layer (an ext4 image mounted here when
//	                              the sandbox has a disk limit)
//	  upper/img/<i>/              image root i's writable layer
//	  shim.json, shim.log         the shim's configuration and its own log
//	  output.log                  the first process's output when nobody attached
//	  exit.json                   written by the shim when runsc ends
//	  frozen                      present while runsc has paused the sandbox
//
// The template's mounts live in the host's mount namespace (runsc's gofer
// serves the root from a path), and Delete takes them down.

// record is a sandbox's state file.
type record struct {
	ID              string            `json:"id"`
	Template        string            `json:"template"`
	TemplateID      string            `json:"templateId"`
	TemplateLayers  []string          `json:"templateLayers"`
	Created         time.Time         `json:"created"`
	Slot            int               `json:"uidSlot"` // see native.IDRange: the host-wide claim checks it
	HostID          int               `json:"hostId"`
	IDs             int               `json:"ids"`
	ShimPid         int               `json:"shimPid"`
	ShimStart       uint64            `json:"shimStartTime"` // guards against pid reuse
	Command         []string          `json:"command"`
	Resources       runtime.Resources `json:"resources"`
	Labels          map[string]string `json:"labels,omitempty"`
	Mounts          []runtime.Mount   `json:"mounts,omitempty"`
	NoNewPrivileges bool              `json:"noNewPrivileges"`
	// Channels is how many of the host's listening sockets the first
	// process serves over the link (its ExtraFiles); 0 without a link.
	Channels int `json:"channels,omitempty"`
	// RestoredFrom is the checkpoint the sandbox was restored from.
	RestoredFrom string `json:"restoredFrom,omitempty"`
	// Images are the image roots the sandbox shows (images.go).
	Images []runtime.ImageRoot `json:"images,omitempty"`
}

func (rt *Runtime) sandboxesDir() string        { return filepath.Join(rt.dataDir, "gvisor", "sandboxes") }
func (rt *Runtime) sandboxDir(id string) string { return filepath.Join(rt.sandboxesDir(), id) }
func (rt *Runtime) runscRoot() string           { return filepath.Join(rt.dataDir, "gvisor", "runsc") }

func (rt *Runtime) readRecord(id string) (*record, error) {
	if !native.ValidID(id) {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	b, err := os.ReadFile(filepath.Join(rt.sandboxDir(id), "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("sandbox %s: state: %w", id, err)
	}
	if r.ID != id {
		// Its directory's name is the id: a record naming another is not
		// this sandbox's (and would make Delete remove that one's).
		return nil, fmt.Errorf("sandbox %s: its record names %q: %w", id, r.ID, errdefs.ErrFailedPrecondition)
	}
	return &r, nil
}

// writeRecord replaces the record whole (a rename), so a reader never sees
// half of one.
func (rt *Runtime) writeRecord(r *record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	p := filepath.Join(rt.sandboxDir(r.ID), "state.json")
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("sandbox state: %w", err)
	}
	return os.Rename(p+".tmp", p)
}

// readExit is what the shim wrote when runsc ended, nil before.
func readExit(dir string) *runtime.ExitStatus {
	b, err := os.ReadFile(filepath.Join(dir, "exit.json"))
	if err != nil || len(b) == 0 {
		return nil
	}
	var st runtime.ExitStatus
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	return &st
}

// openShim returns a pidfd for r's shim, or -1 when it is gone (or its pid
// is another process's now).
func openShim(r *record) int {
	if r.ShimPid <= 0 {
		return -1
	}
	fd, err := unix.PidfdOpen(r.ShimPid, 0)
	if err != nil {
		return -1
	}
	if st, err := native.ProcessStartTime(r.ShimPid); err != nil || st != r.ShimStart {
		unix.Close(fd)
		return -1
	}
	return fd
}

// shimAlive reports whether r's shim (and so its runsc) still runs.
func shimAlive(r *record) bool {
	fd := openShim(r)
	if fd < 0 {
		return false
	}
	defer unix.Close(fd)
	var fds = []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, 0)
	return n == 0
}
