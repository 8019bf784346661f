package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// imageDir is where a sandbox's writable layer directory (its directory,
// or its disk) holds image root i's writable layer (see runtime.ImageRoot).
func imageDir(i int) string { return filepath.Join("img", strconv.Itoa(i)) }

// imageLower is the mount point, in the sandbox directory, of image root
// i's layer j; j < 0 is the directory of image i's.
func imageLower(i, j int) string {
	if j < 0 {
		return filepath.Join("imglower", strconv.Itoa(i))
	}
	return filepath.Join("imglower", strconv.Itoa(i), strconv.Itoa(j))
}

// mountImages mounts each image root at its target under root, before
// pivot_root (the layers are reached through the sandbox directory): an
// overlay of the image's idmapped layers under a writable layer in
// layer/img/<i> (the sandbox's directory, or its disk, whose limit it then
// counts against). fds are the layers' detached mounts, image by image,
// bottom first; all are closed.
func mountImages(cfg *initConfig, root, layer string, fds []int) error {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	rel := func(p string) string { r, _ := filepath.Rel(cfg.Dir, p); return r }
	next := 0
	for i, img := range cfg.Images {
		lowers := make([]string, img.Layers)
		for j := 0; j < img.Layers; j++ {
			lower := imageLower(i, j)
			if err := unix.MoveMount(fds[next], "", unix.AT_FDCWD, filepath.Join(cfg.Dir, lower), unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("attach layer %d of image %s: %w", j, img.Build, err)
			}
			next++
			lowers[img.Layers-1-j] = lower // overlayfs wants the top first
		}
		rw := filepath.Join(layer, imageDir(i))
		for _, d := range []string{filepath.Dir(rw), rw, filepath.Join(rw, "upper"), filepath.Join(rw, "work")} {
			if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
				return fmt.Errorf("image %s: %w", img.Build, err)
			}
		}
		dir, err := dirBeneath(root, img.Target)
		if err != nil {
			return err
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,userxattr,volatile", strings.Join(lowers, ":"), rel(filepath.Join(rw, "upper")), rel(filepath.Join(rw, "work")))
		err = unix.Mount(template.MountSource(img.Build), fdPath(dir), "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("mount image %s at %s: %w", img.Build, img.Target, err)
		}
		if img.Config {
			data, err := os.ReadFile(filepath.Join(cfg.Dir, imageLower(i, -1)+".json"))
			if err != nil {
				return fmt.Errorf("image %s: its config: %w", img.Build, err)
			}
			parent, err := dirBeneath(root, filepath.Dir(filepath.Clean(img.Target)))
			if err != nil {
				return err
			}
			err = replaceAt(parent, filepath.Base(filepath.Clean(img.Target))+".json", string(data))
			unix.Close(parent)
			if err != nil {
				return fmt.Errorf("image %s: write its config: %w", img.Build, err)
			}
		}
	}
	return nil
}

// completeImages gives each image root, once pivot_root is done and the
// sandbox's /proc is masked (setupSystem):
//
//   - a /proc of its own, of the sandbox's pid namespace, mounted with
//     hidepid=invisible and masked as the sandbox's: a program of the
//     image (run as a uid of its own) sees no process of another uid — not
//     the launcher's command line holding every server's secrets, not
//     another server's (review 31, F1) — and no more of the kernel than
//     the sandbox does, its boot id the sandbox's;
//   - the sandbox's /dev, bound recursively and made nosuid, with a
//     /dev/shm of its own (the sandbox's would be a drop box between
//     servers, F7);
//   - the sandbox paths it shows (Binds), nosuid and nodev recursively, so
//     a setuid program of the sandbox's (sudo) gains nothing there (F2).
//
// Mount points are made in the image's writable layer, never through a
// link of the image's.
func completeImages(cfg *initConfig) error {
	for _, img := range cfg.Images {
		if err := imageProc(img.Target); err != nil {
			return fmt.Errorf("image %s: %w", img.Build, err)
		}
		dev, err := dirBeneath("/", filepath.Join(img.Target, "dev"))
		if err != nil {
			return fmt.Errorf("image %s: %w", img.Build, err)
		}
		src, err := unix.Open("/dev", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = attachCopy(src, dev, unix.MOUNT_ATTR_NOSUID)
			unix.Close(src)
		}
		unix.Close(dev)
		if err != nil {
			return fmt.Errorf("image %s: bind /dev: %w", img.Build, err)
		}
		shm, err := dirBeneath("/", filepath.Join(img.Target, "dev", "shm"))
		if err != nil {
			return fmt.Errorf("image %s: %w", img.Build, err)
		}
		err = unix.Mount("tmpfs", fdPath(shm), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=65536k")
		unix.Close(shm)
		if err != nil {
			return fmt.Errorf("image %s: /dev/shm: %w", img.Build, err)
		}
		for _, b := range img.Binds {
			if err := bindInto(img.Target, b); err != nil {
				return fmt.Errorf("image %s: %w", img.Build, err)
			}
		}
	}
	return nil
}

// imageProc mounts the image root's own /proc (see completeImages).
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
	proc := filepath.Join(target, "proc")
	if err := maskProc(filepath.Clean(target)); err != nil {
		return err
	}
	// The sandbox's own boot id (ownBootID), not the host's: a copy, bound
	// as ownBootID binds it (its file is unlinked, and cannot be bound).
	if id, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		p := filepath.Join(proc, "sys/kernel/random/boot_id")
		src := "/dev/.boot_id"
		if err := os.WriteFile(src, id, 0o444); err != nil {
			return fmt.Errorf("boot id: %w", err)
		}
		err := unix.Mount(src, p, "", unix.MS_BIND, "")
		os.Remove(src)
		if err != nil {
			return fmt.Errorf("boot id: %w", err)
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("boot id: %w", err)
		}
	}
	return nil
}

