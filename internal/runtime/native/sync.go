package native

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"golang.org/x/sys/unix"
)

// initConfig is the init's set-up, sent as the first sync message.
type initConfig struct {
	ID              string `json:"id"`
	Hostname        string `json:"hostname"`
	Dir             string `json:"dir"` // host path of the sandbox directory
	DefaultUser     string `json:"defaultUser"`
	NoNewPrivileges bool   `json:"noNewPrivileges"`
	Layers          int    `json:"layers"`     // the template's layers: the first mount fds, bottom first
	TemplateID      string `json:"templateId"` // the template build, named in the root's mount source
	Disk            bool   `json:"disk"`       // a disk layer mount follows the template's
	// Mounts are the targets of the host directories (volumes) whose
	// mounts follow the disk layer's (or the template's), in order.
	Mounts []string `json:"mounts,omitempty"`
	// Images are the image roots (runtime.ImageRoot), whose layers' mounts
	// follow the volumes', each image's bottom first.
	Images   []imageConfig `json:"images,omitempty"`
	Args     []string      `json:"args"`
	Env      []string      `json:"env"`
	User     string        `json:"user"`
	Cwd      string        `json:"cwd"`
	Terminal bool          `json:"terminal"`
	Rows     uint16        `json:"rows"`
	Cols     uint16        `json:"cols"`
	// Log: descriptors 5 and 6 are the output files, for the init to keep
	// the process's output in; the process gets a pipe.
	Log bool `json:"log"`
	// SocketBudget: how much the receive queues no cgroup is charged for
	// may hold (see sockGuard); 0 for no watch.
	SocketBudget int64 `json:"socketBudget,omitempty"`
}

// imageConfig is one runtime.ImageRoot as the init sees it.
type imageConfig struct {
	Build  string              `json:"build"`
	Layers int                 `json:"layers"`
	Target string              `json:"target"`
	Config bool                `json:"config,omitempty"` // imglower/<i>.json holds it
	Binds  []runtime.ImageBind `json:"binds,omitempty"`
}

// initMsg is every later sync message, in either direction.
type initMsg struct {
	Type  string              `json:"type"`
	Pid   int                 `json:"pid,omitempty"`
	Error string              `json:"error,omitempty"`
	Class string              `json:"class,omitempty"` // errdefs class of Error
	Exit  *runtime.ExitStatus `json:"exit,omitempty"`
}

const (
	msgJoined  = "joined"
	msgStarted = "started"
	msgError   = "error"
	msgExited  = "exited"
)

// initError is a failure reported by a sandbox's init. Its text is the
// init's own; errors.Is sees its errdefs class.
type initError struct {
	msg   string
	class error
}

func (e *initError) Error() string { return e.msg }

func (e *initError) Unwrap() error { return e.class }

// errorClass maps an init error's class back to an errdefs error.
func errorClass(c string) error {
	switch c {
	case "invalid":
		return errdefs.ErrInvalidArgument
	case "notfound":
		return errdefs.ErrNotFound
	}
	return errdefs.ErrUnavailable
}

// maxMsg bounds one sync message (what recvMsg reads at once).
const maxMsg = 1 << 16

func sendMsg(f *os.File, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxMsg {
		return fmt.Errorf("the sandbox's configuration is %d bytes, more than %d (too many volumes, images or binds, or too long an environment): %w", len(b), maxMsg, errdefs.ErrInvalidArgument)
	}
	if len(fds) > maxInitFDs {
		return fmt.Errorf("%d mounts, more than %d: %w", len(fds), maxInitFDs, errdefs.ErrInvalidArgument)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		serr = unix.Sendmsg(int(fd), b, oob, nil, 0)
		return serr != unix.EAGAIN
	})
	if err != nil {
		return err
	}
	return serr
}

// recvMsg reads one message and any file descriptors sent with it. The
// host's end of the socket is non-blocking, so a wait parks in Go's
// network poller: serve holds one such wait per running sandbox, which in
// a blocking recvmsg cost a thread each (bench/density.sh: 756 threads
// for 745 sandboxes). The init's end blocks, on its locked main thread.
func recvMsg(f *os.File, v any) ([]int, error) {
	buf := make([]byte, maxMsg+1)
	// Room for the most descriptors one message may carry (maxInitFDs):
	// a template's layers, the disk's, volumes' and image roots' layers.
	oob := make([]byte, unix.CmsgSpace(4*maxInitFDs))
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n, oobn, flags int
	recv := func() error {
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			return rerr != unix.EAGAIN
		}); err != nil {
			return err
		}
		return rerr
	}
	err = recv()
	if err == unix.ECONNRESET {
		// The init exited with one of our messages unread (it failed before
		// reading it). Linux then reports the reset before data the init
		// had already sent, and reporting it clears it: what the init said
		// last (its error) is still there to read.
		err = recv()
	}
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, io.EOF
	}
	var fds []int
	if flags&unix.MSG_CTRUNC != 0 {
		err = fmt.Errorf("descriptors cut off: more than %d sent", maxInitFDs)
	}
	if flags&unix.MSG_TRUNC != 0 || n > maxMsg {
		err = fmt.Errorf("message cut off: more than %d bytes sent", maxMsg)
	}
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if r, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, r...)
			}
		}
	}
	if err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("bad sync message: %w", err)
	}
	return fds, nil
}
