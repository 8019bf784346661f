package template

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
)

// memSource is a LayerSource holding layer streams in memory, as a peer
// would serve them. It records what it serves.
type memSource struct {
	blobs map[string][]byte
	// edit, when set, changes a stream as it is served (a bad transfer).
	edit func(id string, b []byte) []byte
	// err, when set, is what Layer returns.
	err error
	// delay is how long each Layer takes.
	delay time.Duration

	mu      sync.Mutex
	fetched []string
}

// sourceOf is a memSource serving every layer of m, written by s.
func sourceOf(t *testing.T, s *Store, m *Manifest) *memSource {
	t.Helper()
	src := &memSource{blobs: map[string][]byte{}}
	for _, l := range m.Layers {
		var b bytes.Buffer
		if err := s.WriteLayer(t.Context(), l.ID, &b); err != nil {
			t.Fatalf("WriteLayer(%.12s): %v", l.ID, err)
		}
		src.blobs[l.ID] = b.Bytes()
	}
	return src
}

func (m *memSource) Layer(ctx context.Context, id string) (io.ReadCloser, error) {
	m.mu.Lock()
	m.fetched = append(m.fetched, id)
	m.mu.Unlock()
	time.Sleep(m.delay)
	if m.err != nil {
		return nil, m.err
	}
	b, ok := m.blobs[id]
	if !ok {
		return nil, fmt.Errorf("layer %.12s: %w", id, errdefs.ErrNotFound)
	}
	if m.edit != nil {
		b = m.edit(id, slices.Clone(b))
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// take returns the ids served since the last take.
func (m *memSource) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.fetched
	m.fetched = nil
	return out
}

// peerTemplate makes, in a new store, template app (tags v1 and latest)
// of three layers: richImage's two, imported, and one made as a capture or
// a build step leaves one, in the store's own form: a whiteout and an
// opaque directory over the layers below, device nodes and a socket (which
// a layer's stream leaves out), a symlink climbing out of the root, hard
// links, owners, setuid, file capabilities, attributes, a FIFO, an empty
// and a large file, a modification time to the nanosecond.
func peerTemplate(t *testing.T) (*Store, *Template) {
	t.Helper()
	s := newStore(t)
	layout := filepath.Join(t.TempDir(), "layout")
	ocitest.WriteOCILayout(t, layout, richImage(t, true))
	img, err := s.Import(t.Context(), "app", layout, ImportOptions{Tags: []string{"imported"}})
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	lease, err := s.NewLease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	big := make([]byte, 3<<20+17)
	rand.Read(big)
	top, err := s.AddLayer(lease, "test capture", func(root string) (string, error) {
		do := func(errs ...error) error { return errors.Join(errs...) }
		mk := func(p string, mode fs.FileMode, uid, gid int, content []byte) error {
			full := filepath.Join(root, p)
			return do(os.MkdirAll(filepath.Dir(full), 0o755), os.WriteFile(full, content, 0o600), os.Lchown(full, uid, gid), os.Chmod(full, mode))
		}
		sock, err := net.Listen("unix", filepath.Join(root, "run.sock"))
		if err == nil {
			sock.(*net.UnixListener).SetUnlinkOnClose(false)
			sock.Close()
		}
		err = do(err,
			os.MkdirAll(filepath.Join(root, "data"), 0o755),
			unix.Mknod(filepath.Join(root, "data/added"), unix.S_IFCHR, 0),
			os.Lchown(filepath.Join(root, "data/added"), 1000, 1000),
			os.MkdirAll(filepath.Join(root, "etc/opq2"), 0o755),
			unix.Setxattr(filepath.Join(root, "etc"), opaqueXattr, []byte("y"), 0),
			mk("etc/opq2/x", 0o644, 0, 0, []byte("x\n")),
			os.MkdirAll(filepath.Join(root, "dev"), 0o755),
			unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))),
			unix.Mknod(filepath.Join(root, "dev/loop9"), unix.S_IFBLK|0o660, int(unix.Mkdev(7, 9))),
			os.MkdirAll(filepath.Join(root, "snap/a/b"), 0o755),
			os.Symlink("../../../../etc/shadow", filepath.Join(root, "snap/a/b/up")),
			os.Lchown(filepath.Join(root, "snap/a/b/up"), 1000, 1000),
			mk("snap/hard1", 0o640, 1000, 1001, []byte("linked\n")),
			os.Link(filepath.Join(root, "snap/hard1"), filepath.Join(root, "snap/hard2")),
			mk("snap/suid", fs.ModeSetuid|0o755, 0, 0, []byte("su\n")),
			mk("snap/cap", 0o755, 0, 0, []byte("cap\n")),
			unix.Setxattr(filepath.Join(root, "snap/cap"), "security.capability", ocitest.CapSysAdmin(), 0),
			unix.Setxattr(filepath.Join(root, "snap/cap"), "user.note", []byte("kept"), 0),
			os.Mkdir(filepath.Join(root, "snap/private"), 0o700),
			os.Lchown(filepath.Join(root, "snap/private"), 1000, 1000),
			unix.Setxattr(filepath.Join(root, "snap/private"), "user.x", []byte("1"), 0),
			unix.Mkfifo(filepath.Join(root, "snap/fifo"), 0o600),
			mk("snap/empty", 0o644, 0, 0, nil),
			mk("snap/big", 0o644, 0, 0, big),
			mk("snap/subsec", 0o644, 0, 0, []byte("t\n")),
			os.Chtimes(filepath.Join(root, "snap/subsec"), time.Unix(1700000000, 123456789), time.Unix(1700000000, 123456789)),
		)
		return layerID(files{"peer": "top"}), err
	})
	if err != nil {
		t.Fatalf("AddLayer: %v", err)
	}
	tpl, err := s.Commit("app", []string{DefaultTag, "v1", "latest"}, append(slices.Clone(img.Layers), top.ID), Config{
		DefaultUser: "user", DefaultWorkdir: "/home/user", Env: []string{"A=1"}, Source: "test",
		Snapshot: &SnapshotOf{Sandbox: "sbx1", Kind: SnapshotUser},
	})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if err := s.Untag("app", "imported"); err != nil {
		t.Fatal(err)
	}
	return s, tpl
}

