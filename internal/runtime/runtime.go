// Package runtime defines the contract between Hutch's sandbox lifecycle code
// and the backends that isolate sandboxes on a host (native namespaces today;
// gVisor, microVMs or Kubernetes later).
//
// A sandbox's life, whatever the backend:
//
//	Create ──> running ──(first process exits)──> exited ──Delete──> gone
//	           │  ▲  └───────────────Delete (kills everything)───────┘
//	     Freeze│  │Thaw                                              │
//	           ▼  │                                                  │
//	          frozen ─────────────Delete (kills everything)──────────┘
//
// A sandbox is independent of the process that created it: the creator may
// exit and a later process finds the sandbox again with Runtime.Load. Only
// the creator holds the first process's standard streams.
//
// What a backend can do beyond this contract depends on the backend and on
// the host: Runtime.Capabilities reports it, and optional abilities are
// interfaces of their own (Checkpointer), found by type assertion as
// net/http's Hijacker is. The lifecycle asks; it never assumes.
package runtime

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Runtime creates and finds sandboxes. Implementations are safe for
// concurrent use, also by several processes sharing one state directory.
type Runtime interface {
	// Create makes a new sandbox and starts spec.Process in it as its first
	// process. It returns once that process runs, or with an error after
	// undoing everything it had set up.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Load finds an existing sandbox by id; errdefs.ErrNotFound if none.
	Load(ctx context.Context, id string) (Sandbox, error)
	// List reports every sandbox the runtime knows, running or exited.
	List(ctx context.Context) ([]Status, error)
	// Capabilities reports what the backend can do on this host. It may
	// probe the host (run a tool, read the cgroup file systems) the first
	// time; it never fails: what it cannot find out it reports as
	// unavailable, saying why.
	Capabilities(ctx context.Context) Capabilities
}

// Sandbox is a handle on one sandbox. Handles are cheap; several may refer
// to the same sandbox.
type Sandbox interface {
	// ID is the sandbox's identifier, unique on this host.
	ID() string
	// Status reports the sandbox's current state.
	Status(ctx context.Context) (Status, error)
	// Wait blocks until the first process has exited and the sandbox's
	// standard streams are drained, then reports how it ended.
	Wait(ctx context.Context) (ExitStatus, error)
	// Signal delivers sig to the first process (through the sandbox's init).
	// A frozen sandbox gets no signal: Signal fails with
	// errdefs.ErrFailedPrecondition and the caller thaws it first. (A
	// signal queued until a thaw would surprise whoever sent it, and
	// freezers disagree on whether SIGKILL waits for the thaw.)
	Signal(ctx context.Context, sig syscall.Signal) error
	// ResizeConsole changes the terminal size of a first process that was
	// started with Process.Terminal; it fails otherwise.
	ResizeConsole(ctx context.Context, size ConsoleSize) error
	// Stats reports the sandbox's resource use, read from its cgroups;
	// cheap enough to call every few seconds.
	Stats(ctx context.Context) (Stats, error)
	// DiskUsage reports the size of the sandbox's writable layer and the
	// space it may grow to. It may walk the layer: call it sparingly.
	DiskUsage(ctx context.Context) (DiskUsage, error)
	// Output opens what the first process wrote when it was started with
	// none of Stdin, Stdout and Stderr set (its log, for a daemon);
	// errdefs.ErrNotFound if there is none. The log is read as it is at
	// the time of the call and may grow afterwards.
	Output(ctx context.Context) (OutputLog, error)
	// Freeze stops every process of the sandbox at once, the sandbox's own
	// init and daemon (envd) included, and returns when none can run any
	// more; Status then reports StateFrozen. The processes keep their
	// memory, descriptors and connections; the kernel still accepts
	// connections to their listening sockets, which nobody answers until
	// Thaw, so whoever routes requests to a sandbox must refuse them for a
	// frozen one (with errdefs.ErrFailedPrecondition) rather than wait.
	// Time goes on: a thawed process sees how long it was frozen, and its
	// timers that expired meanwhile fire at once.
	//
	// Freezing a frozen sandbox does nothing. Freezing an exited one fails
	// with errdefs.ErrFailedPrecondition. A backend that cannot freeze on
	// this host fails with errdefs.ErrNotImplemented, as
	// Capabilities().Freeze says beforehand. Stats, DiskUsage, Output,
	// ResizeConsole, CaptureLayer and Delete work on a frozen sandbox.
	//
	// Freeze is part of every Sandbox, not an optional interface, because
	// every backend has one (a cgroup freezer, runsc pause, a VM's vCPUs
	// stopped): only a host may lack it.
	Freeze(ctx context.Context) error
	// Thaw resumes the processes Freeze stopped, all at once. Thawing a
	// sandbox that is not frozen (running or exited) does nothing.
	Thaw(ctx context.Context) error
	// CaptureLayer writes the sandbox's writable layer, what it changed
	// over its template, to w as one uncompressed tar stream in the OCI
	// image layer format: a deleted path is an empty ".wh.NAME" entry
	// beside where it was, a directory that replaced the template's holds a
	// ".wh..wh..opq" entry, and owners are the uids and gids the files have
	// inside the sandbox. Entries are named relative to the root ("etc/",
	// "etc/hosts"), parents before children. The layer includes what the
	// runtime itself writes at start (/etc/hostname, /etc/hosts,
	// /etc/resolv.conf).
	//
	// Only a frozen or exited sandbox has a layer that holds still: on a
	// running one CaptureLayer fails with errdefs.ErrFailedPrecondition.
	// The caller must not thaw the sandbox before CaptureLayer returns.
	// When it fails, part of the stream may already have been written.
	CaptureLayer(ctx context.Context, w io.Writer) error
	// Delete kills every process of the sandbox, frozen or not, and removes
	// everything the sandbox owns on the host (cgroups, mounts, writable
	// layer, state). It never touches anything outside the sandbox's own
	// directory and cgroups. Deleting a sandbox that is already gone
	// returns errdefs.ErrNotFound.
	Delete(ctx context.Context) error
}

