package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/passwd"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// DefaultRunsc is where scripts/setup.sh installs the pinned runsc.
const DefaultRunsc = "/usr/local/lib/hutch/runsc"

// Options configure a gVisor Runtime.
type Options struct {
	// DataDir holds sandbox state (under DataDir/gvisor); empty means
	// native.DefaultDataDir.
	DataDir string
	// Templates is the template store sandboxes are made from.
	Templates *template.Store
	// Native lends this backend what both share on a host: the
	// host-wide registry of uid ranges, disk images, validation.
	Native *native.Runtime
	// Runsc is the runsc binary; empty means DefaultRunsc, then "runsc"
	// in PATH.
	Runsc string
	// SandboxBinary is the binary that runs inside sandboxes (their init
	// and envd) and as each sandbox's shim on the host; empty means this
	// one.
	SandboxBinary string
	// Platform is runsc's --platform; empty means systrap (no KVM needed).
	Platform string
}

// Runtime is the gVisor backend. It is safe for concurrent use, and
// several processes may share one DataDir.
type Runtime struct {
	dataDir   string
	templates *template.Store
	native    *native.Runtime
	runsc     string
	binary    string
	platform  string

	capsOnce sync.Once
	caps     runtime.Capabilities

	// imagesDespiteProc, set by tests alone, shows image roots although
	// their /proc cannot hide other uids' processes (errImagesProc), so
	// that the rest of them stays tested.
	imagesDespiteProc bool
}

var (
	_ runtime.Runtime      = (*Runtime)(nil)
	_ runtime.Checkpointer = (*Runtime)(nil)
)

// New returns a gVisor runtime, creating its directories if needed. It
// fails when runsc cannot be found; Capabilities says what works.
func New(opts Options) (*Runtime, error) {
	if opts.Native == nil {
		return nil, errors.New("gvisor: Options.Native is required")
	}
	if opts.DataDir == "" {
		opts.DataDir = native.DefaultDataDir
	}
	if opts.Templates == nil {
		opts.Templates = template.Open("")
	}
	runsc, err := findRunsc(opts.Runsc)
	if err != nil {
		return nil, err
	}
	bin := opts.SandboxBinary
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("gvisor: %w", err)
		}
	}
	abs, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if opts.Platform == "" {
		opts.Platform = "systrap"
	}
	rt := &Runtime{dataDir: abs, templates: opts.Templates, native: opts.Native, runsc: runsc, binary: bin, platform: opts.Platform}
	for _, d := range []string{filepath.Join(abs, "gvisor"), rt.sandboxesDir(), rt.runscRoot()} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	rt.Sweep(context.Background())
	return rt, nil
}

// Sweep removes what runsc keeps of sandboxes this runtime does not know
// any more: state of a create killed before its directory was removed,
// or of a shim killed with its runsc (runsc leaves its own state and
// cgroup directories behind then). A sandbox being made has its
// directory first, so a concurrent Create loses nothing.
func (rt *Runtime) Sweep(ctx context.Context) {
	if sbxs, err := os.ReadDir(rt.sandboxesDir()); err == nil {
		for _, e := range sbxs {
			rt.finishDelete(ctx, e.Name())
		}
	}
	ents, err := os.ReadDir(rt.runscRoot())
	if err != nil {
		return
	}
	for _, e := range ents {
		// runsc's state files are <id>_sandbox:<id>.state and the like.
		id, _, _ := strings.Cut(e.Name(), "_")
		if !native.ValidID(id) {
			continue
		}
		if _, err := os.Stat(rt.sandboxDir(id)); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		rt.runscCmd(ctx, rt.runscRoot(), "delete", "--force", id)
		rt.removeCgroups(id)
	}
	mine := filepath.Dir(strings.TrimPrefix(rt.cgroupsPath("x"), "/"))
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory", "/sys/fs/cgroup"} {
		cgs, _ := os.ReadDir(filepath.Join(root, mine))
		for _, c := range cgs {
			id := strings.TrimSuffix(c.Name(), ".shim")
			if _, err := os.Stat(rt.sandboxDir(id)); c.IsDir() && native.ValidID(id) && errors.Is(err, os.ErrNotExist) {
				rt.removeCgroups(id)
			}
		}
	}
}

