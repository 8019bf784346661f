// Package native is Hutch's default runtime backend: sandboxes made directly
// from Linux namespaces (user, pid, mount, uts, ipc, net, cgroup), cgroup
// limits (v1, v2 or hybrid), an overlay root over an idmapped read-only
// template, a seccomp filter and a bounded capability set.
//
// Each sandbox's PID 1 is this same binary re-executed from a sealed memfd
// (see Init). It finishes the sandbox's set-up from the inside, starts the
// first process, reaps zombies and forwards signals. Hutch writes this
// launcher itself rather than using runc's libcontainer because a start in
// libcontainer costs ~60 ms here against a few for a direct clone; the parts
// that libraries do well (cgroups, seccomp assembly, ptys) come from them.
package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// DefaultDataDir is where sandboxes' state lives unless told otherwise.
const DefaultDataDir = "/var/lib/hutch"

// Limits below which a sandbox cannot even run its init.
const (
	minMemory = 16 << 20
	minPids   = 16
)

// Options configure a native Runtime.
type Options struct {
	// DataDir holds sandbox state; empty means DefaultDataDir.
	DataDir string
	// Templates is the template store sandboxes are made from.
	Templates *template.Store
	// SandboxBinary is the binary sandboxes' init and envd run
	// (FindSandboxBinary finds it); empty means this one. It is checked
	// again when first used: one not built from this binary's source is
	// not used.
	SandboxBinary string
	// Faults are the fault points armed (a test hook, package fault).
	Faults fault.Points
}

