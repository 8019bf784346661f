package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// Image roots (runtime.ImageRoot) on gVisor, in two halves:
//
//   - On the host (mountImages), as the native backend does inside: each
//     image's layers idmapped into the sandbox's ids at imglower/<i>/<j>,
//     merged by the host's overlayfs at img/<i> under a writable layer in
//     upper/img/<i> (the sandbox's disk when it has a limit, which then
//     counts those writes). runsc's gofer serves img/<i> at the image's
//     Target as an ordinary read-write bind mount.
//   - Inside, before the first process (GuestInit, guestimages.go): the
//     sandbox's /proc and /dev, and the image's Binds, bound into the root
//     by the Sentry's own mount(2). A bind's From is a path of the
//     sandbox, which exists only in the Sentry (its root's writable layer
//     is runsc's --overlay2 file store): nothing on the host can show it,
//     and a copy made there would miss what the sandbox writes later.
//
// Why a host overlay and not one of runsc's: runsc overlays submounts
// only all at once (--overlay2=all:…), which would put the volumes under
// the overlay too and keep their writes from the host; or, per mount, as
// a pod mount hint "shared" within the sandbox, whose file store ("self")
// runsc creates inside the mount's source, the store's layers. runsc's
// OCI mounts have no overlay type either (runsc/boot/vfs.go knows bind,
// tmpfs, proc, sysfs, dev, devpts, cgroup and erofs).
//
// A sandbox with image roots cannot be checkpointed (Checkpoint): their
// writable layers are files on the host, outside the Sentry's saved state.
//
// Create refuses image roots for now (errImagesProc): gVisor cannot hide
// other uids' processes from an image root's /proc as natively.

// imageDir is where image root i is merged, in the sandbox's directory:
// the source of its bind mount in the OCI spec.
func imageDir(i int) string { return filepath.Join("img", strconv.Itoa(i)) }

// imageLower is where layer j of image root i is mounted, idmapped, in
// the sandbox's directory; j < 0 is the directory of image i's layers.
func imageLower(i, j int) string {
	if j < 0 {
		return filepath.Join("imglower", strconv.Itoa(i))
	}
	return filepath.Join("imglower", strconv.Itoa(i), strconv.Itoa(j))
}

// imageUpper is the directory of image root i's writable layer (upper/
// and work/ for overlayfs), in the sandbox's directory: in upper/, beside
// runsc's file store, on the sandbox's disk when it has one.
func imageUpper(i int) string { return filepath.Join("upper", "img", strconv.Itoa(i)) }

// mountImages merges each of rec's image roots at imageDir in dir, its
// layers idmapped into the user namespace of process userns. It runs once
// the disk (if any) is at upper/, where the writable layers go.
func mountImages(dir string, userns int, rec *record) error {
	if len(rec.Images) == 0 {
		return nil
	}
	for _, d := range []string{"img", "imglower"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o711); err != nil {
			return fmt.Errorf("sandbox dir: %w", err)
		}
	}
	// Root's alone: only overlayfs, on the mounter's (root's) credentials,
	// works in it.
	if err := os.Mkdir(filepath.Join(dir, "upper", "img"), 0o700); err != nil {
		return fmt.Errorf("image roots' layer: %w", err)
	}
	for i, img := range rec.Images {
		if err := mountImage(dir, userns, rec.HostID, i, img); err != nil {
			return fmt.Errorf("image %s: %w", img.Build, err)
		}
	}
	return nil
}

