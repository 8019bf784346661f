package gvisor

import (
	"encoding/json"
	"errors"
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
	dir, err := dirBeneath("/", filepath.Join(target, "proc"))
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
	dir, err := dirBeneath("/", dev)
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
	shm, err := dirBeneath("/", filepath.Join(dev, "shm"))
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
// target, every path found (made if missing) without following a link: a
// file (a kubeconfig, a key) on a file, anything else as a directory.
func bindInto(target string, b runtime.ImageBind) error {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src, err := unix.Openat2(root, strings.TrimLeft(filepath.Clean(b.From), "/"), how)
	unix.Close(root)
	var st unix.Stat_t
	if err == nil && unix.Fstat(src, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		defer unix.Close(src)
		to := filepath.Join(target, b.To)
		parent, err := dirBeneath("/", filepath.Dir(to))
		if err != nil {
			return err
		}
		defer unix.Close(parent)
		name := filepath.Base(to)
		if fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600); err == nil {
			unix.Close(fd)
		}
		dst, err := unix.Openat2(parent, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: how.Resolve})
		if err != nil {
			return fmt.Errorf("show %s at %s: %w", b.From, b.To, err)
		}
		defer unix.Close(dst)
		return bindAt(src, dst, b)
	}
	if err == nil {
		unix.Close(src)
	}
	src, err = dirBeneath("/", b.From)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	dst, err := dirBeneath("/", filepath.Join(target, b.To))
	if err != nil {
		return err
	}
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

// mountsUnder lists the mount points at path and under it, from this
// process's mountinfo.
func mountsUnder(path string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	path = filepath.Clean(path)
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := unescapeMount(f[4])
		if m == path || strings.HasPrefix(m, path+"/") {
			points = append(points, m)
		}
	}
	if len(points) == 0 {
		return nil, fmt.Errorf("no mount at %s", path)
	}
	return points, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
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

// dirBeneath opens directory target (relative to root, or absolute) as an
// O_PATH descriptor, making the missing directories on the way, each
// component opened beneath the one before and a link refused, never
// followed.
func dirBeneath(root, target string) (int, error) {
	cur, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("/%s: %w", strings.Trim(target, "/"), err)
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	shown := "/" + strings.Trim(filepath.Clean("/"+target), "/")
	for _, name := range strings.Split(strings.Trim(filepath.Clean("/"+target), "/"), "/") {
		if err := unix.Mkdirat(cur, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, fmt.Errorf("%s: make %s: %w", shown, name, err)
		}
		next, err := unix.Openat2(cur, name, how)
		unix.Close(cur)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
				return -1, fmt.Errorf("%s: %s is a symlink or not a directory", shown, name)
			}
			return -1, fmt.Errorf("%s: open %s: %w", shown, name, err)
		}
		cur = next
	}
	return cur, nil
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