// Runtime is the native backend. It is safe for concurrent use, and several
// processes may share one DataDir.
type Runtime struct {
	dataDir   string
	templates *template.Store
	// uidRegistry and subIDFiles: see uids.go (tests point them elsewhere).
	uidRegistry string
	subIDFiles  []string

	sandboxBin string
	selfOnce   sync.Once
	self       *os.File // the binary inits run, unreachable and read-only; see selfExe
	selfErr    error
	selfStat   unix.Stat_t // of self when it is the sandbox binary, as checked

	// criu is the CRIU program Capabilities looks for (tests point it
	// elsewhere); criuReport is what it found, once found (criuMu).
	criu       string
	criuMu     sync.Mutex
	criuReport string

	// disks are the blank file systems sandboxes' disk images are copied
	// from, by size, opened once (diskMu); see diskLayer.
	diskMu sync.Mutex
	disks  map[int64]*os.File

	faults fault.Points // see Options.Faults
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a native runtime, creating its directories if needed.
func New(opts Options) (*Runtime, error) {
	if opts.DataDir == "" {
		opts.DataDir = DefaultDataDir
	}
	if opts.Templates == nil {
		opts.Templates = template.Open("")
	}
	if err := ensureCgroupMounts(); err != nil {
		return nil, fmt.Errorf("cgroups: %w", err)
	}
	abs, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	rt := &Runtime{dataDir: abs, templates: opts.Templates, sandboxBin: opts.SandboxBinary, faults: opts.Faults, uidRegistry: UIDRegistry, subIDFiles: subIDFiles, criu: "criu"}
	rt.adoptLegacyClaims()
	// 0711: sandboxes' own uids must traverse to their layers, never list them.
	for _, d := range []string{rt.dataDir, filepath.Join(rt.dataDir, "sandboxes"), filepath.Join(rt.dataDir, "empty")} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	// MkdirAll leaves a directory that exists as it is (mktemp -d makes
	// 0700). Those above the data dir are checked at each Create.
	if err := openToSandboxes(rt.dataDir, filepath.Join(rt.dataDir, "sandboxes")); err != nil {
		return nil, err
	}
	return rt, nil
}

// DataDir is the runtime's state directory.
func (rt *Runtime) DataDir() string { return rt.dataDir }

// Reachable reports why sandboxes cannot reach their files in the data
// dir, nil when they can: a directory above it that other users may not
// pass through (New opens the data dir itself to them). Create fails with
// this error (it wraps errdefs.ErrUnavailable) while it lasts; `hutch
// serve` refuses to start with it.
func (rt *Runtime) Reachable() error { return reachable(rt.dataDir) }

// selfExe returns the binary sandboxes' inits are executed from: the
// sandbox binary when it is set and built from this binary's source,
// this binary otherwise (see sandboxExe).
func (rt *Runtime) selfExe() (*os.File, error) {
	rt.selfOnce.Do(func() {
		empty := filepath.Join(rt.dataDir, "empty")
		if rt.sandboxBin != "" {
			f, err := sandboxExe(rt.sandboxBin, empty)
			if err == nil && sandboxBinaryMatches(f) == nil && unix.Fstat(int(f.Fd()), &rt.selfStat) == nil {
				rt.self = f
				return
			}
			if f != nil {
				f.Close()
			}
		}
		rt.self, rt.selfErr = sandboxExe("", empty)
	})
	if rt.selfErr == nil && rt.selfStat.Ino != 0 {
		// The overlay view is of the file itself: written in place since
		// it was checked (cp, not a rename), it is no longer what was
		// checked, and its running copies have died already.
		var now unix.Stat_t
		if err := unix.Fstat(int(rt.self.Fd()), &now); err != nil || now.Size != rt.selfStat.Size ||
			now.Mtim != rt.selfStat.Mtim || now.Ctim != rt.selfStat.Ctim {
			return nil, fmt.Errorf("%s was changed in place since this hutch checked it (install it by renaming a new file over it) and restart hutch: %w",
				rt.sandboxBin, errdefs.ErrUnavailable)
		}
	}
	return rt.self, rt.selfErr
}

// ValidateSpec checks spec as Create does before it makes anything: what
// every backend refuses (a bad id, limits below what an init needs,
// malformed environment, relative paths), as errdefs.ErrInvalidArgument.
func ValidateSpec(spec *runtime.Spec) error { return validateSpec(spec) }

func validateSpec(spec *runtime.Spec) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, errdefs.ErrInvalidArgument)...)
	}
	if spec.ID != "" && !validID(spec.ID) {
		return bad("sandbox id %q must be 3-63 lowercase letters, digits or dashes", spec.ID)
	}
	if len(spec.Process.Args) == 0 || spec.Process.Args[0] == "" {
		return bad("no command given")
	}
	r := spec.Resources
	switch {
	case r.MemoryBytes < 0 || (r.MemoryBytes > 0 && r.MemoryBytes < minMemory):
		return bad("memory limit %d bytes is below the minimum of %d MiB", r.MemoryBytes, minMemory>>20)
	case r.CPUs < 0 || (r.CPUs > 0 && r.CPUs < 0.01):
		return bad("cpu limit %g is below the minimum of 0.01", r.CPUs)
	case r.CPUs > float64(numCPU()):
		return bad("cpu limit %g exceeds the host's %d CPUs", r.CPUs, numCPU())
	case r.Pids < 0 || (r.Pids > 0 && r.Pids < minPids):
		return bad("pids limit %d is below the minimum of %d", r.Pids, minPids)
	case r.DiskBytes < 0 || (r.DiskBytes > 0 && r.DiskBytes < minDisk):
		return bad("disk limit %d bytes is below the minimum of %d MiB", r.DiskBytes, minDisk>>20)
	}
	for _, e := range spec.Process.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return bad("environment entry %q is not KEY=VALUE", e)
		}
	}
	if spec.Process.Cwd != "" && !filepath.IsAbs(spec.Process.Cwd) {
		return bad("working directory %q is not absolute", spec.Process.Cwd)
	}
	for _, m := range spec.Mounts {
		if err := runtime.CheckMountTarget(m.Target); err != nil {
			return err
		}
		if !filepath.IsAbs(m.Source) {
			return bad("mount source %q is not absolute", m.Source)
		}
	}
	if err := runtime.CheckImages(spec.Images); err != nil {
		return err
	}
	// Every layer is a descriptor in the one message to the init (see
	// maxInitFDs; review 31, F4).
	layers := 0
	for _, img := range spec.Images {
		layers += len(img.Layers)
		if n := len(img.Layers); n == 0 || n > MaxLayers {
			return bad("image %s has %d layers (1 to %d)", img.Build, n, MaxLayers)
		}
		if len(img.Config) > MaxImageConfig {
			return bad("image %s's config is %d bytes (at most %d)", img.Build, len(img.Config), MaxImageConfig)
		}
		for _, l := range img.Layers {
			if !filepath.IsAbs(l) {
				return bad("image layer %q is not absolute", l)
			}
		}
	}
	if layers > MaxImageLayers || len(spec.Mounts) > maxMounts {
		return bad("%d image layers and %d volumes: at most %d and %d", layers, len(spec.Mounts), MaxImageLayers, maxMounts)
	}
	return nil
}

func numCPU() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil {
		return set.Count()
	}
	return 1
}