// findRunsc returns the runsc to use: want, else the one setup installs,
// else one in PATH.
func findRunsc(want string) (string, error) {
	if want != "" {
		p, err := exec.LookPath(want)
		if err != nil {
			return "", fmt.Errorf("runsc %s: %w", want, errdefs.Mark(err, errdefs.ErrUnavailable))
		}
		return p, nil
	}
	if _, err := os.Stat(DefaultRunsc); err == nil {
		return DefaultRunsc, nil
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		return "", fmt.Errorf("runsc is not installed (scripts/setup.sh builds the pinned one into %s): %w", DefaultRunsc, errdefs.ErrUnavailable)
	}
	return p, nil
}

// Capabilities implements runtime.Runtime. runsc pauses and checkpoints
// wherever it runs; what it needs is probed once.
func (rt *Runtime) Capabilities(ctx context.Context) runtime.Capabilities {
	rt.capsOnce.Do(func() {
		out, err := exec.CommandContext(ctx, rt.runsc, "--version").CombinedOutput()
		if err != nil {
			why := fmt.Sprintf("%s --version failed: %v %s", rt.runsc, err, strings.TrimSpace(string(out)))
			rt.caps = runtime.Capabilities{
				Freeze:     runtime.Feature{Reason: why},
				Checkpoint: runtime.Feature{Reason: why},
			}
			return
		}
		rt.caps = runtime.Capabilities{
			KeepsMemoryAcrossRestart: true,
			Freeze:                   runtime.Feature{Available: true, Reason: "runsc pause"},
			Checkpoint:               runtime.Feature{Available: true, Reason: "runsc checkpoint (the sentry saves its own kernel's state)"},
		}
	})
	return rt.caps
}

// Create implements runtime.Runtime. See boot for how a sandbox is made.
func (rt *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Sandbox, error) {
	if err := native.ValidateSpec(&spec); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(spec.Images) > 0 && !rt.imagesDespiteProc {
		return nil, fmt.Errorf("%w: %w", errImagesProc, errdefs.ErrNotImplemented)
	}
	if spec.Process.Terminal && len(spec.Process.ExtraFiles) > 0 {
		return nil, fmt.Errorf("a first process with a terminal cannot serve extra files on the gvisor runtime: %w", errdefs.ErrInvalidArgument)
	}
	if len(spec.Process.ExtraFiles) > 0 && spec.Process.Stdin != nil {
		return nil, fmt.Errorf("a first process that serves extra files reads no stdin on the gvisor runtime (its stdin is the link): %w", errdefs.ErrInvalidArgument)
	}
	tpl, err := rt.templates.Get(spec.Template)
	if err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = native.NewID()
	}
	if spec.Hostname == "" {
		spec.Hostname = spec.ID
	}
	return rt.boot(ctx, bootSpec{spec: spec, tpl: tplOf(tpl)})
}

// bootSpec is what boot makes: a new sandbox (Create) or one restored
// from a checkpoint (Restore, with checkpoint set and rec the saved
// sandbox's record).
type bootSpec struct {
	spec       runtime.Spec
	tpl        tplInfo
	checkpoint string
	saved      *record
}

// tplInfo is what boot needs of a template.
type tplInfo struct {
	Name, ID, DefaultUser string
	Layers                []string
}

func tplOf(t *template.Template) tplInfo {
	return tplInfo{Name: t.Name, ID: t.ID, DefaultUser: t.DefaultUser, Layers: t.LowerDirs()}
}

