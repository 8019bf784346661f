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
		if img.Config != nil {
			parent, err := dirBeneath(root, filepath.Dir(filepath.Clean(img.Target)))
			if err != nil {
				return err
			}
			err = replaceAt(parent, filepath.Base(filepath.Clean(img.Target))+".json", string(img.Config))
			unix.Close(parent)
			if err != nil {
				return fmt.Errorf("image %s: write its config: %w", img.Build, err)
			}
		}
	}
	return nil
}

// completeImages gives each image root the sandbox's /proc and /dev, once
// pivot_root is done and /proc is masked (setupSystem): recursive binds,
// so the masks come along and a program chrooted in the image sees no
// more of the kernel than the sandbox does. The mount points are made in
// the image's writable layer, never through a link of the image's.
func completeImages(cfg *initConfig) error {
	for _, img := range cfg.Images {
		for _, sub := range []string{"proc", "dev"} {
			dir, err := dirBeneath("/", filepath.Join(img.Target, sub))
			if err != nil {
				return fmt.Errorf("image %s: %w", img.Build, err)
			}
			err = unix.Mount("/"+sub, fdPath(dir), "", unix.MS_BIND|unix.MS_REC, "")
			unix.Close(dir)
			if err != nil {
				return fmt.Errorf("image %s: bind /%s: %w", img.Build, sub, err)
			}
		}
		for _, b := range img.Binds {
			if err := bindInto(img.Target, b); err != nil {
				return fmt.Errorf("image %s: %w", img.Build, err)
			}
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