// Create implements runtime.Runtime.
//
// What the parent (this process) and the sandbox's init say to each other,
// over a SOCK_SEQPACKET pair (fd 3 in the init); each line is one message:
//
//	parent                                   init (pid 1 in new namespaces)
//	clone(user,pid,mnt,uts,ipc,net); Go
//	writes uid_map/gid_map before exec ──►   starts, blocks reading fd 3
//	idmapped template mount [, disk layer]
//	initConfig + [mount fds] ─────────────►  overlay, /proc, /dev, pivot_root,
//	join cgroups (meanwhile)                 hostname, lo; then waits
//	{joined} ─────────────────────────────►  cgroupns, caps, seccomp, exec
//	                                ◄─────── {started, pid} [+ pty master fd]
//	                                         ... reaps, forwards signals ...
//	                                ◄─────── {exited, status}; init exits and
//	                                         the kernel kills the pid namespace
//
// Any failure inside the init arrives as {error}; the parent then undoes
// everything (cleanup guard below) and returns it.
func (rt *Runtime) Create(ctx context.Context, spec runtime.Spec) (_ runtime.Sandbox, retErr error) {
	if err := validateSpec(&spec); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := rt.Reachable(); err != nil {
		return nil, err
	}
	tpl, err := rt.templates.Get(spec.Template)
	if err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = newID()
	}
	if spec.Hostname == "" {
		spec.Hostname = spec.ID
	}
	dir := rt.sandboxDir(spec.ID)
	if err := os.Mkdir(dir, 0o711); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("sandbox %s: %w", spec.ID, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	var undo cleanup
	defer func() {
		if retErr != nil {
			undo.run()
			// Whatever broke after ctx ended (a killed init, a broken pipe)
			// was caused by that.
			if err := ctx.Err(); err != nil && !errors.Is(retErr, err) {
				retErr = fmt.Errorf("create sandbox %s: %w", spec.ID, err)
			}
		}
	}()
	undo.add(func() { os.RemoveAll(dir) })
	// A first record before anything is claimed: a crash from here on
	// leaves a sandbox that lists (set-up not finished) and that a
	// restart or `hutch rm` removes, not a directory no list shows,
	// holding a uid claim for good (the soak's SIGQUIT run, issue 23).
	early := &record{ID: spec.ID, Template: tpl.Name, TemplateID: tpl.ID, Created: time.Now().UTC(),
		Slot: unclaimedSlot, Command: spec.Process.Args, Labels: spec.Labels}
	if err := rt.writeRecord(early); err != nil {
		return nil, err
	}

	slot, err := rt.claimSlot(spec.ID)
	if err != nil {
		return nil, err
	}
	undo.add(func() { rt.releaseSlot(slot, spec.ID) })
	rt.faults.At(fault.NativeCreateClaimed)
	rec := &record{
		ID: spec.ID, Template: tpl.Name, TemplateID: tpl.ID, TemplateLayers: tpl.LowerDirs(), Created: time.Now().UTC(),
		Slot: slot, Command: spec.Process.Args, Resources: spec.Resources, Labels: spec.Labels,
		NoNewPrivileges: spec.NoNewPrivileges,
	}
	hostID := rec.hostUID()
	if n := len(rec.TemplateLayers); n == 0 || n > MaxLayers {
		return nil, fmt.Errorf("template %s has %d layers (1 to %d): %w", tpl.Name, n, MaxLayers, errdefs.ErrInvalidArgument)
	}
	nfd := len(rec.TemplateLayers) + 1 + len(spec.Mounts)
	for _, img := range spec.Images {
		nfd += len(img.Layers)
	}
	if nfd > maxInitFDs {
		return nil, fmt.Errorf("template %s's %d layers, %d volumes and %d images' layers: more than a sandbox's %d mounts: %w", tpl.Name, len(rec.TemplateLayers), len(spec.Mounts), nfd-1-len(rec.TemplateLayers)-len(spec.Mounts), maxInitFDs, errdefs.ErrInvalidArgument)
	}
	subs := []string{"lower", "rootfs", "upper", "work", "disk", "img", "imglower"}
	for i := range rec.TemplateLayers {
		subs = append(subs, filepath.Join("lower", strconv.Itoa(i)))
	}
	for i, img := range spec.Images {
		subs = append(subs, imageLower(i, -1))
		for j := range img.Layers {
			subs = append(subs, imageLower(i, j))
		}
	}
	for _, sub := range subs {
		p := filepath.Join(dir, sub)
		if err := os.Mkdir(p, 0o755); err != nil {
			return nil, fmt.Errorf("sandbox dir: %w", err)
		}
		// The images' writable layers go in img/ (or on the disk layer).
		if sub == "upper" || sub == "work" || sub == "img" {
			if err := os.Chown(p, hostID, hostID); err != nil {
				return nil, fmt.Errorf("sandbox dir: %w", err)
			}
		}
	}

	cg, err := sandboxCgroup(spec.ID, spec.Resources)
	if err != nil {
		return nil, err
	}
	undo.add(func() { destroyCgroup(cg) })
	rec.CgroupPaths = cg.GetPaths()
	// The record exists before any process does, so a crash from here on
	// leaves something `hutch rm` can find and clean.
	if err := rt.writeRecord(rec); err != nil {
		return nil, err
	}
	rt.faults.At(fault.NativeCreateRecorded)

	self, err := rt.selfExe()
	if err != nil {
		return nil, err
	}
	exitFile, err := os.OpenFile(filepath.Join(dir, "exit.json"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("exit file: %w", err)
	}
	defer exitFile.Close()
	sio, err := newStdio(&spec.Process, dir, hostID)
	if err != nil {
		return nil, err
	}
	defer sio.closeChildEnds() // if StartProcess is never reached
	undo.add(sio.closeParentEnds)

	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	// The host's end does not block: waits on it park in Go's poller
	// (recvMsg). The init's end blocks.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	sock := os.NewFile(uintptr(fds[0]), "sync")
	child := os.NewFile(uintptr(fds[1]), "sync-init")
	defer child.Close()
	undo.add(func() { sock.Close() })

	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	// syscall.StartProcess rather than os/exec: the latter's first use in a
	// process forks a throwaway child to probe for pidfd support, which
	// costs as much as starting the init itself.
	attr := &syscall.ProcAttr{
		// The init gets no environment from the host: nothing to leak.
		Env: []string{"GOMAXPROCS=1", "GOGC=50", envExtraFiles + "=" + strconv.Itoa(len(spec.Process.ExtraFiles))},
		Files: []uintptr{devNull.Fd(), devNull.Fd(), devNull.Fd(), // the init's own stdio
			child.Fd(), sio.childIn.Fd(), sio.childOut.Fd(), sio.childErr.Fd(), exitFile.Fd()}, // fds 3..7
		Sys: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: uidRange}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: uidRange}},
			GidMappingsEnableSetgroups: true,
			// Become root of the new namespace (host uid hostID) before exec,
			// or exec would drop every capability in it.
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			// Own session: the sandbox outlives its creator and ignores the
			// creator's terminal signals.
			Setsid: true,
		},
	}
	for _, f := range spec.Process.ExtraFiles { // fds 8...
		attr.Files = append(attr.Files, f.Fd())
	}
	// The binary is executed as /proc/self/fd/N, which the child resolves
	// after its descriptors were laid out: N must be one of its own. It is
	// the last, which the init closes first thing (past its extra files).
	// (Naming the parent's descriptor worked only while its number was
	// above the child's: under `ip netns exec` it was 7, the exit file.)
	attr.Files = append(attr.Files, self.Fd())
	exe := "/proc/self/fd/" + strconv.Itoa(len(attr.Files)-1)
	pid, err := startAsOwner(hostID, func() (int, error) {
		pid, _, err := syscall.StartProcess(exe, []string{initArg0}, attr)
		return pid, err
	})
	// The init has its own copies now. Ours must go at once: the sync
	// socket reports EOF, and output pipes end, only when no copy is left.
	child.Close()
	sio.closeChildEnds()
	if err != nil {
		return nil, fmt.Errorf("start sandbox init: %w", err)
	}
	initProc := &initProcess{pid: pid}
	undo.add(func() {
		unix.Kill(pid, unix.SIGKILL)
		initProc.wait()
	})
	// Set-up is bounded by ctx: killing the init ends every wait below.
	stop := context.AfterFunc(ctx, func() { unix.Kill(pid, unix.SIGKILL) })
	defer stop()
	// Record the init at once, so that whatever happens to this process
	// from here on, `hutch rm` can find the init and kill it.
	rec.Pid = pid
	if rec.PidStart, err = processStartTime(pid); err != nil {
		return nil, fmt.Errorf("sandbox init: %w", err)
	}
	if err := rt.writeRecord(rec); err != nil {
		return nil, err
	}
	rt.faults.At(fault.NativeCreateInit)
	var mounts []int
	defer func() {
		for _, fd := range mounts {
			unix.Close(fd)
		}
	}()
	for _, l := range rec.TemplateLayers {
		tfd, err := idmappedTree(l, pid)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, tfd)
	}
	if spec.Resources.DiskBytes > 0 {
		dfd, err := rt.diskLayer(filepath.Join(dir, "disk.img"), spec.Resources.DiskBytes, hostID)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, dfd)
	}
	var targets []string
	for _, m := range spec.Mounts {
		vfd, err := idmappedBind(m.Source, pid, m.ReadOnly)
		if err != nil {
			return nil, err
		}
		mounts = append(mounts, vfd)
		targets = append(targets, m.Target)
	}
	var images []imageConfig
	for _, img := range spec.Images {
		for _, l := range img.Layers {
			fd, err := idmappedTree(l, pid)
			if err != nil {
				return nil, fmt.Errorf("image %s: %w", img.Build, err)
			}
			mounts = append(mounts, fd)
		}
		if img.Config != nil {
			// A file beside the layers' mount points, read by the init:
			// configs would swell its one message past what a socket takes.
			if err := os.WriteFile(filepath.Join(dir, imageLower(len(images), -1)+".json"), img.Config, 0o644); err != nil {
				return nil, fmt.Errorf("image %s: %w", img.Build, err)
			}
		}
		images = append(images, imageConfig{Build: img.Build, Layers: len(img.Layers), Target: img.Target, Config: img.Config != nil, Binds: img.Binds})
	}
	cfg := initConfig{
		ID: spec.ID, Hostname: spec.Hostname, Dir: dir, Mounts: targets, Images: images,
		DefaultUser: tpl.DefaultUser, NoNewPrivileges: spec.NoNewPrivileges,
		Layers: len(rec.TemplateLayers), TemplateID: tpl.ID, Disk: spec.Resources.DiskBytes > 0,
		Args: spec.Process.Args, Env: spec.Process.Env, User: spec.Process.User, Cwd: spec.Process.Cwd,
		Terminal: spec.Process.Terminal, Rows: spec.Process.ConsoleSize.Rows, Cols: spec.Process.ConsoleSize.Cols,
		Log: sio.log, SocketBudget: sockBudget(spec.Resources.MemoryBytes),
	}
	if err := sendMsg(sock, cfg, mounts...); err != nil {
		return nil, fmt.Errorf("configure sandbox init: %w", err)
	}
	// Creating cgroups and moving a task between them costs milliseconds
	// (on v1, an RCU grace period per hierarchy); the init builds its root
	// meanwhile and waits for msgJoined before anything runs under the
	// sandbox's limits.
	if err := joinCgroup(cg, pid); err != nil {
		return nil, err
	}
	// If the init has already failed this send fails too, but its error
	// message waits on the socket: the receive below reports it.
	_ = sendMsg(sock, initMsg{Type: msgJoined})
	var started initMsg
	pfds, err := recvMsg(sock, &started)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sandbox init: %w", ctx.Err())
		}
		return nil, fmt.Errorf("sandbox init: %w", initDied(initProc, err))
	}
	if started.Type == msgError {
		return nil, &initError{msg: started.Error, class: errorClass(started.Class)}
	}
	if started.Type != msgStarted {
		return nil, fmt.Errorf("sandbox init: unexpected message %q", started.Type)
	}
	if !stop() {
		for _, fd := range pfds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("sandbox init: %w", ctx.Err())
	}
	s := &sandbox{rt: rt, id: spec.ID, init: initProc, sock: sock, done: make(chan struct{})}
	if spec.Process.Terminal {
		if len(pfds) != 1 {
			return nil, errors.New("sandbox init: no console received")
		}
		s.console = os.NewFile(uintptr(pfds[0]), "console")
		sio.attachConsole(s.console, &spec.Process)
	}
	sio.start()
	go s.watch(sio)
	return s, nil
}

