package native

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/loopfs"
)

// A sandbox's writable layer is the upper directory of its overlay root:
// sandboxes/<id>/upper on the host, or, for a sandbox with a disk limit,
// "upper" on its own ext4 file system (disk.go), which is mounted only in
// the sandbox's mount namespace and not even reachable there once the init
// has detached the host's tree. CaptureLayer reaches that one through the
// image's loop device: mounting the device again yields the very
// superblock the sandbox writes through, page cache and all, so what it
// reads is what the sandbox sees; once the sandbox has exited (and the
// device is gone with its mount namespace), through a read-only loop
// device of its own.
//
// Overlayfs marks, in the upper directory, what hides the template: a
// deleted path is a character device 0/0 (or, from Linux 6.7, an empty
// file with an "overlay.whiteout" xattr) and a directory that replaced the
// template's has "overlay.opaque" set to "y". The sandbox's overlay is
// mounted with userxattr, which puts these under "user."; "trusted." is
// accepted too. The OCI layer format says the same with names: ".wh.NAME"
// and ".wh..wh..opq".

// CaptureLayer implements runtime.Sandbox.
func (s *sandbox) CaptureLayer(ctx context.Context, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rec, fd, err := s.openInit()
	if err != nil {
		return err
	}
	if fd >= 0 {
		frozen, err := isFrozen(rec.CgroupPaths)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("capture layer of sandbox %s: %w", s.id, err)
		}
		if !frozen {
			return fmt.Errorf("capture layer of sandbox %s: it is running; freeze it first: %w", s.id, errdefs.ErrFailedPrecondition)
		}
	}
	dir, release, err := s.rt.openLayer(rec)
	if err != nil {
		return fmt.Errorf("capture layer of sandbox %s: %w", s.id, err)
	}
	defer release()
	if err := writeLayer(ctx, w, dir, rec.hostUID()); err != nil {
		return fmt.Errorf("capture layer of sandbox %s: %w", s.id, err)
	}
	return nil
}

// openLayer returns a path to the sandbox's upper directory as this
// process can read it, and what to call once done with it.
func (rt *Runtime) openLayer(rec *record) (string, func(), error) {
	dir := rt.sandboxDir(rec.ID)
	if rec.Resources.DiskBytes <= 0 {
		return filepath.Join(dir, "upper"), func() {}, nil
	}
	mfd, err := mountDiskImage(filepath.Join(dir, "disk.img"))
	if err != nil {
		return "", nil, err
	}
	// A detached mount is reached through its descriptor, and goes away
	// with it.
	return "/proc/self/fd/" + strconv.Itoa(mfd) + "/upper", func() { unix.Close(mfd) }, nil
}

// mountDiskImage returns a detached, read-only mount of a sandbox's disk
// image: of the superblock its sandbox uses when the image is attached to
// a loop device still, else of the image through a read-only loop device.
func mountDiskImage(image string) (int, error) {
	img, err := os.Open(image)
	if err != nil {
		return -1, fmt.Errorf("disk image: %w", err)
	}
	defer img.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(img.Fd()), &st); err != nil {
		return -1, fmt.Errorf("disk image: %w", err)
	}
	loop := findLoop(image, &st)
	shared := loop != nil
	if !shared {
		if loop, err = loopfs.Attach(img, unix.LO_FLAGS_READ_ONLY); err != nil {
			return -1, err
		}
	}
	// Once mounted, the file system holds the device: closing ours does
	// not clear it.
	defer loop.Close()
	// The sandbox's superblock is read-write, and the kernel refuses to
	// mount a superblock it has already with the other mode (EBUSY): the
	// shared one is made read-only per mount instead.
	var flags []string
	if !shared {
		flags = []string{"ro"}
	}
	return loopfs.MountExt4(loop.Name(), flags, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
}

// findLoop opens the loop device image (whose stat is st) is attached to,
// or returns nil. The device stays bound to the image while it is open,
// even if the sandbox's mount goes meanwhile: a device set to clear itself
// does so only at its last close.
func findLoop(image string, st *unix.Stat_t) *os.File {
	real, err := filepath.EvalSymlinks(image)
	if err != nil {
		return nil
	}
	ents, err := os.ReadDir("/sys/block")
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "loop") {
			continue
		}
		// Only bound devices have loop/backing_file; the path is a cheap
		// filter, the inode below the proof.
		b, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "loop", "backing_file"))
		if err != nil || strings.TrimSpace(string(b)) != real {
			continue
		}
		dev, err := os.Open("/dev/" + e.Name())
		if err != nil {
			continue
		}
		info, err := unix.IoctlLoopGetStatus64(int(dev.Fd()))
		if err == nil && info.Inode == st.Ino && info.Device == st.Dev {
			return dev
		}
		dev.Close()
	}
	return nil
}