// Capabilities is what a backend can do on one host. The zero value claims
// nothing.
type Capabilities struct {
	// KeepsMemoryAcrossRestart is true when a sandbox's processes, and so
	// their memory, live on when the process that made them (hutch serve)
	// exits or restarts: a new one finds them running with Runtime.Load.
	// Memory never outlives the host's own restart this way; that takes
	// Checkpoint.
	KeepsMemoryAcrossRestart bool
	// LayerAfterExit is true when an exited sandbox keeps its writable
	// layer until Delete, so CaptureLayer works on it; otherwise
	// CaptureLayer of an exited sandbox fails with
	// errdefs.ErrFailedPrecondition (gVisor's layer lives in its sentry,
	// which ends with the first process).
	LayerAfterExit bool
	// Freeze tells whether Sandbox.Freeze works here.
	Freeze Feature
	// Checkpoint tells whether the Runtime implements Checkpointer and
	// that works here. A Runtime whose Checkpoint is unavailable may still
	// implement the interface (the code is there, the host lacks a tool).
	Checkpoint Feature
}

// Feature says whether a backend can do one thing on this host.
type Feature struct {
	// Available is true when the backend can do it here.
	Available bool
	// Reason says how it is done when available ("cgroup v2 freezer"),
	// and why not otherwise ("criu is not installed"), in words for an
	// operator: logs, a status page, the error of a refused request.
	Reason string
}

// Checkpointer is implemented by a Runtime that can save a sandbox's
// processes (their memory, registers, descriptors and connections) and its
// writable layer to disk, and make a sandbox from that later, on this host,
// after a restart of the host, or several times over (a fork). It is
// optional: find it by type assertion, then check
// Capabilities().Checkpoint, since the host may lack what it needs.
type Checkpointer interface {
	// Checkpoint saves the running or frozen sandbox id into dir, which
	// must not exist or be empty, and leaves the sandbox as it found it.
	// The sandbox is frozen while it is being saved. What dir holds is the
	// backend's own: only the same backend restores it, on a host with the
	// same kernel and tools. It fails with errdefs.ErrFailedPrecondition
	// for an exited sandbox and errdefs.ErrNotImplemented when the host
	// cannot do it.
	Checkpoint(ctx context.Context, id, dir string) error
	// Restore makes a new sandbox from the checkpoint in dir: its processes
	// go on from where they were saved, with the files they had. spec.ID
	// may differ from the saved sandbox's (a fork), and dir may be restored
	// from any number of times. The first process's standard streams go to
	// the new sandbox's log (Sandbox.Output).
	Restore(ctx context.Context, dir string, spec RestoreSpec) (Sandbox, error)
}