// treeEntry is what a layer holds at one path.
type treeEntry struct {
	Mode     fs.FileMode
	UID, GID uint32
	Rdev     uint64
	Mtime    time.Time // not of a whiteout (unpack makes it anew)
	SHA256   string    // of a regular file's content
	Link     string    // a symlink's target
	Xattrs   map[string]string
	SameAs   string // an earlier path of the layer with the same inode
}

// layerTree lists every path under a layer's root but the root itself.
func layerTree(t *testing.T, root string) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := treeEntry{Mode: fi.Mode(), UID: st.Uid, GID: st.Gid, Rdev: st.Rdev, Mtime: fi.ModTime()}
		if fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0 {
			e.Mtime = time.Time{}
		}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.SHA256 = hex.EncodeToString(sum[:])
			if first, ok := inodes[st.Ino]; ok {
				e.SameAs = first
			} else {
				inodes[st.Ino] = rel
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Link, _ = os.Readlink(p)
		}
		names, err := listXattrs(p)
		if err != nil {
			return err
		}
		for _, n := range names {
			v, err := getXattr(p, n)
			if err != nil {
				return err
			}
			if e.Xattrs == nil {
				e.Xattrs = map[string]string{}
			}
			e.Xattrs[n] = string(v)
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// wireManifest sends m through JSON, as a peer does.
func wireManifest(t *testing.T, m *Manifest) *Manifest {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := &Manifest{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPull copies a template of three layers to an empty store and checks
// that every layer holds the same files as the sender's (device nodes and
// sockets left out), that the build is the same and found by the same
// names, that the copy's streams are the sender's byte for byte, and that
// pulling again fetches nothing.
func TestPull(t *testing.T) {
	testenv.RequireRoot(t, "layers keep owners, device whiteouts and file capabilities")
	src, tpl := peerTemplate(t)
	m, err := src.Manifest(t.Context(), "app:v1")
	if err != nil {
		t.Fatalf("Manifest: %v", err)
	}
	if got, want := m.Tags, []string{DefaultTag, "latest", "v1"}; !slices.Equal(got, want) {
		t.Errorf("manifest tags %v, want %v", got, want)
	}
	if m.Build.ID != tpl.ID || !slices.Equal(m.Build.Layers, tpl.Layers) || len(m.Layers) != 3 {
		t.Fatalf("manifest of build %s with layers %v (%d described), want build %s with %v", m.Build.ID, m.Build.Layers, len(m.Layers), tpl.ID, tpl.Layers)
	}
	for i, l := range m.Layers {
		if want := i < 2; l.Content != want {
			t.Errorf("layer %d: contentAddressed %v, want %v", i+1, l.Content, want)
		}
	}
	feed := sourceOf(t, src, m)
	for _, l := range m.Layers {
		sum := sha256.Sum256(feed.blobs[l.ID])
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != l.Digest || int64(len(feed.blobs[l.ID])) != l.Size {
			t.Errorf("layer %.12s: WriteLayer wrote %d bytes with %s; the manifest says %d, %s", l.ID, len(feed.blobs[l.ID]), got, l.Size, l.Digest)
		}
	}

	dst := newStore(t)
	got, err := dst.Pull(t.Context(), wireManifest(t, m), feed)
	if err != nil {
		t.Fatalf("Pull: %v", err)
	}
	if fetched := feed.take(); !slices.Equal(fetched, tpl.Layers) {
		t.Errorf("fetched %v, want each layer once, bottom first: %v", fetched, tpl.Layers)
	}
	if got.ID != tpl.ID || !slices.Equal(got.Tags, m.Tags) || !slices.Equal(got.Layers, tpl.Layers) {
		t.Errorf("Pull = build %s, tags %v, layers %v; want %s, %v, %v", got.ID, got.Tags, got.Layers, tpl.ID, m.Tags, tpl.Layers)
	}
	if diff := cmp.Diff(tpl.Config, got.Config); diff != "" {
		t.Errorf("config (-sender +receiver):\n%s", diff)
	}
	for _, ref := range []string{"app", "app:v1", "app:latest", tpl.ID} {
		if g, err := dst.Get(ref); err != nil || g.ID != tpl.ID {
			t.Errorf("Get(%s) = %v, %v; want build %s", ref, g, err, tpl.ID)
		}
	}
	if owner, err := dst.NameOwner("app"); err != nil || owner != "" {
		t.Errorf("NameOwner(app) = %q, %v; want the operator's", owner, err)
	}

	sdirs, ddirs := tpl.LowerDirs(), got.LowerDirs()
	for i, id := range tpl.Layers {
		want := layerTree(t, sdirs[i])
		for p, e := range want {
			if e.Mode&fs.ModeSocket != 0 || e.Mode&fs.ModeDevice != 0 && e.Rdev != 0 {
				delete(want, p)
			}
		}
		if diff := cmp.Diff(want, layerTree(t, ddirs[i])); diff != "" {
			t.Errorf("layer %d (%.12s) (-sender +receiver):\n%s", i+1, id, diff)
		}
		sl, _ := src.Layer(id)
		dl, err := dst.Layer(id)
		if err != nil || dl.Source != sl.Source || dl.Content != sl.Content || dl.Size <= 0 {
			t.Errorf("layer %d record %+v, %v; want source %q, contentAddressed %v", i+1, dl, err, sl.Source, sl.Content)
		}
	}
	// The checks above are by layer; the view is what sandboxes see.
	sv, dv := viewOf(t, sdirs), viewOf(t, ddirs)
	for _, left := range []string{"/dev/null/\n", "/dev/loop9/\n", "/run.sock/\n"} {
		sv = strings.Replace(sv, left, "", 1)
	}
	if sv != dv {
		t.Errorf("the receiver's view differs:\n%s\nwant\n%s", dv, sv)
	}
	for p, want := range map[string]bool{"/data/added": false, "/opq/old": false, "/etc/passwd": false, "/usr/bin/su": true, "/snap/big": true} {
		if got := strings.Contains(dv, p+" "); got != want {
			t.Errorf("the receiver's view has %s: %v, want %v", p, got, want)
		}
	}

	// The copy's streams are the sender's: any node may serve the layer.
	again, err := dst.Manifest(t.Context(), "app:v1")
	if err != nil {
		t.Fatalf("receiver's Manifest: %v", err)
	}
	mj, _ := json.MarshalIndent(m, "", "  ")
	aj, _ := json.MarshalIndent(again, "", "  ")
	if diff := cmp.Diff(string(mj), string(aj)); diff != "" {
		t.Errorf("receiver's manifest (-sender +receiver):\n%s", diff)
	}

	namesBefore, _ := os.ReadFile(dst.namesPath("app"))
	if _, err := dst.Pull(t.Context(), m, feed); err != nil {
		t.Fatalf("second Pull: %v", err)
	}
	if fetched := feed.take(); len(fetched) > 0 {
		t.Errorf("second Pull fetched %v, want nothing", fetched)
	}
	if namesAfter, _ := os.ReadFile(dst.namesPath("app")); !bytes.Equal(namesBefore, namesAfter) {
		t.Errorf("second Pull rewrote names/app.json:\n%s\nwas\n%s", namesAfter, namesBefore)
	}
	assertNoTemp(t, dst)
	if locks, _ := filepath.Glob(filepath.Join(dst.Dir(), "leases", "*")); len(locks) > 0 {
		t.Errorf("leases and locks left: %v", locks)
	}
}

// TestWriteLayerIsStable writes a layer twice: the same bytes, as the
// digest Manifest keeps needs.
func TestWriteLayerIsStable(t *testing.T) {
	testenv.RequireRoot(t, "layers keep owners and device whiteouts")
	src, tpl := peerTemplate(t)
	for _, id := range tpl.Layers {
		var a, b bytes.Buffer
		if err := src.WriteLayer(t.Context(), id, &a); err != nil {
			t.Fatal(err)
		}
		if err := src.WriteLayer(t.Context(), id, &b); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("layer %.12s: two streams differ (%d and %d bytes)", id, a.Len(), b.Len())
		}
	}
	// The top layer's stream, entry by entry.
	var buf bytes.Buffer
	if err := src.WriteLayer(t.Context(), tpl.Layers[2], &buf); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	want := []string{"data/", "data/.wh.added", "dev/", "etc/", "etc/.wh..wh..opq", "etc/opq2/", "etc/opq2/x",
		"snap/", "snap/a/", "snap/a/b/", "snap/a/b/up", "snap/big", "snap/cap", "snap/empty", "snap/fifo",
		"snap/hard1", "snap/hard2", "snap/private/", "snap/subsec", "snap/suid"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("entries (-want +got):\n%s", diff)
	}
}

// TestPullBadStream serves the top layer wrong in each way a transfer can
// go wrong: Pull fails saying so, keeps nothing of that layer and records
// no build; a good retry then fetches that layer only.
func TestPullBadStream(t *testing.T) {
	testenv.RequireRoot(t, "layers keep owners and device whiteouts")
	src, tpl := peerTemplate(t)
	m, err := src.Manifest(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	good := sourceOf(t, src, m)
	top := tpl.Layers[2]
	only := func(f func(b []byte) []byte) func(string, []byte) []byte {
		return func(id string, b []byte) []byte {
			if id != top {
				return b
			}
			return f(b)
		}
	}
	hostile := func(t *testing.T) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../../escaped", Size: 2, Mode: 0o644})
		tw.Write([]byte("x\n"))
		tw.Close()
		return b.Bytes()
	}(t)
	tests := []struct {
		name string
		edit func(b []byte) []byte
		err  error
		is   error
		want string
	}{
		{name: "a byte flipped", edit: func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }, is: errdefs.ErrInvalidArgument, want: "corrupt"},
		{name: "cut in half", edit: func(b []byte) []byte { return b[:len(b)/2] }, is: errdefs.ErrInvalidArgument, want: "truncated"},
		{name: "end of archive missing", edit: func(b []byte) []byte { return b[:len(b)-1024] }, is: errdefs.ErrInvalidArgument, want: "truncated"},
		{name: "empty", edit: func(b []byte) []byte { return nil }, is: errdefs.ErrInvalidArgument, want: "truncated"},
		{name: "longer", edit: func(b []byte) []byte { return append(b, make([]byte, 4096)...) }, is: errdefs.ErrInvalidArgument, want: "longer"},
		{name: "another layer's stream", edit: func([]byte) []byte { return slices.Clone(good.blobs[tpl.Layers[0]]) }, is: errdefs.ErrInvalidArgument},
		{name: "a path out of the layer", edit: func([]byte) []byte { return hostile }, is: errdefs.ErrInvalidArgument, want: "climbs out"},
		{name: "source fails", err: fmt.Errorf("peer node-2 went away: %w", errdefs.ErrUnavailable), is: errdefs.ErrUnavailable, want: "node-2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := newStore(t)
			// The lower layers are there already: only the top is fetched.
			feed := &memSource{blobs: good.blobs}
			lower := *m
			lower.Build.ID, lower.Build.Layers, lower.Layers, lower.Tags = NewBuildID(), m.Build.Layers[:2], m.Layers[:2], nil
			if _, err := dst.Pull(t.Context(), &lower, feed); err != nil {
				t.Fatalf("Pull of the lower layers: %v", err)
			}
			lowerID := lower.Build.ID
			feed.take()
			if tc.edit != nil {
				feed.edit = only(tc.edit)
			}
			if tc.err != nil {
				feed.err = tc.err
			}
			_, err := dst.Pull(t.Context(), m, feed)
			t.Logf("Pull: %v", err)
			if err == nil || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), top[:12]) {
				t.Errorf("Pull = %v; want an error wrapping %v that names layer %.12s and says %q", err, tc.is, top, tc.want)
			}
			if fetched := feed.take(); !slices.Equal(fetched, []string{top}) {
				t.Errorf("fetched %v, want only the top layer", fetched)
			}
			if dst.HasLayer(top) {
				t.Errorf("the bad layer is in the store")
			}
			assertNoTemp(t, dst)
			if _, err := os.Lstat(filepath.Join(dst.Dir(), "escaped")); err == nil {
				t.Errorf("a file escaped the layer")
			}
			if b := onDisk(t, dst, "builds"); !slices.Equal(b, []string{lowerID}) {
				t.Errorf("builds %v, want only %s", b, lowerID)
			}
			if n := onDisk(t, dst, "names"); len(n) > 0 {
				t.Errorf("names %v recorded", n)
			}
			feed.edit, feed.err = nil, nil
			if _, err := dst.Pull(t.Context(), m, feed); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if fetched := feed.take(); !slices.Equal(fetched, []string{top}) {
				t.Errorf("retry fetched %v, want only the top layer", fetched)
			}
		})
	}
}

