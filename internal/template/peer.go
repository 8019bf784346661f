package template

// Moving a build from one store to another (cluster mode: a template or
// snapshot built on one node is used on another). The sender describes a
// build with Manifest and serves each of its layers with WriteLayer; the
// receiver calls Pull with the manifest and a LayerSource that fetches a
// layer from the sender, and gets the build recorded as if made there:
//
//	sender                                    receiver
//	m, _ := s.Manifest(ctx, "app:v1")   --->  m (JSON)
//	                                          s.Pull(ctx, m, src)
//	s.WriteLayer(ctx, id, w)            <---    src.Layer(ctx, id), for each layer it lacks
//
// Layers go as uncompressed OCI layer tars, written the same way on every
// store (see WriteLayer), so that a layer's stream, and the digest the
// manifest gives for it, are the same whichever store that holds it serves
// it. The receiver unpacks them with unpack, checks and all, as it does an
// image's layers.

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// ManifestFormat is the version of Manifest this package writes and reads.
const ManifestFormat = 1

// exportFormat is the version of the layer stream WriteLayer writes. The
// digests a store keeps of its layers' streams (layers/<id>/export.json)
// are of this version; another is computed again.
const exportFormat = 1

// Manifest is what a store needs to record a build another store made: the
// build as the sender stores it, the tags pointing at it there, and, for
// each of its layers, what the layer's stream (see WriteLayer) must be. It
// is plain JSON, for sending between nodes.
type Manifest struct {
	// Format is ManifestFormat; Pull refuses another.
	Format int `json:"format"`
	// Build is the build as the sender records it (builds/<id>.json):
	// its id, which the receiver keeps, its Config (Name among it) and
	// its layer ids, bottom first. Its Tags are not sent (see Tags).
	Build Template `json:"build"`
	// Tags are the tags of Build.Name that point at Build on the sender,
	// default first; none for a build no tag points at.
	Tags []string `json:"tags,omitempty"`
	// Layers describe Build.Layers, in the same order.
	Layers []ManifestLayer `json:"layers"`
}

// ManifestLayer is one layer of a Manifest.
type ManifestLayer struct {
	// ID is the layer's id in the stores (see the package doc): a hash of
	// its content as some tar, of the inputs that made it, or of random
	// bytes. It is not the digest of the stream a peer sends.
	ID string `json:"id"`
	// Digest is "sha256:<hex>" of the layer's stream as WriteLayer
	// writes it, and Size that stream's length in bytes: the receiver
	// refuses a stream that does not match both.
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Source and Content are the sender's Layer.Source and
	// Layer.Content (the latter true for an image layer, whose id is its
	// diff id), which the receiver's record of the layer keeps.
	Source  string `json:"source,omitempty"`
	Content bool   `json:"contentAddressed,omitempty"`
}

// LayerSource fetches layers for Pull: from a peer over HTTP, or from
// another store in the same process.
type LayerSource interface {
	// Layer opens the stream of layer id as the sender's
	// Store.WriteLayer writes it. Pull closes it. An error that wraps
	// one of errdefs' classes keeps it through Pull.
	Layer(ctx context.Context, id string) (io.ReadCloser, error)
}

// Manifest describes the build ref names ("name", "name:tag" or a build
// id) for Pull in another store. An unknown ref is an error wrapping
// errdefs.ErrNotFound, a malformed one errdefs.ErrInvalidArgument.
//
// The digest of each layer's stream is computed the first time a layer is
// described, by writing the stream (for a layer of a gigabyte, some
// seconds of reading), and kept beside the layer (layers/<id>/export.json)
// for the next time; a store it cannot write to computes it every time.
// The layers are leased meanwhile, so that removing the template does not
// delete them half-read. A build made from a sandbox's memory checkpoint
// (Config.Checkpoint) is described too, but Pull refuses it: the
// checkpoint is not in the store.
func (s *Store) Manifest(ctx context.Context, ref string) (*Manifest, error) {
	t, err := s.Get(ref)
	if err != nil {
		return nil, err
	}
	lease, err := s.NewLease()
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	if err := s.hold(lease, t.Layers...); err != nil {
		return nil, fmt.Errorf("template %s: %w", t.Ref(), err)
	}
	m := &Manifest{
		Format: ManifestFormat,
		Build:  Template{Config: t.Config, ID: t.ID, Layers: slices.Clone(t.Layers)},
		Tags:   slices.Clone(t.Tags),
	}
	for _, id := range t.Layers {
		l, err := s.Layer(id)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", t.Ref(), err)
		}
		digest, size, err := s.exportDigest(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("template %s: layer %.12s: %w", t.Ref(), id, err)
		}
		m.Layers = append(m.Layers, ManifestLayer{ID: id, Digest: digest, Size: size, Source: l.Source, Content: l.contentAddressed()})
	}
	return m, nil
}