// The prefixes of overlayfs's own extended attributes: userxattr mounts,
// as the sandboxes' are, use the first.
const (
	ovlUser    = "user.overlay."
	ovlTrusted = "trusted.overlay."
)

// layerWriter writes an upper directory as an OCI layer. It reads the tree
// through descriptors, each name resolved in its parent's without
// following symlinks, so that nothing in the layer can lead it elsewhere
// on the host.
type layerWriter struct {
	ctx     context.Context
	tw      *tar.Writer
	hostUID int               // the host uid of the sandbox's root
	links   map[uint64]string // inode → name of files with several links, once written
	linked  int               // bytes of the names in links
	depth   int               // directories open, the root's included
	buf     []byte
}

// The sandbox makes the tree a capture reads, in the server's process: what
// the capture holds in memory at once is bounded. A directory's names are
// read a chunk at a time (never all of a directory of millions), the
// directories open at once (each with its chunk and its name) by a depth,
// and the names of hard-linked files kept to link their other names to by
// a budget. A tree past them fails the capture, saying which.
const (
	layerChunk     = 256
	maxLayerDepth  = 256
	maxLinkedBytes = 64 << 20
)

// writeLayer writes the tree at dir to w as an OCI layer tar stream,
// entries in name order, parents first.
func writeLayer(ctx context.Context, w io.Writer, dir string, hostUID int) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open layer: %w", err)
	}
	lw := &layerWriter{ctx: ctx, tw: tar.NewWriter(w), hostUID: hostUID, links: map[uint64]string{}, buf: make([]byte, 128<<10)}
	// The directory's own entry ("./") is left out, as OCI layers do.
	if err := lw.dir(fd, ""); err != nil {
		return err
	}
	return lw.tw.Close()
}

// dir writes the entries of the directory open as fd (whose archive name is
// prefix, "" for the root) and closes fd.
// Entries come in name order within each chunk of layerChunk names (all of
// a directory of up to that many), parents before children.
func (lw *layerWriter) dir(fd int, prefix string) error {
	f := os.NewFile(uintptr(fd), prefix)
	defer f.Close()
	if lw.depth++; lw.depth > maxLayerDepth {
		return fmt.Errorf("%s: directories nested deeper than %d, which a capture does not follow: %w", orRoot(prefix), maxLayerDepth, errdefs.ErrResourceExhausted)
	}
	defer func() { lw.depth-- }()
	for {
		names, err := f.Readdirnames(layerChunk)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", orRoot(prefix), err)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := lw.ctx.Err(); err != nil {
				return err
			}
			if err := lw.entry(fd, prefix, n); err != nil {
				return err
			}
		}
	}
}

func orRoot(name string) string {
	if name == "" {
		return "/"
	}
	return name
}

