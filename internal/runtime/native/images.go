package native

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

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
	}
	return nil
}