// hold adds layers ids to lease, each of which must be in the store
// (errdefs.ErrNotFound). It takes the store's lock, as addLayer does, so
// that a collection running meanwhile cannot miss the lease.
func (s *Store) hold(lease *Lease, ids ...string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	for _, id := range ids {
		if !s.HasLayer(id) {
			return fmt.Errorf("layer %.12s is not in the store: %w", id, errdefs.ErrNotFound)
		}
	}
	if err := lease.Add(ids...); err != nil {
		return fmt.Errorf("template lease: %w", err)
	}
	return nil
}

// exportRecord is layers/<id>/export.json: the digest and length of the
// layer's stream in format Format.
type exportRecord struct {
	Format int    `json:"format"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// exportDigest returns the digest and length of layer id's stream, from
// its export.json when that is of this exportFormat, else by writing the
// stream (and then export.json, if the store may be written). The layer
// must be held.
func (s *Store) exportDigest(ctx context.Context, id string) (string, int64, error) {
	rec := filepath.Join(s.dir, "layers", id, "export.json")
	var r exportRecord
	if b, err := os.ReadFile(rec); err == nil && json.Unmarshal(b, &r) == nil && r.Format == exportFormat && validDigest(r.Digest) && r.Size > 0 {
		return r.Digest, r.Size, nil
	}
	h := sha256.New()
	n := &countWriter{w: h}
	if err := writeLayerTar(ctx, n, layerRoot(s.dir, id)); err != nil {
		return "", 0, err
	}
	r = exportRecord{Format: exportFormat, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: n.n}
	writeJSON(rec, r) // a cache: a store that cannot be written computes it again
	return r.Digest, r.Size, nil
}

// validDigest reports whether d is "sha256:" and 64 lowercase hex digits.
func validDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	return ok && validLayerID(hex)
}

// countWriter counts what it passes on.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// WriteLayer writes layer id to w as an uncompressed OCI layer tar: the
// stream LayerSource.Layer returns and Manifest gives the digest of. An
// unknown layer is an error wrapping errdefs.ErrNotFound, returned before
// anything is written; a later error may leave part of a stream in w
// (which the receiver's digest check refuses). The layer is leased while
// it is written: removing every template that uses it meanwhile does not
// delete it half-read.
//
// The stream is the layer's files in name order, parents first, without
// the root's own entry: owners as numbers (no user or group names), modes
// with setuid, setgid and sticky bits, modification times to the
// nanosecond, symlinks as they are, hard links within the layer as links
// to the first name, FIFOs, and the extended attributes an image may
// carry that mean the same on another host (user.* but overlayfs's own,
// security.capability, POSIX ACLs). The store's whiteouts (0/0 character
// devices) become ".wh.NAME" entries and its opaque directories a
// ".wh..wh..opq" entry, as OCI writes them. Other device nodes (a
// debootstrapped root has a few in /dev) and sockets are left out: no
// store unpacks a device node from a tar (a sandbox gets its own /dev), so
// leaving them out keeps a layer's stream, and its digest, the same on
// every store that holds the layer. For the same layer the stream is the
// same bytes every time.
func (s *Store) WriteLayer(ctx context.Context, id string, w io.Writer) error {
	if !validLayerID(id) {
		return fmt.Errorf("layer id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	lease, err := s.NewLease()
	if err != nil {
		return err
	}
	defer lease.Release()
	if err := s.hold(lease, id); err != nil {
		return err
	}
	if err := writeLayerTar(ctx, w, layerRoot(s.dir, id)); err != nil {
		return fmt.Errorf("layer %.12s: %w", id, err)
	}
	return nil
}

// writeLayerTar writes the layer whose files are at root (overlayfs lower
// form) as WriteLayer describes.
func writeLayerTar(ctx context.Context, w io.Writer, root string) error {
	lw := &layerTarWriter{ctx: ctx, tw: tar.NewWriter(w), root: root, links: map[uint64]string{}, buf: make([]byte, 256<<10)}
	if err := filepath.WalkDir(root, lw.entry); err != nil {
		return err
	}
	return lw.tw.Close()
}

// layerTarWriter is writeLayerTar's state.
type layerTarWriter struct {
	ctx   context.Context
	tw    *tar.Writer
	root  string
	links map[uint64]string // inode -> name, of files with several links written
	buf   []byte
}

// entry is the filepath.WalkDirFunc that writes each entry; the walk
// visits a directory's entries in name order, after the directory.
func (lw *layerTarWriter) entry(p string, _ fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if err := lw.ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	rel, err := filepath.Rel(lw.root, p)
	if err != nil {
		return err
	}
	name := filepath.ToSlash(rel)
	if name == "." {
		// The root's own entry is left out, as OCI layers do; an opaque
		// root still says so.
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && isOpaque(p) {
			return lw.marker(whiteoutOpaque, 0, 0)
		}
		return nil
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		if hdr.PAXRecords, err = exportXattrs(p); err != nil {
			return err
		}
		if err := lw.tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if isOpaque(p) {
			return lw.marker(name+"/"+whiteoutOpaque, 0, 0)
		}
		return nil
	case unix.S_IFREG:
		if st.Nlink > 1 {
			if first, ok := lw.links[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return lw.write(hdr, "")
			}
			lw.links[st.Ino] = name
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		if hdr.PAXRecords, err = exportXattrs(p); err != nil {
			return err
		}
		return lw.write(hdr, p)
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", name, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return lw.write(hdr, "")
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return lw.write(hdr, "")
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			dir, base := path.Split(name)
			return lw.marker(dir+whiteoutPrefix+base, int(st.Uid), int(st.Gid))
		}
	}
	return nil // device nodes, sockets: see WriteLayer
}

// marker writes a whiteout or opaque marker: an empty file whose name is
// what it says, owned as the whiteout it stands for (which unpack gives
// that owner).
func (lw *layerTarWriter) marker(name string, uid, gid int) error {
	return lw.write(&tar.Header{Typeflag: tar.TypeReg, Name: name, Uid: uid, Gid: gid, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}, "")
}

// write writes hdr and, for a regular file, exactly its Size bytes from
// the file at p.
func (lw *layerTarWriter) write(hdr *tar.Header, p string) error {
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write %s: %w", hdr.Name, err)
	}
	if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
		return nil
	}
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.CopyBuffer(lw.tw, io.LimitReader(f, hdr.Size), lw.buf)
	if err != nil {
		return fmt.Errorf("copy %s: %w", hdr.Name, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("copy %s: %d bytes, its size is %d (layers never change: is the store damaged?)", hdr.Name, n, hdr.Size)
	}
	return nil
}

// isOpaque reports whether the directory at p hides the ones below it.
func isOpaque(p string) bool {
	for _, x := range []string{opaqueXattr, "trusted.overlay.opaque"} {
		v := make([]byte, 1)
		if n, err := unix.Lgetxattr(p, x, v); err == nil && n == 1 && v[0] == 'y' {
			return true
		}
	}
	return false
}

// exportXattrs returns the extended attributes of the file at p that a
// layer's stream carries (see WriteLayer), as tar's PAX records.
func exportXattrs(p string) (map[string]string, error) {
	names, err := listXattrs(p)
	if err != nil {
		return nil, err
	}
	var out map[string]string
	for _, n := range names {
		if !exportedXattr(n) {
			continue
		}
		v, err := getXattr(p, n)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, n, err)
		}
		if out == nil {
			out = map[string]string{}
		}
		out["SCHILY.xattr."+n] = string(v)
	}
	return out, nil
}

// exportedXattr reports whether a layer's stream carries the extended
// attribute called name. trusted.* is host root's (unpack drops it), and
// security.* but capabilities is the host's labels.
func exportedXattr(name string) bool {
	switch {
	case strings.HasPrefix(name, "user.overlay."):
		return false
	case strings.HasPrefix(name, "user."):
		return true
	}
	return name == "security.capability" || name == "system.posix_acl_access" || name == "system.posix_acl_default"
}

// getXattr reads the extended attribute n of the file at p.
func getXattr(p, n string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		sz, err := unix.Lgetxattr(p, n, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:sz], nil
	}
}

// Pull records in s the build m describes, as if it had been made here,
// and returns it. It fetches from src, one at a time, the layers s lacks;
// those it has (by id) are neither fetched nor checked. Each fetched
// stream must have the manifest's digest and length, and is unpacked as
// an image's layer is: entries naming paths outside the layer, and
// device nodes, are refused or dropped, and overlayfs's attributes come
// only from whiteout markers (a symlink may point anywhere, as a captured
// sandbox's may). A layer that fails is not kept, and nothing is
// recorded: a half-received layer never appears. Layers fetched before the
// failure stay in the store for a day (as an import's do), so that a retry
// does not fetch them again.
//
// Pulls of the same layer, in this process or another, fetch it once: the
// others wait for it and use it. Pulling a build that is already here
// fetches nothing and changes nothing; Pull may be retried at will.
//
// The build keeps its id, Config (Built and Owner among it) and layer ids.
// Tags follow the sender's, with these rules:
//   - a tag that does not exist here is made, pointing at the build;
//   - a tag pointing at another build here moves only if the pulled build
//     is newer (Config.Built later): a rebuild on another node wins, a
//     stale manifest never takes a tag back; the build a tag left is
//     removed when nothing uses it, as Commit does;
//   - tags of the name the sender lacks are left alone;
//   - a name that belongs here to another API key than the build's owner
//     is refused (errdefs.ErrPermissionDenied) before anything is
//     fetched: handing it over would give one key's sandboxes another's
//     files.
//
// A build without tags here (the sender has none, or each tag here is
// newer) is kept as Commit keeps one: untagged builds are removed a while
// after they were last recorded, unless a sandbox uses them.
//
// m is refused (errdefs.ErrInvalidArgument) when it is not well-formed,
// names a reserved name for anything but a pause, or has more than
// MaxStack layers; a build made from a memory checkpoint is refused with
// errdefs.ErrNotImplemented. A build id that is here with other layers is
// errdefs.ErrAlreadyExists. A stream that does not match m is an error
// wrapping errdefs.ErrInvalidArgument; src's errors are returned wrapped.
//
// The digests protect against a corrupt or truncated transfer, not against
// a peer that lies: m comes from the same peer, and a peer may name a
// layer with the id of another's (a store keeps the first layer of an
// id). Peers must be authenticated as cluster members by whoever connects
// them.
func (s *Store) Pull(ctx context.Context, m *Manifest, src LayerSource) (*Template, error) {
	if err := checkManifest(m); err != nil {
		return nil, err
	}
	ref := m.Build.Name + " (build " + m.Build.ID + ")"
	if err := s.init(); err != nil {
		return nil, err
	}
	// Refused before anything is fetched; checked again when recorded.
	if err := s.mayRecord(m); err != nil {
		return nil, err
	}
	var need int64
	for _, l := range m.Layers {
		if !s.HasLayer(l.ID) {
			need += l.Size
		}
	}
	if free, err := freeBytes(s.dir); err == nil && need+minFree > free {
		return nil, fmt.Errorf("template %s needs %d MiB for its layers and %d MiB to spare, and the template store has %d MiB free: %w", ref, need>>20, minFree>>20, free>>20, errdefs.ErrResourceExhausted)
	}
	lease, err := s.NewLease()
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	for i, l := range m.Layers {
		if err := s.pullLayer(ctx, lease, l, src); err != nil {
			return nil, fmt.Errorf("template %s: layer %d/%d %.12s: %w", ref, i+1, len(m.Layers), l.ID, err)
		}
	}
	t, err := s.recordPulled(m)
	if err != nil {
		return nil, err
	}
	// The layers are the build's now, this pull's and an earlier failed
	// one's: see Import.
	for _, id := range m.Build.Layers {
		s.cacheDrop(id, id)
	}
	return t, nil
}

// checkManifest refuses a manifest Pull cannot record as it is.
func checkManifest(m *Manifest) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("template manifest: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if m == nil {
		return bad("none")
	}
	b := &m.Build
	switch {
	case m.Format != ManifestFormat:
		return bad("format %d, this store reads %d", m.Format, ManifestFormat)
	case !isBuildID(b.ID):
		return bad("build id %q", b.ID)
	case !ValidName(b.Name):
		return bad("template name %q", b.Name)
	case Reserved(b.Name) && (b.Snapshot == nil || b.Snapshot.Kind != SnapshotPause):
		return errReserved(b.Name)
	case len(b.Layers) == 0:
		return bad("build %s has no layers", b.ID)
	case len(b.Layers) > MaxStack:
		return bad("build %s has %d layers, more than the %d a store stacks", b.ID, len(b.Layers), MaxStack)
	case len(m.Layers) != len(b.Layers):
		return bad("build %s has %d layers, the manifest describes %d", b.ID, len(b.Layers), len(m.Layers))
	case b.Checkpoint != "":
		return fmt.Errorf("template %s (build %s) is restored from a memory checkpoint, which is not in the template store and cannot be pulled: %w", b.Name, b.ID, errdefs.ErrNotImplemented)
	}
	for _, tag := range m.Tags {
		if !ValidName(tag) {
			return bad("tag %q", tag)
		}
	}
	for i, l := range m.Layers {
		switch {
		case l.ID != b.Layers[i]:
			return bad("layer %d is %.12s in the build, %.12s in the list", i+1, b.Layers[i], l.ID)
		case !validLayerID(l.ID):
			return bad("layer id %q", l.ID)
		case !validDigest(l.Digest):
			return bad("layer %.12s: digest %q", l.ID, l.Digest)
		case l.Size <= 0:
			return bad("layer %.12s: size %d", l.ID, l.Size)
		}
	}
	return nil
}

// mayRecord refuses m when its name belongs here to another API key than
// its build's, or its build id is here with other contents (see Pull).
func (s *Store) mayRecord(m *Manifest) error {
	b := &m.Build
	if cur, err := s.build(b.ID); err == nil {
		if cur.Name != b.Name || !slices.Equal(cur.Layers, b.Layers) {
			return fmt.Errorf("template build %s is here already as %s with other layers: %w", b.ID, cur.Name, errdefs.ErrAlreadyExists)
		}
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	if len(m.Tags) == 0 {
		return nil
	}
	n, err := s.readNames(b.Name)
	if err != nil {
		return err
	}
	if n != nil && n.Owner != b.Owner {
		return fmt.Errorf("template %s belongs to another API key (or to the server's operator) here than the build pulled: %w", b.Name, errdefs.ErrPermissionDenied)
	}
	return nil
}

// pullLayer adds layer l to the store from src unless it is there, and
// holds it in lease either way. One pull of a layer at a time fetches it.
func (s *Store) pullLayer(ctx context.Context, lease *Lease, l ManifestLayer, src LayerSource) error {
	if s.hold(lease, l.ID) == nil {
		return nil
	}
	unlock, err := lockPull(ctx, filepath.Join(s.dir, "leases", "pull-"+l.ID+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	if s.hold(lease, l.ID) == nil {
		return nil // another pull fetched it meanwhile
	}
	_, err = s.addLayer(lease, l.Source, l.Content, func(root string) (string, error) {
		rc, err := src.Layer(ctx, l.ID)
		if err != nil {
			return "", fmt.Errorf("fetch: %w", err)
		}
		defer rc.Close()
		if err := unpackPulled(ctx, root, rc, l); err != nil {
			return "", err
		}
		return l.ID, nil
	})
	if err != nil {
		return err
	}
	// Kept a while even if this pull fails later: a retry resumes after
	// the layers it has (see ImportLayers).
	s.CachePut(l.ID, l.ID)
	return nil
}

// unpackPulled unpacks the stream of layer l from r into root and checks
// that it is the one l describes.
func unpackPulled(ctx context.Context, root string, r io.Reader, l ManifestLayer) error {
	// One byte more than l.Size: a longer stream is seen, and refused,
	// without reading more of it.
	cr := &countReader{r: io.LimitReader(r, l.Size+1)}
	got, err := unpack(ctx, root, cr, unpackOptions{
		room: func(int64) error { return room(root) },
		// A captured sandbox's files (a snapshot) may hold symlinks to
		// anywhere in its root; nothing on the host follows them.
		anySymlink: true,
	})
	var bad *BadLayerError
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, errNoRoom), errors.As(err, &bad):
		return err
	case cr.err != nil:
		return fmt.Errorf("fetch: %w", cr.err)
	case cr.n > l.Size:
		return fmt.Errorf("the stream is longer than the %d bytes the manifest says: %w", l.Size, errdefs.ErrInvalidArgument)
	case cr.eof && cr.n < l.Size:
		return fmt.Errorf("the stream ended after %d of its %d bytes (truncated): %w", cr.n, l.Size, errdefs.ErrInvalidArgument)
	case err != nil:
		return err
	case "sha256:"+got != l.Digest:
		return fmt.Errorf("the stream has sha256:%.12s, the manifest says %.19s (corrupt): %w", got, l.Digest, errdefs.ErrInvalidArgument)
	}
	return nil
}

// countReader counts what is read through it, and keeps whether it ended
// and the error, other than io.EOF, it ended with.
type countReader struct {
	r   io.Reader
	n   int64
	eof bool
	err error
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		c.eof = true
	case err != nil:
		c.err = err
	}
	return n, err
}

// lockPull takes the lock file at path, waiting for ctx, and returns what
// releases it: it removes the file, so that the locks of layers long
// pulled do not pile up. A waiter that got the lock of a file removed
// meanwhile tries again with the one at path now.
func lockPull(ctx context.Context, path string) (func(), error) {
	for {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := flockWait(ctx, f); err != nil {
			f.Close()
			return nil, err
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return func() { os.Remove(path); f.Close() }, nil
		}
		f.Close()
	}
}

// recordPulled writes m's build (unless it is here) and points its tags
// at it (see Pull), under the store's lock.
func (s *Store) recordPulled(m *Manifest) (*Template, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.mayRecord(m); err != nil {
		return nil, err
	}
	b := &m.Build
	for _, id := range b.Layers {
		if !s.HasLayer(id) {
			return nil, fmt.Errorf("template %s: layer %.12s is not in the store: %w", b.Name, id, errdefs.ErrNotFound)
		}
	}
	p := s.buildPath(b.ID)
	if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
		t := &Template{Config: b.Config, ID: b.ID, Layers: slices.Clone(b.Layers)}
		if err := writeJSON(p, t); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("template build %s: %w", b.ID, err)
	} else {
		// Recorded again: kept as long as a new untagged build is.
		now := time.Now()
		os.Chtimes(p, now, now)
	}
	var move []string
	if len(m.Tags) > 0 {
		n, err := s.readNames(b.Name)
		if err != nil {
			return nil, err
		}
		for _, tag := range m.Tags {
			cur, ok := "", false
			if n != nil {
				cur, ok = n.Tags[tag]
			}
			switch {
			case !ok:
				move = append(move, tag)
			case cur == b.ID:
			default:
				if old, err := s.build(cur); err != nil || b.Built.After(old.Built) {
					move = append(move, tag)
				}
			}
		}
	}
	if len(move) > 0 {
		replaced, err := s.setTags(b.Name, b.ID, move, nil)
		if err != nil {
			return nil, err
		}
		s.collectLocked(replaced)
	}
	return s.build(b.ID)
}