// entry writes the entry called n in the directory open as dirfd, and
// everything under it.
func (lw *layerWriter) entry(dirfd int, prefix, n string) error {
	name := prefix + n
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("stat %s: %w", name, err)
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     lw.id(st.Uid),
		Gid:     lw.id(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return nil // not made by overlayfs; nothing in a user namespace can make one
		}
		return lw.whiteout(prefix, n)
	case unix.S_IFSOCK:
		return nil // a layer cannot hold one (OCI)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return lw.write(hdr, nil)
	case unix.S_IFLNK:
		target, err := readlinkat(dirfd, n)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", name, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return lw.write(hdr, nil)
	case unix.S_IFDIR:
		fd, err := openAt(dirfd, n, unix.O_DIRECTORY, &st)
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		x, err := lw.xattrs(fd, name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		if ovl(x, "redirect") != "" {
			unix.Close(fd)
			return fmt.Errorf("%s: a directory renamed over the template (overlayfs redirect_dir), which a layer cannot express", name)
		}
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		hdr.PAXRecords = paxXattrs(x)
		if err := lw.write(hdr, nil); err != nil {
			unix.Close(fd)
			return err
		}
		if ovl(x, "opaque") == "y" {
			if err := lw.write(&tar.Header{Typeflag: tar.TypeReg, Name: name + "/.wh..wh..opq", ModTime: hdr.ModTime, Format: tar.FormatPAX}, nil); err != nil {
				unix.Close(fd)
				return err
			}
		}
		return lw.dir(fd, name+"/")
	case unix.S_IFREG:
		fd, err := openAt(dirfd, n, 0, &st)
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		x, err := lw.xattrs(fd, name)
		if err != nil {
			return err
		}
		if hasOvl(x, "whiteout") {
			return lw.whiteout(prefix, n)
		}
		if hasOvl(x, "metacopy") {
			return fmt.Errorf("%s: its data is in the template (overlayfs metacopy), which a layer cannot express", name)
		}
		if st.Nlink > 1 {
			if first, ok := lw.links[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return lw.write(hdr, nil)
			}
			if lw.linked += len(name); lw.linked > maxLinkedBytes {
				return fmt.Errorf("%s: more hard-linked files than a capture keeps track of (%d MiB of their names): %w", name, maxLinkedBytes>>20, errdefs.ErrResourceExhausted)
			}
			lw.links[st.Ino] = name
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		hdr.PAXRecords = paxXattrs(x)
		return lw.write(hdr, f)
	}
	return nil
}

// whiteout writes the OCI whiteout of the entry n of the directory prefix.
func (lw *layerWriter) whiteout(prefix, n string) error {
	return lw.write(&tar.Header{Typeflag: tar.TypeReg, Name: prefix + ".wh." + n, Format: tar.FormatPAX, ModTime: time.Unix(0, 0)}, nil)
}

// write writes a header and, for a regular file, exactly its Size bytes
// from r.
func (lw *layerWriter) write(hdr *tar.Header, r io.Reader) error {
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write %s: %w", hdr.Name, err)
	}
	if hdr.Size == 0 {
		return nil
	}
	n, err := io.CopyBuffer(lw.tw, io.LimitReader(r, hdr.Size), lw.buf)
	if err != nil {
		return fmt.Errorf("copy %s: %w", hdr.Name, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("copy %s: it shrank from %d to %d bytes while captured (was the sandbox thawed?)", hdr.Name, hdr.Size, n)
	}
	return nil
}

// id turns a host uid or gid of the sandbox's range into the one it has
// inside the sandbox. An id outside the range (nothing in the sandbox can
// give one) becomes the overflow id 65534, as the kernel shows unmapped ids.
func (lw *layerWriter) id(host uint32) int {
	if int(host) >= lw.hostUID && int(host) < lw.hostUID+uidRange {
		return int(host) - lw.hostUID
	}
	return 65534
}

// xattrs reads the extended attributes of the file open as fd.
func (lw *layerWriter) xattrs(fd int, name string) (map[string]string, error) {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		if err != nil {
			return nil, fmt.Errorf("xattrs of %s: %w", name, err)
		}
		return nil, nil
	}
	list := make([]byte, size)
	if size, err = unix.Flistxattr(fd, list); err != nil {
		return nil, fmt.Errorf("xattrs of %s: %w", name, err)
	}
	out := map[string]string{}
	for _, k := range strings.Split(strings.TrimRight(string(list[:size]), "\x00"), "\x00") {
		// security.* (file capabilities tied to the sandbox's host uid,
		// host labels), system.* (ACLs holding host uids) and trusted.*
		// (host root's) mean nothing in a layer: only overlayfs's own and
		// user.* are read.
		if !strings.HasPrefix(k, "user.") && !strings.HasPrefix(k, ovlTrusted) {
			continue
		}
		v := make([]byte, 64<<10)
		n, err := unix.Fgetxattr(fd, k, v)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("xattr %s of %s: %w", k, name, err)
		}
		out[k] = string(v[:n])
	}
	return out, nil
}

// ovl returns overlayfs's attribute key ("opaque") from x, "" if unset.
func ovl(x map[string]string, key string) string {
	if v, ok := x[ovlUser+key]; ok {
		return v
	}
	return x[ovlTrusted+key]
}

// hasOvl reports whether overlayfs's attribute key is set in x, even empty.
func hasOvl(x map[string]string, key string) bool {
	_, user := x[ovlUser+key]
	_, trusted := x[ovlTrusted+key]
	return user || trusted
}

// paxXattrs turns the user.* attributes of x, overlayfs's own left out,
// into the PAX records tar keeps extended attributes in.
func paxXattrs(x map[string]string) map[string]string {
	var out map[string]string
	for k, v := range x {
		if strings.HasPrefix(k, ovlUser) || !strings.HasPrefix(k, "user.") {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out["SCHILY.xattr."+k] = v
	}
	return out
}

// openAt opens the entry n of the directory dirfd without following a
// symlink, and makes sure it is still the file st describes.
func openAt(dirfd int, n string, flags int, st *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(dirfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return -1, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if now.Ino != st.Ino || now.Dev != st.Dev {
		unix.Close(fd)
		return -1, errors.New("replaced while captured (was the sandbox thawed?)")
	}
	return fd, nil
}

// readlinkat reads the target of the symlink n in the directory dirfd.
func readlinkat(dirfd int, n string) (string, error) {
	for size := 256; ; size *= 2 {
		b := make([]byte, size)
		k, err := unix.Readlinkat(dirfd, n, b)
		if err != nil {
			return "", err
		}
		if k < size {
			return string(b[:k]), nil
		}
	}
}
