package template

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/containerd/containerd/v2/pkg/archive"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// OCI layer whiteouts (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// opaqueXattr marks a directory that hides the ones below it. Sandboxes
// mount their overlay with userxattr (they mount it inside their user
// namespace), so lower layers carry the user. form.
const opaqueXattr = "user.overlay.opaque"

// BadLayerError is an entry of a layer that Hutch refuses to unpack.
type BadLayerError struct {
	Entry  string // the tar entry's name
	Reason string
}

func (e *BadLayerError) Error() string {
	return fmt.Sprintf("layer entry %q: %s", e.Entry, e.Reason)
}

// Is makes a BadLayerError match errdefs.ErrInvalidArgument.
func (e *BadLayerError) Is(target error) bool { return target == errdefs.ErrInvalidArgument }

// unpackOptions tune unpack.
type unpackOptions struct {
	// warn receives what was skipped (device nodes), one line each.
	warn func(string)
	// room, when set, is checked every so many bytes written; an error
	// stops the unpack before the disk is full.
	room func(written int64) error
	// anySymlink keeps a symlink whatever its target: a sandbox's own
	// files may point anywhere in its root ("../../../etc/passwd" from
	// /tmp is /etc/passwd inside, as the kernel clamps ".." at a root),
	// and a capture of them must not fail for it. Nothing on the host
	// follows a layer's symlinks: the unpacker resolves paths inside the
	// layer.
	anySymlink bool
}

