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

// completeImage gives the image root at img.Target the sandbox's /proc and
// /dev (recursive binds, so the Sentry's /dev/pts and /dev/shm come along),
// then its Binds. Mount points are made in the image's writable layer.
func completeImage(img guestImage) error {
	for _, sub := range []string{"proc", "dev"} {
		dir, err := dirBeneath("/", filepath.Join(img.Target, sub))
		if err != nil {
			return fmt.Errorf("image root %s: %w", img.Target, err)
		}
		err = unix.Mount("/"+sub, fdPath(dir), "", unix.MS_BIND|unix.MS_REC, "")
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("image root %s: bind /%s: %w", img.Target, sub, err)
		}
	}
	for _, b := range img.Binds {
		if err := bindInto(img.Target, b); err != nil {
			return fmt.Errorf("image root %s: %w", img.Target, err)
		}
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

// bindAt binds src on dst (descriptors), read-only if b says so.
func bindAt(src, dst int, b runtime.ImageBind) error {
	if err := unix.Mount(fdPath(src), fdPath(dst), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("show %s at %s: %w", b.From, b.To, err)
	}
	if b.ReadOnly {
		// The bind is on top of dst now: remount what the path shows.
		p, err := os.Readlink(fdPath(dst))
		if err != nil {
			return err
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("show %s at %s read-only: %w", b.From, b.To, err)
		}
	}
	return nil
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