// TestManifestNotFound asks for what is not there.
func TestManifestNotFound(t *testing.T) {
	s := newStore(t)
	if _, err := s.Scratch("app", Config{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref string
		is  error
	}{
		{"nope", errdefs.ErrNotFound},
		{"app:nope", errdefs.ErrNotFound},
		{NewBuildID(), errdefs.ErrNotFound},
		{"Bad Name", errdefs.ErrInvalidArgument},
	} {
		if _, err := s.Manifest(t.Context(), tc.ref); !errors.Is(err, tc.is) {
			t.Errorf("Manifest(%q) = %v, want %v", tc.ref, err, tc.is)
		}
	}
	for _, tc := range []struct {
		id string
		is error
	}{
		{strings.Repeat("ab", 32), errdefs.ErrNotFound},
		{"../../etc", errdefs.ErrInvalidArgument},
		{"", errdefs.ErrInvalidArgument},
	} {
		var b bytes.Buffer
		if err := s.WriteLayer(t.Context(), tc.id, &b); !errors.Is(err, tc.is) || b.Len() > 0 {
			t.Errorf("WriteLayer(%q) = %v having written %d bytes, want %v and nothing", tc.id, err, b.Len(), tc.is)
		}
	}
}

// TestPullBadManifest refuses manifests Pull cannot record, before
// fetching anything.
func TestPullBadManifest(t *testing.T) {
	s := newStore(t)
	if _, err := s.Scratch("app", Config{}); err != nil {
		t.Fatal(err)
	}
	good, err := s.Manifest(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(m *Manifest)
		is     error
	}{
		{"another format", func(m *Manifest) { m.Format = 2 }, errdefs.ErrInvalidArgument},
		{"bad build id", func(m *Manifest) { m.Build.ID = "../x" }, errdefs.ErrInvalidArgument},
		{"bad name", func(m *Manifest) { m.Build.Name = "../etc" }, errdefs.ErrInvalidArgument},
		{"bad tag", func(m *Manifest) { m.Tags = []string{"a/b"} }, errdefs.ErrInvalidArgument},
		{"reserved name", func(m *Manifest) { m.Build.Name = PausedPrefix + "x" }, errdefs.ErrInvalidArgument},
		{"no layers", func(m *Manifest) { m.Build.Layers, m.Layers = nil, nil }, errdefs.ErrInvalidArgument},
		{"layers differ", func(m *Manifest) { m.Layers[0].ID = strings.Repeat("0", 64) }, errdefs.ErrInvalidArgument},
		{"bad layer id", func(m *Manifest) { m.Layers[0].ID, m.Build.Layers[0] = "..", ".." }, errdefs.ErrInvalidArgument},
		{"bad digest", func(m *Manifest) { m.Layers[0].Digest = "md5:00" }, errdefs.ErrInvalidArgument},
		{"no size", func(m *Manifest) { m.Layers[0].Size = 0 }, errdefs.ErrInvalidArgument},
		{"too many layers", func(m *Manifest) {
			for range MaxStack {
				m.Build.Layers = append(m.Build.Layers, m.Build.Layers[0])
				m.Layers = append(m.Layers, m.Layers[0])
			}
		}, errdefs.ErrInvalidArgument},
		{"memory checkpoint", func(m *Manifest) { m.Build.Checkpoint = "/var/lib/hutch/checkpoints/x" }, errdefs.ErrNotImplemented},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := wireManifest(t, good)
			tc.change(m)
			feed := &memSource{}
			if _, err := newStore(t).Pull(t.Context(), m, feed); !errors.Is(err, tc.is) {
				t.Errorf("Pull = %v, want %v", err, tc.is)
			}
			if f := feed.take(); len(f) > 0 {
				t.Errorf("fetched %v", f)
			}
		})
	}
	if _, err := newStore(t).Pull(t.Context(), nil, &memSource{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Pull(nil) = %v, want ErrInvalidArgument", err)
	}
}