// unpack applies one uncompressed OCI layer tar to root, an empty
// directory that becomes a layer: whiteouts become overlayfs whiteouts
// (0/0 character devices) and opaque markers the user.overlay.opaque
// attribute, ownership, modes (setuid included), hard links, symlinks,
// xattrs and file capabilities are kept. It returns the layer's diff id,
// the SHA-256 of the tar stream.
//
// containerd's archive.Apply does the unpacking: it resolves every path
// inside root, symlinks included. On top of it, entries are refused, not
// rewritten, when a well-made image would never hold them: a name or a
// hard link target that climbs out with "..", or is absolute; a symlink
// whose relative target climbs above the root. Device nodes are skipped
// (a sandbox gets its own /dev, and its mounts are nodev anyway).
// Extended attributes overlayfs would act on (trusted.overlay.*,
// user.overlay.*) are dropped, so a layer cannot forge a redirect.
func unpack(ctx context.Context, root string, r io.Reader, opts unpackOptions) (string, error) {
	h := sha256.New()
	tr := io.TeeReader(r, h)
	if opts.room != nil {
		tr = &roomReader{r: tr, check: opts.room}
	}
	entries := 0
	filter := func(hdr *tar.Header) (bool, error) {
		name := hdr.Name
		// Inodes run out by entries, not bytes: room is asked every so
		// many entries too.
		if entries++; opts.room != nil && entries%roomEntries == 0 {
			if err := opts.room(0); err != nil {
				return false, err
			}
		}
		if err := checkName(name); err != nil {
			return false, &BadLayerError{Entry: name, Reason: err.Error()}
		}
		if !opts.anySymlink {
			if err := checkMountPoint(hdr); err != nil {
				return false, err
			}
		}
		switch hdr.Typeflag {
		case tar.TypeLink:
			if err := checkName(hdr.Linkname); err != nil {
				return false, &BadLayerError{Entry: name, Reason: "hard link target " + err.Error()}
			}
		case tar.TypeSymlink:
			if !opts.anySymlink && !path.IsAbs(hdr.Linkname) {
				depth := strings.Count(strings.Trim(path.Clean(name), "/"), "/") // of its directory
				if climbs(hdr.Linkname) > depth {
					return false, &BadLayerError{Entry: name, Reason: fmt.Sprintf("symlink to %q points outside the root", hdr.Linkname)}
				}
			}
		case tar.TypeChar, tar.TypeBlock:
			if opts.warn != nil {
				opts.warn(fmt.Sprintf("skipped device node %s: a sandbox gets its own /dev", name))
			}
			return false, nil
		}
		for k := range hdr.PAXRecords {
			if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && (strings.HasPrefix(x, "trusted.") || strings.HasPrefix(x, "user.overlay.")) {
				delete(hdr.PAXRecords, k)
			}
		}
		return true, nil
	}
	convert := func(hdr *tar.Header, p string) (bool, error) {
		base, dir := filepath.Base(p), filepath.Dir(p)
		if base == whiteoutOpaque {
			return false, unix.Setxattr(dir, opaqueXattr, []byte{'y'}, 0)
		}
		if orig, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
			target := filepath.Join(dir, orig)
			os.RemoveAll(target)
			if err := unix.Mknod(target, unix.S_IFCHR, 0); err != nil {
				return false, err
			}
			return false, os.Lchown(target, hdr.Uid, hdr.Gid)
		}
		return true, nil
	}
	if _, err := archive.Apply(ctx, root, tr, archive.WithFilter(filter), archive.WithConvertWhiteout(convert)); err != nil {
		var bad *BadLayerError
		if errors.As(err, &bad) || errors.Is(err, errNoRoom) || ctx.Err() != nil {
			return "", err
		}
		return "", fmt.Errorf("unpack layer: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	// The tar reader stops at the end-of-archive marker; the digest
	// covers the whole stream, padding included.
	// A registry's digest check fails only here, at the end of the blob.
	if _, err := io.Copy(io.Discard, tr); err != nil {
		if errors.Is(err, errNoRoom) || ctx.Err() != nil {
			return "", err
		}
		return "", fmt.Errorf("unpack layer: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// checkName refuses an absolute name or one whose ".." climbs out.
func checkName(name string) error {
	if path.IsAbs(name) {
		return fmt.Errorf("is an absolute path")
	}
	if climbs(name) > 0 {
		return fmt.Errorf("climbs out of the root with \"..\"")
	}
	return nil
}

// climbs is how far above its start a relative path goes at most.
func climbs(p string) int {
	depth, most := 0, 0
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "", ".":
		case "..":
			depth--
			most = max(most, -depth)
		default:
			depth++
		}
	}
	return most
}

// errNoRoom is unpack's error when the disk would fill up.
var errNoRoom = errors.New("not enough disk space")

// roomEntries is how often, in entries, unpack asks for room.
const roomEntries = 4096

// roomReader calls check every 32 MiB read.
type roomReader struct {
	r         io.Reader
	check     func(int64) error
	n, lastAt int64
}

func (r *roomReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	if r.n-r.lastAt >= 32<<20 {
		r.lastAt = r.n
		if cerr := r.check(r.n); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

// freeBytes is the space left for root on the store's file system.
// minFreeInodes is the least number of free inodes the store's file
// system keeps, beside minFree bytes: a layer of many empty files (a
// sandbox's snapshot of them, again and again) takes inodes, not bytes, and
// the host's other users need some too.
const minFreeInodes = 1 << 16

// room reports, as an error wrapping errNoRoom and
// errdefs.ErrResourceExhausted, whether the file system holding dir is
// down to its last minFree bytes or its last minFreeInodes inodes (or 1 %
// of them, when that is more): what adds to the store stops there.
func room(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil // unknown: the write itself will say
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < minFree {
		return fmt.Errorf("stopped with %d MiB left on the template store's disk: %w: %w", free>>20, errNoRoom, errdefs.ErrResourceExhausted)
	}
	// File systems without an inode count (btrfs) report 0 of them.
	if floor := max(minFreeInodes, st.Files/100); st.Files > 0 && st.Ffree < floor {
		return fmt.Errorf("stopped with %d inodes left on the template store's disk: %w: %w", st.Ffree, errNoRoom, errdefs.ErrResourceExhausted)
	}
	return nil
}

func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// checkMountPoint refuses an entry that makes one of the directories a
// sandbox's start mounts on or writes into (/proc, /sys, /dev, /etc)
// anything but a directory: a link there sent the start's mounts and
// writes elsewhere — the host's tree, before pivot_root (review 27, F2,
// F4, F7). The runtimes refuse such a root too (a sandbox's own files may
// still make one); this says so at the build, naming the entry.
func checkMountPoint(hdr *tar.Header) error {
	switch path.Clean(strings.TrimPrefix(hdr.Name, "./")) {
	case "proc", "sys", "dev", "etc":
		if hdr.Typeflag != tar.TypeDir {
			return &BadLayerError{Entry: hdr.Name, Reason: "a sandbox's /" + path.Clean(strings.TrimPrefix(hdr.Name, "./")) + " must be a directory"}
		}
	}
	return nil
}

// Extract applies a plain tar stream (no whiteouts) to root, an existing
// directory that may hold untrusted symlinks: every path is resolved
// inside root, and the entries unpack refuses are refused here too, as
// are device nodes and whiteouts. It is how uploaded files are copied
// into a build.
func Extract(ctx context.Context, root string, r io.Reader) error {
	if err := room(root); err != nil {
		return err
	}
	r = &roomReader{r: r, check: func(int64) error { return room(root) }}
	entries := 0
	filter := func(hdr *tar.Header) (bool, error) {
		// Inodes run out by entries, not bytes (see unpack).
		if entries++; entries%roomEntries == 0 {
			if err := room(root); err != nil {
				return false, err
			}
		}
		if err := checkName(hdr.Name); err != nil {
			return false, &BadLayerError{Entry: hdr.Name, Reason: err.Error()}
		}
		if err := checkMountPoint(hdr); err != nil {
			return false, err
		}
		base := path.Base(hdr.Name)
		switch {
		case strings.HasPrefix(base, whiteoutPrefix):
			return false, &BadLayerError{Entry: hdr.Name, Reason: "whiteouts have no place in copied files"}
		case hdr.Typeflag == tar.TypeChar || hdr.Typeflag == tar.TypeBlock:
			return false, &BadLayerError{Entry: hdr.Name, Reason: "device nodes cannot be copied"}
		case hdr.Typeflag == tar.TypeLink:
			if err := checkName(hdr.Linkname); err != nil {
				return false, &BadLayerError{Entry: hdr.Name, Reason: "hard link target " + err.Error()}
			}
		}
		for k := range hdr.PAXRecords {
			if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && (strings.HasPrefix(x, "trusted.") || strings.HasPrefix(x, "user.overlay.")) {
				delete(hdr.PAXRecords, k)
			}
		}
		return true, nil
	}
	if _, err := archive.Apply(ctx, root, r, archive.WithFilter(filter)); err != nil {
		var bad *BadLayerError
		if errors.As(err, &bad) || errors.Is(err, errNoRoom) || ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("copy files: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// RoomFor reports, as an error wrapping errdefs.ErrResourceExhausted,
// whether the file system holding dir lacks need bytes above the floor
// every writer of the store keeps (room): what writes beside the store
// something of a size it knows beforehand (a sandbox's checkpoint) checks
// it first. what names the write for the message.
func RoomFor(dir, what string, need int64) error {
	if err := room(dir); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	free, err := freeBytes(dir)
	if err != nil {
		return nil // unknown: the write itself will say
	}
	if need+minFree > free {
		return fmt.Errorf("%s needs about %d MiB of disk and %d MiB to spare, and %d MiB are free: %w: %w", what, need>>20, minFree>>20, free>>20, errNoRoom, errdefs.ErrResourceExhausted)
	}
	return nil
}