// IDMappedTree returns a detached read-only mount (a descriptor for
// move_mount) of dir whose ids are shifted into the user namespace of
// process pid, as a template's layers are for a native sandbox: another
// backend (gVisor) serves its sandboxes the same template this way.
func IDMappedTree(dir string, pid int) (int, error) { return idmappedTree(dir, pid) }

// IDMappedBind is idmappedBind (a volume's mount) for another backend.
func IDMappedBind(dir string, pid int, readOnly bool) (int, error) {
	return idmappedBind(dir, pid, readOnly)
}

// idmappedTree returns a detached mount of rootfs whose ids are shifted
// into the user namespace of process pid: the template on disk stays owned
// by real root, while inside the sandbox its files belong to root and user.
func idmappedTree(rootfs string, pid int) (int, error) {
	userns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(userns)
	fd, err := unix.OpenTree(unix.AT_FDCWD, rootfs, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", rootfs, err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmap template (needs Linux 5.12+ and a filesystem that supports idmapped mounts): %w", err)
	}
	return fd, nil
}

// idmappedBind returns a detached mount of the host directory dir (a
// volume), writable unless readOnly, whose ids are shifted into the user
// namespace of process pid as the template's are: a file the sandbox's
// uid 1000 writes is owned by 1000 on disk, whichever sandbox wrote it.
// Devices and setuid bits do nothing through it. Mounts below dir on the
// host are not carried along.
func idmappedBind(dir string, pid int, readOnly bool) (int, error) {
	userns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open sandbox user namespace: %w", err)
	}
	defer unix.Close(userns)
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", dir, err)
	}
	set := uint64(unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID)
	if readOnly {
		set |= unix.MOUNT_ATTR_RDONLY
	}
	attr := &unix.MountAttr{Attr_set: set, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmap mount %s (needs a filesystem that supports idmapped mounts): %w", dir, err)
	}
	return fd, nil
}