// setattrTree sets attributes on the mount at descriptor fd and every
// mount under it (a remount would change the top one only).
func setattrTree(fd int, set uint64) error {
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: set})
}

// bindInto shows b.From of the sandbox at b.To in the image root at
// target (BindEnds, bindAt).
func bindInto(target string, b runtime.ImageBind) error {
	src, dst, err := BindEnds(target, b)
	if err != nil {
		return err
	}
	defer unix.Close(src)
	defer unix.Close(dst)
	return bindAt(src, dst, b)
}

// BindEnds opens the two ends of a bind of b.From of the sandbox at b.To
// in the image root at target, every path found (made if missing) without
// following a link: a file (a kubeconfig, a key) on a file, anything else
// as a directory. The caller closes both (O_PATH) descriptors. The gvisor
// backend's guest binds with them too.
func BindEnds(target string, b runtime.ImageBind) (src, dst int, err error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, err
	}
	src, err = unix.Openat2(root, strings.TrimLeft(filepath.Clean(b.From), "/"), how)
	unix.Close(root)
	var st unix.Stat_t
	if err == nil && unix.Fstat(src, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		to := filepath.Join(target, b.To)
		parent, err := dirBeneath("/", filepath.Dir(to))
		if err != nil {
			unix.Close(src)
			return -1, -1, err
		}
		defer unix.Close(parent)
		name := filepath.Base(to)
		if fd, err := unix.Openat(parent, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600); err == nil {
			unix.Close(fd)
		}
		dst, err := unix.Openat2(parent, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: how.Resolve})
		if err != nil {
			unix.Close(src)
			return -1, -1, fmt.Errorf("show %s at %s: %w", b.From, b.To, err)
		}
		return src, dst, nil
	}
	if err == nil {
		unix.Close(src)
	}
	if src, err = dirBeneath("/", b.From); err != nil {
		return -1, -1, err
	}
	if dst, err = dirBeneath("/", filepath.Join(target, b.To)); err != nil {
		unix.Close(src)
		return -1, -1, err
	}
	return src, dst, nil
}

// DirBeneath is dirBeneath, for the gvisor backend's guest.
func DirBeneath(root, target string) (int, error) { return dirBeneath(root, target) }

// bindAt shows src at dst (descriptors), nosuid and nodev all through,
// read-only all through if b says so.
func bindAt(src, dst int, b runtime.ImageBind) error {
	set := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if b.ReadOnly {
		set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := attachCopy(src, dst, set); err != nil {
		return fmt.Errorf("show %s at %s: %w", b.From, b.To, err)
	}
	return nil
}

// attachCopy attaches at dst (a descriptor) a detached copy of the tree
// of mounts at src (open_tree), with attributes set all through it first:
// no moment shows it with fewer restrictions.
func attachCopy(src, dst int, set uint64) error {
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	if err := setattrTree(tree, set); err != nil {
		return err
	}
	return unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
}