// TestPullTags pulls a build of app into stores where app is already
// something: the rules in Pull's doc.
func TestPullTags(t *testing.T) {
	testenv.RequireRoot(t, "commits chown nothing, but the store's layers dir is root's")
	built := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	src := newStore(t)
	pulled := commit(t, src, "app", []string{DefaultTag, "v2"}, Config{Built: built, Owner: "key_a"}, files{"app": "new\n"})
	m, err := src.Manifest(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	feed := sourceOf(t, src, m)
	tests := []struct {
		name string
		// here makes the receiver's app; it returns the build.
		here     func(t *testing.T, s *Store) *Template
		is       error
		wantTags map[string]string // tag -> "pulled", "here"
	}{
		{"absent", func(t *testing.T, s *Store) *Template { return nil }, nil,
			map[string]string{DefaultTag: "pulled", "v2": "pulled"}},
		{"older here", func(t *testing.T, s *Store) *Template {
			return commit(t, s, "app", []string{DefaultTag, "v1"}, Config{Built: built.Add(-time.Hour), Owner: "key_a"}, files{"app": "old\n"})
		}, nil, map[string]string{DefaultTag: "pulled", "v1": "here", "v2": "pulled"}},
		{"newer here", func(t *testing.T, s *Store) *Template {
			return commit(t, s, "app", []string{DefaultTag}, Config{Built: built.Add(time.Hour), Owner: "key_a"}, files{"app": "newer\n"})
		}, nil, map[string]string{DefaultTag: "here", "v2": "pulled"}},
		{"another key's here", func(t *testing.T, s *Store) *Template {
			return commit(t, s, "app", []string{DefaultTag}, Config{Built: built.Add(-time.Hour), Owner: "key_b"}, files{"app": "b's\n"})
		}, errdefs.ErrPermissionDenied, map[string]string{DefaultTag: "here"}},
		{"the operator's here", func(t *testing.T, s *Store) *Template {
			return commit(t, s, "app", []string{DefaultTag}, Config{Built: built.Add(-time.Hour)}, files{"app": "op's\n"})
		}, errdefs.ErrPermissionDenied, map[string]string{DefaultTag: "here"}},
		{"the build id with other layers", func(t *testing.T, s *Store) *Template {
			lease, _ := s.NewLease()
			defer lease.Release()
			tpl, err := s.CommitAs(pulled.ID, "app", []string{"mine"}, []string{addLayer(t, s, lease, files{"other": "x"})}, Config{Owner: "key_a"})
			if err != nil {
				t.Fatal(err)
			}
			return tpl
		}, errdefs.ErrAlreadyExists, map[string]string{"mine": "here"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst := newStore(t)
			here := tc.here(t, dst)
			feed.take()
			got, err := dst.Pull(t.Context(), m, feed)
			if !errors.Is(err, tc.is) || (err == nil) != (tc.is == nil) {
				t.Fatalf("Pull = %v, want %v", err, tc.is)
			}
			if err != nil {
				if f := feed.take(); len(f) > 0 {
					t.Errorf("a refused pull fetched %v", f)
				}
			} else if got.ID != pulled.ID {
				t.Errorf("Pull = build %s, want %s", got.ID, pulled.ID)
			}
			tags, err := dst.Tags("app")
			if err != nil {
				t.Fatal(err)
			}
			gotTags := map[string]string{}
			for _, ti := range tags {
				switch {
				case ti.BuildID == pulled.ID && (here == nil || here.ID != pulled.ID):
					gotTags[ti.Tag] = "pulled"
				case here != nil && ti.BuildID == here.ID:
					gotTags[ti.Tag] = "here"
				default:
					gotTags[ti.Tag] = ti.BuildID
				}
			}
			if diff := cmp.Diff(tc.wantTags, gotTags); diff != "" {
				t.Errorf("tags (-want +got):\n%s", diff)
			}
			if tc.is == nil {
				if b, err := dst.Get(pulled.ID); err != nil || b.Owner != "key_a" || !b.Built.Equal(built) {
					t.Errorf("Get(%s) = %+v, %v; want it recorded with its owner and time", pulled.ID, b, err)
				}
			}
		})
	}
}

// TestPullConcurrent pulls one template into one store from several
// goroutines: each layer is fetched once, and all get the same build.
func TestPullConcurrent(t *testing.T) {
	testenv.RequireRoot(t, "layers keep owners and device whiteouts")
	src, tpl := peerTemplate(t)
	m, err := src.Manifest(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	feed := sourceOf(t, src, m)
	feed.delay = 300 * time.Millisecond
	dst := newStore(t)
	var wg sync.WaitGroup
	ids := make([]string, 4)
	errs := make([]error, 4)
	for i := range ids {
		wg.Go(func() {
			got, err := dst.Pull(t.Context(), m, feed)
			errs[i] = err
			if err == nil {
				ids[i] = got.ID
			}
		})
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != tpl.ID {
			t.Errorf("Pull %d = %s, %v; want build %s", i, ids[i], errs[i], tpl.ID)
		}
	}
	fetched := feed.take()
	slices.Sort(fetched)
	if want := slices.Sorted(slices.Values(tpl.Layers)); !slices.Equal(fetched, want) {
		t.Errorf("fetched %v, want each layer once: %v", fetched, want)
	}
	assertNoTemp(t, dst)
}

// TestWriteLayerHoldsLayer removes the only template using a layer while
// the layer is being written: the stream completes whole, and the layer
// goes once it is done.
func TestWriteLayerHoldsLayer(t *testing.T) {
	testenv.RequireRoot(t, "layers keep owners and device whiteouts")
	src, tpl := peerTemplate(t)
	m, err := src.Manifest(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	top := m.Layers[2]
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := src.WriteLayer(t.Context(), top.ID, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	first := make([]byte, 4096)
	if _, err := io.ReadFull(pr, first); err != nil {
		t.Fatal(err)
	}
	if err := src.Remove("app", nil); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := src.Collect(); err != nil {
		t.Fatal(err)
	}
	if !src.HasLayer(top.ID) {
		t.Fatalf("the layer went while it was being written")
	}
	rest, err := io.ReadAll(pr)
	if err != nil || <-done != nil {
		t.Fatalf("stream: %v", err)
	}
	sum := sha256.Sum256(append(first, rest...))
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != top.Digest {
		t.Errorf("stream has %s, want %s", got, top.Digest)
	}
	if _, err := src.Collect(); err != nil {
		t.Fatal(err)
	}
	for _, id := range tpl.Layers {
		if src.HasLayer(id) {
			t.Errorf("layer %.12s stayed after the stream and its template were gone", id)
		}
	}
}

// TestPullResumes fails a pull at its last layer: after a collection, a
// retry fetches that layer only; once the build is recorded, its layers
// are no longer kept for a retry, only by the build.
func TestPullResumes(t *testing.T) {
	testenv.RequireRoot(t, "layers keep owners and device whiteouts")
	src, tpl := peerTemplate(t)
	m, err := src.Manifest(t.Context(), "app")
	if err != nil {
		t.Fatal(err)
	}
	feed := sourceOf(t, src, m)
	top := tpl.Layers[2]
	feed.edit = func(id string, b []byte) []byte {
		if id == top {
			return b[:len(b)/2]
		}
		return b
	}
	dst := newStore(t)
	if _, err := dst.Pull(t.Context(), m, feed); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Pull = %v, want a truncated layer", err)
	}
	if _, err := dst.Collect(); err != nil {
		t.Fatal(err)
	}
	feed.take()
	feed.edit = nil
	if _, err := dst.Pull(t.Context(), m, feed); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if fetched := feed.take(); !slices.Equal(fetched, []string{top}) {
		t.Errorf("retry fetched %v, want only %.12s", fetched, top)
	}
	if c := onDisk(t, dst, "cache"); len(c) > 0 {
		t.Errorf("cache entries %v left after the build was recorded", c)
	}
	if err := dst.Remove("app", nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range tpl.Layers {
		if dst.HasLayer(id) {
			t.Errorf("layer %.12s stayed after its only template was removed", id)
		}
	}
}