// cleanup undoes a partly made sandbox in reverse order (gVisor's cleanup.Make).
type cleanup struct{ fns []func() }

func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }
func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}

// Load implements runtime.Runtime.
func (rt *Runtime) Load(ctx context.Context, id string) (runtime.Sandbox, error) {
	if _, err := rt.readRecord(id); err != nil {
		return nil, err
	}
	return &sandbox{rt: rt, id: id}, nil
}

// List implements runtime.Runtime.
func (rt *Runtime) List(ctx context.Context) ([]runtime.Status, error) {
	ents, err := os.ReadDir(filepath.Join(rt.dataDir, "sandboxes"))
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var out []runtime.Status
	for _, e := range ents {
		rec, err := rt.readRecord(e.Name())
		if err != nil {
			continue // being created or removed right now
		}
		out = append(out, rt.status(rec))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func (rt *Runtime) status(rec *record) runtime.Status {
	st := runtime.Status{
		ID: rec.ID, Template: rec.Template, TemplateID: rec.TemplateID, Created: rec.Created, Command: rec.Command,
		Resources: rec.Resources, Labels: rec.Labels, State: runtime.StateExited, Runtime: Name,
	}
	if fd, _ := openInit(rec); fd >= 0 {
		unix.Close(fd)
		st.State, st.Pid = runtime.StateRunning, rec.Pid
		// A freezer that cannot be read leaves the sandbox running, as it
		// was before anything could freeze it: Status has no error to give.
		if frozen, _ := isFrozen(rec.CgroupPaths); frozen {
			st.State = runtime.StateFrozen
		}
		return st
	}
	st.Exit = rt.readExit(rec.ID)
	switch {
	case st.Exit != nil:
	case rec.Pid == 0:
		// Being created right now, or its creator died half-way.
		st.Exit = &runtime.ExitStatus{Code: 255, Error: "sandbox set-up has not finished"}
	default:
		st.Exit = &runtime.ExitStatus{Code: 255, Error: "sandbox init ended without reporting an exit status"}
	}
	if cg, err := loadCgroup(rec.CgroupPaths); err == nil {
		st.Exit.OOMKilled = oomKilled(cg)
	}
	return st
}

func oomKilled(cg cgroups.Manager) bool {
	n, err := cg.OOMKillCount()
	return err == nil && n > 0
}

// MaxImageLayers bounds the layers of a sandbox's image roots together,
// maxMounts its volumes: each is a descriptor in the init's one
// configuration message, which carries at most maxInitFDs (the kernel's
// SCM_MAX_FD) with the template's layers and the disk's. MaxImageConfig
// bounds each image's config (a file the init reads, not the message).
const (
	MaxImageLayers = 96
	maxMounts      = 32
	maxInitFDs     = 253
	MaxImageConfig = 64 << 10
)

// MaxLayers is the most layers a template may stack: each is an overlay
// lower directory and a descriptor in the message to the init (the
// kernel allows 500 lower directories and 253 descriptors per message).
// The template store flattens deeper stacks.
const MaxLayers = 128

// Name is this backend's name, in Status.Runtime and `--runtime`.
const Name = "native"