// RestoreSpec says what sandbox a checkpoint becomes.
type RestoreSpec struct {
	// ID is the new sandbox's id; empty picks a fresh random one.
	ID string
	// Runtime names the backend of a Set that made the checkpoint; empty
	// is the Set's default. A single backend ignores it.
	Runtime string
	// Labels are stored with the new sandbox, in place of the saved ones.
	Labels map[string]string
	// ExtraFiles are listening sockets the restored first process serves,
	// as Process.ExtraFiles were for the saved one: as many, in the same
	// order. A sandbox's own sockets are not in its checkpoint (they are
	// the host's); each restore serves new ones.
	ExtraFiles []*os.File
}

// OutputLog is a first process's output as it was when opened: Size
// bytes, read at any offset. Reading at an offset lets a reader take the
// newest lines first, or a few lines, without reading what comes before
// them. The first process may be the sandbox's own code: the log holds
// whatever it wrote. Close releases it.
type OutputLog interface {
	io.ReaderAt
	io.Closer
	// Size is the log's length when it was opened; ReadAt finds nothing
	// past it.
	Size() int64
}

// Spec says what sandbox to make.
type Spec struct {
	// ID is the sandbox id; empty picks a fresh random one.
	ID string
	// Runtime names the backend of a Set to run the sandbox on; empty is
	// the Set's default. A single backend ignores it.
	Runtime string
	// Template names the read-only root filesystem (e.g. "base").
	Template string
	// Hostname inside the sandbox; empty uses the id.
	Hostname string
	// Resources bounds what the sandbox may use.
	Resources Resources
	// NoNewPrivileges sets no_new_privs on every process in the sandbox, so
	// setuid binaries (sudo) gain nothing. Root in a sandbox is never root on
	// the host either way; see docs/runtime.md.
	NoNewPrivileges bool
	// Process is the sandbox's first process.
	Process Process
	// Labels are free-form key/value pairs stored with the sandbox.
	Labels map[string]string
	// Mounts are host directories shown inside the sandbox (volumes), in
	// order, over its root once that is built. A backend that cannot
	// mount them fails Create.
	Mounts []Mount
	// Images are container images' root filesystems shown inside the
	// sandbox, for programs of those images to run chrooted there (the
	// MCP gateway's catalog servers). A backend that cannot show them
	// fails Create with errdefs.ErrNotImplemented.
	Images []ImageRoot
}

// ImageRoot is an image's root filesystem inside a sandbox: the layers of
// an image imported into the template store, merged read-only, under a
// writable layer of the sandbox's own (what a program of the image writes
// stays in the sandbox; the store's layers never change). Its /proc and
// /dev are the sandbox's own, bound in once the sandbox's are masked, so
// a chrooted program sees no more of the kernel than the sandbox does.
type ImageRoot struct {
	// Build is the template build the layers are of. The mount's source
	// names it, which keeps its layers in the store while it is mounted.
	Build string `json:"build"`
	// Layers are the build's layer directories, bottom first.
	Layers []string `json:"layers"`
	// Target is where the sandbox sees the root (see CheckMountTarget).
	Target string `json:"target"`
	// Binds are directories of the sandbox shown inside the root: what a
	// program of the image is given of the sandbox's files.
	Binds []ImageBind `json:"binds,omitempty"`
	// Config, if set, is written beside the root, to Target+".json"
	// (root's, mode 0644): what the image says about running its programs,
	// for the one who runs them.
	Config []byte `json:"config,omitempty"`
}

// Mount is a host directory shown inside a sandbox, read-write unless
// ReadOnly. The sandbox never sees the host path, only Target.
type Mount struct {
	// Source is the directory on the host. Its files' owners are stored
	// as the sandbox sees them (unshifted): the backend maps them into
	// the sandbox's user namespace, so a file uid 1000 writes in one
	// sandbox is owned by 1000 on disk and in every other sandbox that
	// mounts Source. Device files and setuid bits have no effect inside.
	Source string
	// Target is where the sandbox sees it: see CheckMountTarget. Missing
	// directories on the way are made; a component that is a symlink or
	// not a directory fails Create.
	Target   string
	ReadOnly bool
}