// boot makes a sandbox. In order, undoing everything on failure:
//
//	state dir + uid range claim + record
//	a user namespace with the sandbox's id mapping (a process held open
//	  while its namespace is needed)
//	idmapped layers  ──>  lower/<n>, their overlay at rootfs (read only)
//	volumes          ──>  vol/<n>;  the disk image ──> upper
//	image roots      ──>  imglower/<i>/<n>, their overlays at img/<i>
//	                      (writable layers in upper/img/<i>: images.go)
//	bundle/config.json (the OCI spec: user, env, cwd, limits, mounts)
//	the shim (own session, own network namespace), which starts
//	  `runsc run` (or `restore`) with the first process's stdio — or, when
//	  it serves extra files, a link on its stdin — and reports once the
//	  sandbox runs (and its link is up)
func (rt *Runtime) boot(ctx context.Context, b bootSpec) (_ runtime.Sandbox, retErr error) {
	spec := b.spec
	dir := rt.sandboxDir(spec.ID)
	var err error
	// Root's, 0710 to the sandbox's root's group once its ids are known:
	// its volumes and its root are mounted under it on the host, where no
	// other host user may reach them (review 21); runsc's gofer and Sentry,
	// which run as the sandbox's root, may pass through but neither create
	// nor rename anything in it: what the server trusts there (the record,
	// the log) must not be theirs to swap (review 22).
	err = os.Mkdir(dir, 0o700)
	if errors.Is(err, os.ErrExist) && rt.finishDelete(ctx, spec.ID) {
		// A sandbox of this id whose Delete a crash cut short (a pause into
		// a checkpoint deletes its sandbox after answering): finished now.
		err = os.Mkdir(dir, 0o700)
	}
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("sandbox %s: %w", spec.ID, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	var undo cleanup
	defer func() {
		if retErr != nil {
			undo.run()
			if err := ctx.Err(); err != nil && !errors.Is(retErr, err) {
				retErr = fmt.Errorf("create sandbox %s: %w", spec.ID, err)
			}
		}
	}()
	undo.add(func() { os.RemoveAll(dir) })
	var ids native.IDRange
	if b.saved != nil {
		// runsc restores only on the saved sandbox's ids: held, not claimed.
		ids = idRange(b.saved)
		err = rt.native.HoldIDs(ids, dir)
	} else {
		ids, err = rt.native.ClaimIDs(dir)
	}
	if err != nil {
		return nil, err
	}
	undo.add(func() { rt.native.ReleaseIDs(ids, dir) })
	if err := os.Chown(dir, 0, ids.HostID); err != nil {
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	if err := os.Chmod(dir, 0o710); err != nil {
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	rec := &record{
		ID: spec.ID, Template: b.tpl.Name, TemplateID: b.tpl.ID, TemplateLayers: b.tpl.Layers,
		Created: time.Now().UTC(), Slot: ids.Slot, HostID: ids.HostID, IDs: ids.Size,
		Command: spec.Process.Args, Resources: spec.Resources, Labels: spec.Labels, Mounts: spec.Mounts,
		NoNewPrivileges: spec.NoNewPrivileges, Channels: len(spec.Process.ExtraFiles),
		Images: spec.Images,
	}
	if b.saved != nil {
		// A restored sandbox is the saved one, on new ids.
		rec.Template, rec.TemplateID, rec.TemplateLayers = b.saved.Template, b.saved.TemplateID, b.saved.TemplateLayers
		rec.Command, rec.Resources, rec.Mounts, rec.NoNewPrivileges = b.saved.Command, b.saved.Resources, b.saved.Mounts, b.saved.NoNewPrivileges
		rec.RestoredFrom = b.checkpoint
		if spec.Mounts != nil {
			rec.Mounts = spec.Mounts
		}
	}
	if n := len(rec.TemplateLayers); n == 0 || n > native.MaxLayers {
		return nil, fmt.Errorf("template %s has %d layers (1 to %d): %w", rec.Template, n, native.MaxLayers, errdefs.ErrInvalidArgument)
	}
	for _, sub := range []string{"bundle", "lower", "rootfs", "vol", "upper"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o711); err != nil {
			return nil, fmt.Errorf("sandbox dir: %w", err)
		}
	}

	if err := rt.writeRecord(rec); err != nil {
		return nil, err
	}
	undo.add(func() { unmountAll(dir) })
	if err := rt.mountRoot(ctx, dir, spec.Hostname, rec); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	proc, err := resolveProcess(filepath.Join(dir, "rootfs"), b.tpl.DefaultUser, spec.Process, spec.Hostname, b.saved != nil)
	if err != nil {
		return nil, err
	}
	var cfg *specs.Spec
	if b.checkpoint != "" {
		cfg, err = rt.restoreSpec(b.checkpoint, dir, rec)
	} else {
		cfg, err = rt.ociSpec(dir, rec, proc, spec.Hostname)
	}
	if err != nil {
		return nil, err
	}
	if err := writeJSON(filepath.Join(dir, "bundle", "config.json"), cfg); err != nil {
		return nil, err
	}
	sbx, err := rt.startShim(ctx, dir, rec, &spec.Process, b.checkpoint, &undo)
	if err != nil {
		return nil, err
	}
	return sbx, nil
}

// mountRoot builds the sandbox's read-only root and its other mounts in
// the host's mount namespace: each layer idmapped into the sandbox's ids,
// their overlay, volumes, the disk image holding the writable layer, and
// the image roots (mountImages).
func (rt *Runtime) mountRoot(ctx context.Context, dir, hostname string, rec *record) error {
	holder, err := newUserns(rt.binary, rec.HostID, rec.IDs)
	if err != nil {
		return err
	}
	defer holder.close()
	var lowers []string
	for i, l := range rec.TemplateLayers {
		target := filepath.Join(dir, "lower", strconv.Itoa(i))
		if err := attachLayer(l, holder.pid(), target); err != nil {
			return err
		}
		lowers = append([]string{target}, lowers...) // overlayfs lists the top first
	}
	// runsc makes no mount points in a read-only root: a top layer of
	// the sandbox's own holds them (the sandbox binary's, the volumes').
	points := filepath.Join(dir, "points")
	if err := mountPoints(points, hostname, rec); err != nil {
		return err
	}
	lowers = append([]string{points}, lowers...)
	root := filepath.Join(dir, "rootfs")
	if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY|unix.MS_NODEV, "lowerdir="+strings.Join(lowers, ":")); err != nil {
		return fmt.Errorf("root overlay: %w", err)
	}
	for i, m := range rec.Mounts {
		fd, err := native.IDMappedBind(m.Source, holder.pid(), m.ReadOnly)
		if err != nil {
			return err
		}
		target := filepath.Join(dir, "vol", strconv.Itoa(i))
		if err := os.Mkdir(target, 0o711); err != nil {
			unix.Close(fd)
			return err
		}
		if err := attach(fd, target); err != nil {
			return err
		}
	}
	if rec.Resources.DiskBytes > 0 {
		fd, err := rt.native.DiskLayer(filepath.Join(dir, "disk.img"), rec.Resources.DiskBytes, rec.HostID)
		if err != nil {
			return err
		}
		if err := attach(fd, filepath.Join(dir, "upper")); err != nil {
			return err
		}
	}
	return mountImages(dir, holder.pid(), rec)
}

// attachLayer mounts template layer layer at target (made here), its ids
// shifted into the user namespace of process userns.
func attachLayer(layer string, userns int, target string) error {
	fd, err := native.IDMappedTree(layer, userns)
	if err != nil {
		return err
	}
	if err := os.Mkdir(target, 0o711); err != nil {
		unix.Close(fd)
		return err
	}
	return attach(fd, target)
}

// mountPoints makes the layer of the sandbox's mount points in dir: an
// empty file where the sandbox binary goes, a directory for each volume
// and image root (the image's config beside it, root's, 0644: see
// runtime.ImageRoot), and a file in /tmp — runsc mounts a tmpfs of its
// own on an empty /tmp, which would keep /tmp out of the disk limit, the
// layer and checkpoints' files. A directory the template has keeps its owner and
// mode (the top layer's win in an overlay); others belong to the
// sandbox's root.
func mountPoints(dir, hostname string, rec *record) error {
	like := func(p string) (mode uint32, uid, gid int) {
		for i := len(rec.TemplateLayers) - 1; i >= 0; i-- {
			st, err := layerDir(rec.TemplateLayers[i], p)
			if errors.Is(err, unix.ENOENT) {
				continue // not in this layer: a lower one may have it
			}
			if err != nil {
				// A symlink or other non-directory on the way hides the
				// lower layers' entries there, as in the overlay; what it
				// points at (on the host, out of the layer) is never looked
				// at (review 23, F5).
				break
			}
			return st.Mode & 0o7777, int(st.Uid), int(st.Gid)
		}
		return 0o755, 0, 0
	}
	mk := func(p string, file bool, content string, mode os.FileMode) error {
		parts := strings.Split(strings.Trim(p, "/"), "/")
		for i := range parts {
			sub := "/" + strings.Join(parts[:i+1], "/")
			full := filepath.Join(dir, sub)
			if file && i == len(parts)-1 {
				if err := os.WriteFile(full, []byte(content), mode); err != nil {
					return err
				}
				return os.Lchown(full, rec.HostID, rec.HostID)
			}
			if err := os.Mkdir(full, 0o700); err != nil {
				if errors.Is(err, os.ErrExist) {
					continue
				}
				return err
			}
			mode, uid, gid := like(sub)
			if err := os.Lchown(full, rec.HostID+uid, rec.HostID+gid); err != nil {
				return err
			}
			// unix.Chmod: the raw bits, sticky /tmp's 01000 among them.
			if err := unix.Chmod(full, mode); err != nil {
				return err
			}
		}
		return nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	mode, uid, gid := like("/")
	if err := unix.Chmod(dir, mode); err != nil {
		return err
	}
	if err := os.Lchown(dir, rec.HostID+uid, rec.HostID+gid); err != nil {
		return err
	}
	files := []struct {
		path, content string
		mode          os.FileMode
	}{
		{guestBinary, "", 0o755}, {tmpMarker, "", 0o644},
		// What the native runtime writes at start: the sandbox's name
		// resolves (sudo asks), and resolv.conf is the network's to fill.
		{"/etc/hostname", hostname + "\n", 0o644},
		{"/etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname + "\n", 0o644},
		{"/etc/resolv.conf", "", 0o644},
	}
	for _, f := range files {
		if err := mk(f.path, true, f.content, f.mode); err != nil {
			return fmt.Errorf("mount points: %w", err)
		}
	}
	for _, m := range rec.Mounts {
		if err := mk(m.Target, false, "", 0); err != nil {
			return fmt.Errorf("mount points: %w", err)
		}
	}
	for _, img := range rec.Images {
		if err := mk(img.Target, false, "", 0); err != nil {
			return fmt.Errorf("mount points: %w", err)
		}
		if img.Config != nil {
			if err := mk(path.Clean(img.Target)+".json", true, string(img.Config), 0o644); err != nil {
				return fmt.Errorf("image %s: its config: %w", img.Build, err)
			}
		}
	}
	return nil
}

// layerDir stats directory p of a template layer, every component of it
// looked up in the layer and none followed if a symlink (a template's
// symlink, absolute or climbing, would otherwise have the host's root
// stat any host directory and copy its owner and mode into the
// sandbox). It fails with ENOENT when p is not in the layer, ELOOP when a
// component is a symlink, ENOTDIR when one (or p) is not a directory.
func layerDir(layer, p string) (*unix.Stat_t, error) {
	root, err := unix.Open(layer, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, rel(p), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH,
	})
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// tmpMarker keeps /tmp from being empty: see mountPoints.
const tmpMarker = "/tmp/.hutch"

// attach puts the detached mount fd at target and closes fd.
func attach(fd int, target string) error {
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	return nil
}

// unmountAll takes down every mount under dir, deepest first.
func unmountAll(dir string) {
	for _, m := range native.MountsUnder(dir) {
		unix.Unmount(m, unix.MNT_DETACH)
	}
}

// process is the first process, resolved against the sandbox's root on
// the host: runsc is given numbers and absolute paths.
type process struct {
	Args     []string
	Env      []string
	Cwd      string
	UID, GID uint32
	Groups   []uint32
	Terminal bool
	Size     runtime.ConsoleSize
}

// guestBinary is where the sandbox binary is mounted inside a sandbox.
const guestBinary = "/.hutch/hutch-sandbox"

// resolveProcess looks p's user, working directory and command up in the
// sandbox's root, as the native init does inside: errors say what is
// wrong with the request (ErrInvalidArgument, ErrNotFound for a missing
// command). A restored sandbox's first process already runs: only its
// user matters (for nothing), so nothing is checked.
func resolveProcess(root, defaultUser string, p runtime.Process, hostname string, restored bool) (*process, error) {
	if restored {
		return &process{Args: []string{guestBinary}, Cwd: "/"}, nil
	}
	who := p.User
	if who == "" {
		who = defaultUser
	}
	if who == "" {
		who = "root"
	}
	if err := regularFiles(root, "etc/passwd", "etc/group"); err != nil {
		return nil, err
	}
	u, err := passwd.Lookup(root, who)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, err
	}
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + u.Home, "USER=" + u.Name, "LOGNAME=" + u.Name, "SHELL=" + u.Shell,
		"HOSTNAME=" + hostname, "LANG=C.UTF-8",
	}
	if p.Terminal {
		env = append(env, "TERM=xterm-256color")
	}
	env = native.MergeEnv(env, p.Env)
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cwd := p.Cwd
	if cwd == "" {
		cwd = u.Home
		if fi, err := r.Stat(rel(cwd)); err != nil || !fi.IsDir() {
			cwd = "/"
		}
	} else if fi, err := r.Stat(rel(cwd)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("working directory %s does not exist in the sandbox: %w", cwd, errdefs.ErrInvalidArgument)
	}
	args := append([]string(nil), p.Args...)
	if args[0] == runtime.SelfExe {
		args[0] = guestBinary
	} else {
		if args[0], err = lookPath(r, args[0], native.EnvValue(env, "PATH")); err != nil {
			return nil, err
		}
	}
	size := p.ConsoleSize
	if p.Terminal && (size.Rows == 0 || size.Cols == 0) {
		size = runtime.ConsoleSize{Rows: 24, Cols: 80}
	}
	return &process{Args: args, Env: env, Cwd: cwd, UID: u.UID, GID: u.GID, Groups: u.Groups, Terminal: p.Terminal, Size: size}, nil
}

// regularFiles checks that the root's files, which the host reads
// (passwd.Lookup), are small regular files: a template is anyone's
// image, and its /etc/passwd could be a symlink out of it, or a FIFO.
func regularFiles(root string, names ...string) error {
	for _, n := range names {
		fi, err := os.Lstat(filepath.Join(root, n))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() || fi.Size() > 4<<20 {
			return fmt.Errorf("the template's /%s is not a regular file of at most 4 MiB: %w", n, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// rel is an absolute sandbox path as os.Root wants it.
func rel(p string) string {
	p = strings.TrimLeft(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

// lookPath finds file in the sandbox's PATH as a shell would.
func lookPath(r *os.Root, file, pathEnv string) (string, error) {
	check := func(p string) error {
		fi, err := r.Stat(rel(p))
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fs.ErrPermission
		}
		return nil
	}
	if strings.Contains(file, "/") {
		p := file
		if !path.IsAbs(p) {
			p = "/" + p
		}
		if err := check(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("exec: %q: no such file or directory: %w", file, errdefs.ErrNotFound)
			}
			return "", fmt.Errorf("exec: %q: %v: %w", file, err, errdefs.ErrInvalidArgument)
		}
		return p, nil
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if !path.IsAbs(d) {
			continue
		}
		p := path.Join(d, file)
		if check(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH: %w", file, errdefs.ErrNotFound)
}

func writeJSON(p string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o600)
}

// Load implements runtime.Runtime.
func (rt *Runtime) Load(ctx context.Context, id string) (runtime.Sandbox, error) {
	rec, err := rt.readRecord(id)
	if err != nil {
		return nil, err
	}
	return &sandbox{rt: rt, id: id, dir: rt.sandboxDir(id), rec: rec}, nil
}

// List implements runtime.Runtime.
func (rt *Runtime) List(ctx context.Context) ([]runtime.Status, error) {
	ents, err := os.ReadDir(rt.sandboxesDir())
	if err != nil {
		return nil, err
	}
	var out []runtime.Status
	for _, e := range ents {
		rec, err := rt.readRecord(e.Name())
		if err != nil {
			continue // being made or removed
		}
		out = append(out, rt.status(rec))
	}
	return out, nil
}

// status is what rec's sandbox is now.
func (rt *Runtime) status(rec *record) runtime.Status {
	dir := rt.sandboxDir(rec.ID)
	st := runtime.Status{
		ID: rec.ID, Template: rec.Template, TemplateID: rec.TemplateID, Created: rec.Created,
		Command: rec.Command, Resources: rec.Resources, Labels: rec.Labels, State: runtime.StateExited,
		Runtime: Name,
	}
	if shimAlive(rec) {
		st.State, st.Pid = runtime.StateRunning, rec.ShimPid
		if _, err := os.Stat(filepath.Join(dir, "frozen")); err == nil {
			st.State = runtime.StateFrozen
		}
		return st
	}
	st.Exit = readExit(dir)
	if st.Exit == nil {
		// The shim died without a word (killed): runsc with it, or it is
		// killed by Delete.
		st.Exit = &runtime.ExitStatus{Code: 128 + 9, Signal: 9, Error: "the sandbox's shim is gone"}
	}
	return st
}

// Name is this backend's name, in Status.Runtime and `--runtime`.
const Name = "gvisor"

// cleanup undoes a partly made sandbox in reverse order.
type cleanup struct{ fns []func() }

func (c *cleanup) add(f func()) { c.fns = append(c.fns, f) }
func (c *cleanup) run() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
}