// mountImage merges image root i (see mountImages).
func mountImage(dir string, userns, hostID, i int, img runtime.ImageRoot) error {
	if err := os.Mkdir(filepath.Join(dir, imageLower(i, -1)), 0o711); err != nil {
		return err
	}
	lowers := make([]string, len(img.Layers))
	for j, l := range img.Layers {
		target := filepath.Join(dir, imageLower(i, j))
		if err := attachLayer(l, userns, target); err != nil {
			return err
		}
		lowers[len(img.Layers)-1-j] = target // overlayfs lists the top first
	}
	rw := filepath.Join(dir, imageUpper(i))
	upper, work := filepath.Join(rw, "upper"), filepath.Join(rw, "work")
	for _, d := range []string{rw, upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	// The upper directory is the merged root's own directory: the
	// sandbox's root's, 0755, as the native init makes it.
	if err := os.Chown(upper, hostID, hostID); err != nil {
		return err
	}
	if err := os.Chmod(upper, 0o755); err != nil {
		return err
	}
	target := filepath.Join(dir, imageDir(i))
	if err := os.Mkdir(target, 0o711); err != nil {
		return err
	}
	return mountOverlay(template.MountSource(img.Build), target, lowers, upper, work)
}

// mountOverlay mounts at target an overlay of lowers (top first) under
// upper, named source in the mount table (the store's GC keeps a build
// whose source it finds there). It uses the new mount API so that each
// lower is a parameter of its own ("lowerdir+", Linux 6.8): mount(2)'s
// options hold a page, too few for an image's many layers under a long
// data dir, and relative paths would need a working directory, which is
// the whole process's. The overlay's xattrs are trusted.*, which the
// sandbox cannot set on the upper's files through the gofer, and it is
// volatile: the sandbox's directory never outlives a crash of the host.
func mountOverlay(source, target string, lowers []string, upper, work string) error {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	defer unix.Close(fsfd)
	params := [][2]string{{"source", source}}
	for _, l := range lowers {
		params = append(params, [2]string{"lowerdir+", l})
	}
	params = append(params, [2]string{"upperdir", upper}, [2]string{"workdir", work})
	for _, p := range params {
		if err := unix.FsconfigSetString(fsfd, p[0], p[1]); err != nil {
			return fmt.Errorf("overlay %s=%s: %w%s", p[0], p[1], err, fsLog(fsfd))
		}
	}
	if err := unix.FsconfigSetFlag(fsfd, "volatile"); err != nil {
		return fmt.Errorf("overlay volatile: %w%s", err, fsLog(fsfd))
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("overlay: %w%s", err, fsLog(fsfd))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("overlay: %w%s", err, fsLog(fsfd))
	}
	return attach(mfd, target)
}

// fsLog is what the kernel said of a failed fsconfig on fsfd (it says
// why there, not in the errno), as ": message", or "".
func fsLog(fsfd int) string {
	buf := make([]byte, 512)
	n, err := unix.Read(fsfd, buf)
	if err != nil || n <= 0 {
		return ""
	}
	return ": " + string(buf[:n])
}

// envGuestImages carries to GuestInit, as JSON (guestImages), what it
// completes of the image roots inside; it is never passed on.
const envGuestImages = "HUTCH_GVISOR_IMAGES"

// guestImages is what GuestInit does before the first process starts in
// a sandbox with image roots: it completes them, then becomes the first
// process's user (UID, GID, Groups), which runsc would otherwise have set.
type guestImages struct {
	Images []guestImage `json:"images"`
	UID    uint32       `json:"uid"`
	GID    uint32       `json:"gid"`
	Groups []uint32     `json:"groups,omitempty"`
}

// guestImage is one image root as GuestInit sees it, at Target.
type guestImage struct {
	Target string              `json:"target"`
	Binds  []runtime.ImageBind `json:"binds,omitempty"`
}

// capSysAdmin is what mount(2) needs in the Sentry.
const capSysAdmin = "CAP_SYS_ADMIN"

// imagesSpec adds rec's image roots to s: each merged root bound at its
// Target, read-write, neither set-user-ID files nor devices of the image's
// taking effect (as natively). PID 1 then starts as root with
// CAP_SYS_ADMIN, for the binds it makes (see guestImages), and drops both
// before anything else runs.
func imagesSpec(s *specs.Spec, dir string, rec *record, proc *process) error {
	if len(rec.Images) == 0 {
		return nil
	}
	g := guestImages{UID: proc.UID, GID: proc.GID, Groups: proc.Groups}
	for i, img := range rec.Images {
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: img.Target, Type: "bind", Source: filepath.Join(dir, imageDir(i)),
			Options: []string{"rbind", "rw", "nosuid", "nodev"},
		})
		g.Images = append(g.Images, guestImage{Target: img.Target, Binds: img.Binds})
	}
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	s.Process.Env = append(s.Process.Env, envGuestImages+"="+string(b))
	s.Process.User = specs.User{}
	caps := append(append([]string(nil), defaultCaps...), capSysAdmin)
	s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	return nil
}

// errImagesProc is why Create refuses image roots on gVisor (review 31,
// F1). A program of an image runs as a uid of its own, and natively its
// root's /proc is mounted hidepid=invisible: it sees no process of
// another uid, not the gateway's nor another server's. gVisor's procfs
// has no hidepid (pkg/sentry/fsimpl/proc takes the option and ignores
// it), and /proc/<pid>/cmdline, status and the like are anyone's there.
// No equivalent holds within the backend: a procfs shows the PID
// namespace of the task that mounts it, and the servers are started by
// the gateway in the sandbox's own, so a namespace of the image root's
// would need the gateway to start them in it; a /proc made of chosen
// files breaks /proc/self. Everything else works (TestImageRoot, with
// Runtime.imagesDespiteProc): once gVisor hides them, drop this refusal.
var errImagesProc = errors.New("image roots need the native runtime: gVisor's procfs has no hidepid, so an image root's /proc would show its programs every process of the sandbox (the gateway's command line, other servers')")

// errImagesCheckpoint is why a sandbox with image roots is not
// checkpointed: see the top of this file.
var errImagesCheckpoint = errors.New("a sandbox with image roots cannot be checkpointed on the gvisor runtime: their writable layers are on the host, outside the state runsc saves")