// ImageBind is a directory or file of a sandbox (From; a missing one is
// made, as a directory) shown in an image root (at To, a path in the
// image's root, made if missing). No
// component of either may be a symlink; both must be paths
// CheckMountTarget accepts, and From may neither hold an image root nor
// be inside one (CheckImages).
type ImageBind struct {
	From string `json:"from"`
	To   string `json:"to"`
	// ReadOnly shows it read-only.
	ReadOnly bool `json:"readOnly,omitempty"`
}

// MaxBinds bounds the directories shown in a sandbox's image roots
// together, MaxBindPath each path: what a backend's start carries.
const (
	MaxBinds    = 64
	MaxBindPath = 512
)

// CheckImages returns an errdefs.ErrInvalidArgument unless images are
// image roots a backend may show: targets and binds CheckMountTarget
// accepts, no root inside another, no bind of a directory that holds a
// root or lies in one (a server would see another's files).
func CheckImages(images []ImageRoot) error {
	within := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	binds := 0
	for _, img := range images {
		binds += len(img.Binds)
		for _, b := range img.Binds {
			if len(b.From) > MaxBindPath || len(b.To) > MaxBindPath {
				return fmt.Errorf("a path shown in image root %s is longer than %d bytes: %w", img.Target, MaxBindPath, errdefs.ErrInvalidArgument)
			}
			for _, name := range append(strings.Split(b.From, "/"), strings.Split(b.To, "/")...) {
				if len(name) > 255 {
					return fmt.Errorf("a path shown in image root %s has a name longer than 255 bytes: %w", img.Target, errdefs.ErrInvalidArgument)
				}
			}
		}
	}
	if binds > MaxBinds {
		return fmt.Errorf("%d directories shown in image roots, more than %d: %w", binds, MaxBinds, errdefs.ErrInvalidArgument)
	}
	for i, img := range images {
		if err := CheckMountTarget(img.Target); err != nil {
			return err
		}
		t := path.Clean(img.Target)
		for j, other := range images {
			if j != i && within(t, path.Clean(other.Target)) {
				return fmt.Errorf("image root %s is inside image root %s: %w", t, other.Target, errdefs.ErrInvalidArgument)
			}
		}
		for _, b := range img.Binds {
			if err := CheckMountTarget(b.From); err != nil {
				return err
			}
			if err := CheckMountTarget(b.To); err != nil {
				return err
			}
			from := path.Clean(b.From)
			for _, other := range images {
				o := path.Clean(other.Target)
				if within(o, from) || within(from, o) {
					return fmt.Errorf("directory %s shown in image root %s holds or lies in image root %s: %w", from, t, o, errdefs.ErrInvalidArgument)
				}
			}
		}
	}
	return nil
}

// CheckMountTarget returns an errdefs.ErrInvalidArgument unless p may be a
// mount's Target: an absolute, clean path without "..", not / itself, and
// not /proc, /sys or /dev or under them (what the runtime mounts there
// itself, and masks, must stay as it is).
func CheckMountTarget(p string) error {
	bad := func(why string) error {
		return fmt.Errorf("mount path %q %s: %w", p, why, errdefs.ErrInvalidArgument)
	}
	switch {
	case !path.IsAbs(p):
		return bad("is not absolute")
	case strings.ContainsRune(p, 0):
		return bad("contains a NUL byte")
	case slices.Contains(strings.Split(p, "/"), ".."):
		return bad(`contains ".."`)
	}
	c := path.Clean(p)
	if c == "/" {
		return bad("is the root")
	}
	for _, reserved := range []string{"/proc", "/sys", "/dev"} {
		if c == reserved || strings.HasPrefix(c, reserved+"/") {
			return bad("is under " + reserved)
		}
	}
	return nil
}

// Resources are a sandbox's cgroup limits. A zero field means "no limit".
type Resources struct {
	// MemoryBytes caps RAM (swap is capped at the same total).
	MemoryBytes int64
	// CPUs is the CPU quota in cores (0.5 = half a core).
	CPUs float64
	// Pids caps the number of tasks (processes and threads).
	Pids int64
	// DiskBytes caps the sandbox's writable layer: writes past it fail with
	// ENOSPC inside the sandbox. Zero leaves the layer on the host's file
	// system without a limit.
	DiskBytes int64
}

