package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

// What GuestInit does of the image roots, inside the sandbox (see
// images.go). It mirrors the native init's completeImages and bindInto
// (internal/runtime/native/images.go), which run in a host kernel's mount
// namespace; here the Sentry is the kernel, and PID 1 runs before any of
// the sandbox's code does, so nothing can swap a path meanwhile. Paths
// are still opened without following a link: an image's files and the
// template's are anyone's.

// showImages completes the image roots v (guestImages, JSON) as root with
// CAP_SYS_ADMIN, then becomes the first process's user and execs this
// binary again, without v, as PID 1 proper. It returns only on failure.
func showImages(v string) error {
	var g guestImages
	if err := json.Unmarshal([]byte(v), &g); err != nil {
		return err
	}
	for _, img := range g.Images {
		if err := completeImage(img); err != nil {
			return err
		}
	}
	return becomeUser(&g)
}

// completeImage gives the image root at img.Target what native's
// completeImages gives it (internal/runtime/native/images.go):
//
//   - a /proc of its own, mounted with hidepid=invisible as natively.
//     gVisor's procfs takes the option and ignores it (it has no hidepid),
//     so this /proc shows every process of the sandbox: the reason Create
//     refuses image roots on gVisor (errImagesProc);
//   - the sandbox's /dev, bound recursively and made nosuid all through,
//     with a /dev/shm of its own (the sandbox's would be a drop box
//     between servers; review 31, F7);
//   - the sandbox paths it shows (Binds), nosuid and nodev all through and
//     read-only all through if asked, so a setuid program of the
//     sandbox's (sudo: runsc runs with --allow-suid) gains nothing there
//     (F2).
//
// Mount points are made in the image's writable layer.
func completeImage(img guestImage) error {
	if err := imageProc(img.Target); err != nil {
		return fmt.Errorf("image root %s: %w", img.Target, err)
	}
	if err := imageDev(img.Target); err != nil {
		return fmt.Errorf("image root %s: %w", img.Target, err)
	}
	for _, b := range img.Binds {
		if err := bindInto(img.Target, b); err != nil {
			return fmt.Errorf("image root %s: %w", img.Target, err)
		}
	}
	return nil
}

// imageProc mounts the image root's own /proc (see completeImage). The
// Sentry's procfs shows nothing of the host's kernel (its cmdline is the
// Sentry's own line): there is nothing to mask, as in the sandbox's.
func imageProc(target string) error {
	dir, err := native.DirBeneath("/", filepath.Join(target, "proc"))
	if err != nil {
		return err
	}
	err = unix.Mount("proc", fdPath(dir), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=invisible")
	unix.Close(dir)
	if err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// imageDev binds the sandbox's /dev into the image root, nosuid all
// through, and mounts a /dev/shm of its own there (see completeImage).
func imageDev(target string) error {
	dev := filepath.Join(target, "dev")
	dir, err := native.DirBeneath("/", dev)
	if err != nil {
		return err
	}
	err = unix.Mount("/dev", fdPath(dir), "", unix.MS_BIND|unix.MS_REC, "")
	unix.Close(dir)
	if err != nil {
		return fmt.Errorf("bind /dev: %w", err)
	}
	if err := restrictTree(dev, unix.MS_NOSUID); err != nil {
		return fmt.Errorf("bind /dev: %w", err)
	}
	shm, err := native.DirBeneath("/", filepath.Join(dev, "shm"))
	if err != nil {
		return err
	}
	err = unix.Mount("tmpfs", fdPath(shm), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=65536k")
	unix.Close(shm)
	if err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	return nil
}

// bindInto shows b.From of the sandbox at b.To in the image root at
// target: native.BindEnds, then bindAt (remounts: gVisor has no
// mount_setattr).
func bindInto(target string, b runtime.ImageBind) error {
	src, dst, err := native.BindEnds(target, b)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	defer unix.Close(dst)
	return bindAt(src, dst, b)
}

// bindAt shows src at dst (descriptors), nosuid and nodev all through,
// read-only all through if b says so.
func bindAt(src, dst int, b runtime.ImageBind) error {
	// The path dst is, for the remounts: the bind will be on top of it.
	p, err := os.Readlink(fdPath(dst))
	if err != nil {
		return err
	}
	if err := unix.Mount(fdPath(src), fdPath(dst), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("show %s at %s: %w", b.From, b.To, err)
	}
	set := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if b.ReadOnly {
		set |= unix.MS_RDONLY
	}
	if err := restrictTree(p, set); err != nil {
		return fmt.Errorf("show %s at %s: %w", b.From, b.To, err)
	}
	return nil
}

// restrictTree adds the mount flags set to the mount at path and to every
// mount under it, keeping the flags each has. Native does this with
// mount_setattr(AT_RECURSIVE) on a detached copy; the Sentry has no
// mount_setattr, and its remount changes one mount and replaces all its
// flags, hence one remount per mount found in mountinfo. Nothing of the
// sandbox runs yet to see a bind before it is restricted.
func restrictTree(path string, set uintptr) error {
	points, err := mountsUnder(path)
	if err != nil {
		return err
	}
	// The flags statfs reports (ST_*) that are mount flags of the same
	// value (MS_*).
	const kept = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME
	for _, m := range points {
		var st unix.Statfs_t
		if err := unix.Statfs(m, &st); err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
		flags := uintptr(st.Flags)&kept | set
		if err := unix.Mount("", m, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
			return fmt.Errorf("remount %s: %w", m, err)
		}
	}
	return nil
}

// mountsUnder lists the mount points at path and under it (children
// first: native.MountsUnder), an error when there is none.
func mountsUnder(path string) ([]string, error) {
	points := native.MountsUnder(filepath.Clean(path))
	if len(points) == 0 {
		return nil, fmt.Errorf("no mount at %s", path)
	}
	return points, nil
}

// fdPath names descriptor fd for mount(2): the Sentry resolves the magic
// link to the very file fd is.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// becomeUser drops what PID 1 was given for the image roots (root,
// CAP_SYS_ADMIN) and execs this binary again as PID 1 proper, on the
// first process's user, groups and capabilities as runsc sets them
// without image roots (ociSpec): capabilities are per thread, and so is
// what this does, on one locked thread, which the exec makes the only
// one, its credentials the new program's. Root keeps the bounding set
// less CAP_SYS_ADMIN (an exec by root is given the bounding set); another
// user loses all by the setresuid, as runsc's user has none. It returns
// only on failure.
func becomeUser(g *guestImages) error {
	goruntime.LockOSThread() // never unlocked: this thread execs or fails
	if err := unix.Prctl(unix.PR_CAPBSET_DROP, unix.CAP_SYS_ADMIN, 0, 0, 0); err != nil {
		return fmt.Errorf("drop CAP_SYS_ADMIN: %w", err)
	}
	// Raw calls, on this thread alone: the exec keeps its credentials and
	// ends every other thread.
	var groups unsafe.Pointer
	if len(g.Groups) > 0 {
		groups = unsafe.Pointer(&g.Groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(g.Groups)), uintptr(groups), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(g.GID), uintptr(g.GID), uintptr(g.GID)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(g.UID), uintptr(g.UID), uintptr(g.UID)); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, envGuestImages+"=") {
			env = append(env, e)
		}
	}
	return fmt.Errorf("exec PID 1: %w", syscall.Exec("/proc/self/exe", os.Args, env))
}