// Stats is a sandbox's use of resources at one moment.
type Stats struct {
	// CPU is the CPU time all of the sandbox's processes have used since
	// it started, all cores together.
	CPU time.Duration
	// MemoryUsed is memory in use, without page cache the kernel can
	// reclaim (as `docker stats` counts it).
	MemoryUsed uint64
	// MemoryCache is page cache charged to the sandbox.
	MemoryCache uint64
	// MemoryLimit is the sandbox's memory cap, 0 when it has none.
	MemoryLimit uint64
	// Pids is the number of tasks (processes and threads).
	Pids uint64
}

// DiskUsage is how much disk a sandbox's writable layer uses.
type DiskUsage struct {
	// Used is the size of the files the sandbox wrote.
	Used uint64
	// Total is the disk limit, or the size of the host file system holding
	// the layer when the sandbox has no limit.
	Total uint64
}

// Process describes a process to run inside a sandbox.
type Process struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH.
	Args []string
	// Env adds or overrides KEY=VALUE entries of the default environment.
	Env []string
	// User is a user name or uid[:gid] from the template's /etc/passwd;
	// empty means the template's default user.
	User string
	// Cwd is the working directory; empty means the user's home.
	Cwd string
	// Terminal runs the process on a pseudo-terminal created inside the
	// sandbox; Stdin and Stdout are then joined to it and Stderr is unused.
	Terminal bool
	// ConsoleSize is the initial terminal size when Terminal is set.
	ConsoleSize ConsoleSize
	// Stdin, Stdout and Stderr are copied to and from the process through
	// pipes, never passed in as host file descriptors. Nil Stdin reads
	// /dev/null. With all three nil the output goes to the sandbox's log.
	// As with os/exec, when Stdout and Stderr are the same comparable
	// writer, at most one goroutine at a time calls its Write.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// ExtraFiles are passed to the process as descriptors 3, 4, ... — on
	// purpose, like systemd's socket activation: a listening socket the host
	// made, so the sandbox serves it without any host path being writable
	// from inside. Nothing else of the host's is ever passed in.
	ExtraFiles []*os.File
}

// SelfExe as Args[0] runs the hutch binary itself inside the sandbox (its
// daemon, envd), executed the same way as the sandbox's init.
const SelfExe = "/proc/self/exe"

// ConsoleSize is a terminal's size in characters.
type ConsoleSize struct {
	Rows, Cols uint16
}

// State is where a sandbox is in its life.
type State string

// The states a sandbox can be in.
const (
	// StateRunning is a sandbox whose first process runs.
	StateRunning State = "running"
	// StateFrozen is a running sandbox stopped by Sandbox.Freeze: its
	// processes exist and hold their memory, but none runs until Thaw.
	StateFrozen State = "frozen"
	// StateExited is a sandbox whose first process has ended; only
	// Delete is left to do.
	StateExited State = "exited"
)

// Status is a snapshot of a sandbox.
type Status struct {
	ID string
	// Runtime names the backend the sandbox runs on ("native",
	// "gvisor").
	Runtime  string
	Template string
	// TemplateID is the template build (its id in the template store).
	TemplateID string
	State      State
	Pid        int // host pid of the sandbox's init; 0 once exited, set while frozen
	Created    time.Time
	Command    []string
	Resources  Resources
	Labels     map[string]string
	Exit       *ExitStatus // set once the first process has exited
}

// ExitStatus tells how a sandbox's first process ended.
type ExitStatus struct {
	// Code is the exit code, or 128+signal when a signal killed it, as a
	// shell reports it.
	Code int `json:"code"`
	// Signal is the signal that killed the process, 0 if it exited.
	Signal syscall.Signal `json:"signal,omitempty"`
	// OOMKilled is true when the kernel killed a process of the sandbox
	// because it reached its memory limit.
	OOMKilled bool `json:"oomKilled,omitempty"`
	// Error is set when the process could not be started at all.
	Error string `json:"error,omitempty"`
}
