package template

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
)

// imageSource is one of the places Import reads an image from.
type imageSource struct {
	name string
	// put stores img there and returns what to pass to Import.
	put func(t *testing.T, img v1.Image, opts ...ocitest.RegistryOption) string
}

var imageSources = []imageSource{
	{"registry", func(t *testing.T, img v1.Image, opts ...ocitest.RegistryOption) string {
		ref := ocitest.StartRegistry(t, opts...) + "/app:v1"
		ocitest.Push(t, ref, img)
		return ref
	}},
	{"docker archive", func(t *testing.T, img v1.Image, _ ...ocitest.RegistryOption) string {
		p := filepath.Join(t.TempDir(), "app.tar")
		ocitest.WriteDockerArchive(t, p, "app:v1", img)
		return p
	}},
	{"OCI layout", func(t *testing.T, img v1.Image, _ ...ocitest.RegistryOption) string {
		d := filepath.Join(t.TempDir(), "layout")
		ocitest.WriteOCILayout(t, d, img)
		return d
	}},
}

// newStore is an empty store in a directory of its own.
func newStore(t *testing.T) *Store {
	t.Helper()
	return Open(filepath.Join(t.TempDir(), "store"))
}

// richImage is an image of two layers with every kind of entry Import
// must keep as it is, and the second layer deleting and hiding some of
// the first's.
func richImage(t *testing.T, oci bool) v1.Image {
	capv := string(ocitest.CapSysAdmin())
	bottom := ocitest.Layer(t,
		ocitest.File{Path: "etc/"},
		ocitest.File{Path: "etc/passwd", Content: "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"},
		ocitest.File{Path: "home/"},
		ocitest.File{Path: "home/user/", Mode: 0o750, Uid: 1000, Gid: 1000},
		ocitest.File{Path: "home/user/notes", Mode: 0o640, Uid: 1000, Gid: 1001, Content: "mine\n"},
		ocitest.File{Path: "tmp/", Mode: 0o777 | fs.ModeSticky},
		ocitest.File{Path: "usr/"},
		ocitest.File{Path: "usr/bin/"},
		ocitest.File{Path: "usr/bin/su", Mode: 0o755 | fs.ModeSetuid, Content: "su\n"},
		ocitest.File{Path: "usr/bin/wall", Mode: 0o755 | fs.ModeSetgid, Gid: 5, Content: "wall\n"},
		ocitest.File{Path: "usr/bin/ping", Mode: 0o755, Content: "ping\n", Xattrs: map[string]string{"security.capability": capv, "user.note": "kept"}},
		ocitest.File{Path: "data/"},
		ocitest.File{Path: "data/a", Content: "shared inode\n"},
		ocitest.File{Path: "data/b", Hardlink: "data/a"},
		ocitest.File{Path: "data/link", Link: "a"},
		ocitest.File{Path: "data/abs", Link: "/etc/passwd"},
		ocitest.File{Path: "data/gone", Content: "deleted by the next layer\n"},
		ocitest.File{Path: "data/fifo", Type: tar.TypeFifo},
		ocitest.File{Path: "opq/"},
		ocitest.File{Path: "opq/old", Content: "hidden by the next layer\n"},
		// Attributes overlayfs would act on are not the image's to set.
		ocitest.File{Path: "forged/", Xattrs: map[string]string{"user.overlay.opaque": "y", "trusted.overlay.redirect": "/etc", "user.overlay.redirect": "/etc"}},
	)
	top := ocitest.Layer(t,
		ocitest.File{Path: "data/"},
		ocitest.Whiteout("data/gone"),
		ocitest.File{Path: "data/added", Content: "new\n"},
		ocitest.File{Path: "opq/"},
		ocitest.Opaque("opq"),
		ocitest.File{Path: "opq/new", Content: "only this\n"},
	)
	return ocitest.Image(t, ocitest.ImageConfig{
		Env:        []string{"PATH=/usr/bin:/bin", "GREETING=hi"},
		WorkingDir: "/home/user",
		User:       "user",
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{"echo hi"},
		OCI:        oci,
	}, bottom, top)
}

// entryWant is what one path of a layer must be.
type entryWant struct {
	layer    int // 0 bottom
	path     string
	mode     fs.FileMode // type and permission bits, setuid included
	uid, gid uint32
	content  string // of a regular file
	link     string // a symlink's target
	rdev     uint64 // of a device
	xattrs   map[string]string
	absent   bool
}

// checkEntry compares the entry at w.path of layer dir with w.
func checkEntry(t *testing.T, dir string, w entryWant) {
	t.Helper()
	p := filepath.Join(dir, w.path)
	fi, err := os.Lstat(p)
	if w.absent {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("layer %d: /%s exists (%v), want it absent", w.layer, w.path, err)
		}
		return
	}
	if err != nil {
		t.Errorf("layer %d: %v", w.layer, err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != w.mode || st.Uid != w.uid || st.Gid != w.gid || uint64(st.Rdev) != w.rdev {
		t.Errorf("layer %d: /%s: mode %v, owner %d:%d, rdev %d; want %v, %d:%d, %d", w.layer, w.path, fi.Mode(), st.Uid, st.Gid, st.Rdev, w.mode, w.uid, w.gid, w.rdev)
	}
	if fi.Mode().IsRegular() {
		if b, err := os.ReadFile(p); err != nil || string(b) != w.content {
			t.Errorf("layer %d: /%s holds %q (%v), want %q", w.layer, w.path, b, err, w.content)
		}
	}
	if w.link != "" {
		if got, err := os.Readlink(p); err != nil || got != w.link {
			t.Errorf("layer %d: /%s links to %q (%v), want %q", w.layer, w.path, got, err, w.link)
		}
	}
	got := map[string]string{}
	names, err := listXattrs(p)
	if err != nil {
		t.Errorf("layer %d: %v", w.layer, err)
	}
	for _, n := range names {
		buf := make([]byte, 256)
		sz, err := unix.Lgetxattr(p, n, buf)
		if err != nil {
			t.Errorf("layer %d: /%s: xattr %s: %v", w.layer, w.path, n, err)
			continue
		}
		got[n] = string(buf[:sz])
	}
	want := w.xattrs
	if want == nil {
		want = map[string]string{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer %d: /%s xattrs (-want +got):\n%s", w.layer, w.path, diff)
	}
}

// TestImport imports one image from each kind of source and checks what
// the store's layers hold: ownership, modes, links, attributes and the
// overlayfs form of the image's whiteouts, and the image's config.
func TestImport(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners and device whiteouts")
	dir := fs.ModeDir
	wants := []entryWant{
		{layer: 0, path: "etc/passwd", mode: 0o644, content: "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"},
		{layer: 0, path: "home/user", mode: dir | 0o750, uid: 1000, gid: 1000},
		{layer: 0, path: "home/user/notes", mode: 0o640, uid: 1000, gid: 1001, content: "mine\n"},
		{layer: 0, path: "tmp", mode: dir | fs.ModeSticky | 0o777},
		{layer: 0, path: "usr/bin/su", mode: fs.ModeSetuid | 0o755, content: "su\n"},
		{layer: 0, path: "usr/bin/wall", mode: fs.ModeSetgid | 0o755, gid: 5, content: "wall\n"},
		{layer: 0, path: "usr/bin/ping", mode: 0o755, content: "ping\n", xattrs: map[string]string{"security.capability": string(ocitest.CapSysAdmin()), "user.note": "kept"}},
		{layer: 0, path: "data/a", mode: 0o644, content: "shared inode\n"},
		{layer: 0, path: "data/b", mode: 0o644, content: "shared inode\n"},
		{layer: 0, path: "data/link", mode: fs.ModeSymlink | 0o777, link: "a"},
		{layer: 0, path: "data/abs", mode: fs.ModeSymlink | 0o777, link: "/etc/passwd"},
		{layer: 0, path: "data/gone", mode: 0o644, content: "deleted by the next layer\n"},
		{layer: 0, path: "data/fifo", mode: fs.ModeNamedPipe | 0o644},
		{layer: 0, path: "opq", mode: dir | 0o755},
		{layer: 0, path: "opq/old", mode: 0o644, content: "hidden by the next layer\n"},
		{layer: 0, path: "forged", mode: dir | 0o755},
		{layer: 1, path: "data/gone", mode: fs.ModeDevice | fs.ModeCharDevice},
		{layer: 1, path: "data/.wh.gone", absent: true},
		{layer: 1, path: "data/added", mode: 0o644, content: "new\n"},
		{layer: 1, path: "data/a", absent: true},
		{layer: 1, path: "opq", mode: dir | 0o755, xattrs: map[string]string{"user.overlay.opaque": "y"}},
		{layer: 1, path: "opq/.wh..wh..opq", absent: true},
		{layer: 1, path: "opq/new", mode: 0o644, content: "only this\n"},
		{layer: 1, path: "opq/old", absent: true},
	}
	for _, src := range imageSources {
		for _, oci := range []bool{false, true} {
			name := src.name + map[bool]string{false: ", Docker media types", true: ", OCI media types"}[oci]
			t.Run(name, func(t *testing.T) {
				img := richImage(t, oci)
				ref := src.put(t, img)
				s := newStore(t)
				var log bytes.Buffer
				tpl, err := s.Import(t.Context(), "app", ref, ImportOptions{Tags: []string{"v1", "latest"}, Progress: &log})
				if err != nil {
					t.Fatalf("Import: %v\n%s", err, log.String())
				}
				t.Logf("progress:\n%s", log.String())
				got, err := s.Get("app:latest")
				if err != nil || got.ID != tpl.ID {
					t.Fatalf("Get(app:latest) = %v, %v; want build %s", got, err, tpl.ID)
				}
				if _, err := s.Get("app"); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("Get(app) without a default tag = %v, want ErrNotFound", err)
				}
				cf := must(img.ConfigFile())
				var diffIDs []string
				for _, d := range cf.RootFS.DiffIDs {
					diffIDs = append(diffIDs, d.Hex)
				}
				if !slices.Equal(got.Layers, diffIDs) {
					t.Errorf("layers %v, want the image's diff ids %v", got.Layers, diffIDs)
				}
				for _, id := range got.Layers {
					if l, err := s.Layer(id); err != nil || l.Source != "oci sha256:"+id || l.Size <= 0 {
						t.Errorf("layer %.12s: %+v, %v; want source oci sha256:<id> and a size", id, l, err)
					}
				}
				wantCfg := Config{
					Name: "app", DefaultUser: "user", DefaultWorkdir: "/home/user",
					Env: []string{"PATH=/usr/bin:/bin", "GREETING=hi"}, Cmd: []string{"/bin/sh", "-c", "echo hi"},
					Entrypoint: []string{"/bin/sh", "-c"},
				}
				gotCfg := got.Config
				gotCfg.Source, wantCfg.Built = "", got.Built
				if diff := cmp.Diff(wantCfg, gotCfg); diff != "" {
					t.Errorf("config (-want +got):\n%s", diff)
				}
				// A `docker save` archive keeps no manifest: its digest is
				// that of the one go-containerregistry makes up.
				if d := must(img.Digest()).String(); !strings.HasPrefix(got.Source, strings.TrimSuffix(ref, ":v1")+"@sha256:") || src.name != "docker archive" && !strings.HasSuffix(got.Source, "@"+d) {
					t.Errorf("source %q does not name %s and the image's digest %s", got.Source, ref, d)
				}
				dirs := got.LowerDirs()
				for _, w := range wants {
					checkEntry(t, dirs[w.layer], w)
				}
				var a, b syscall.Stat_t
				if err := syscall.Lstat(filepath.Join(dirs[0], "data/a"), &a); err != nil {
					t.Fatal(err)
				}
				if err := syscall.Lstat(filepath.Join(dirs[0], "data/b"), &b); err != nil {
					t.Fatal(err)
				}
				if a.Ino != b.Ino || a.Nlink != 2 {
					t.Errorf("data/a (inode %d, %d links) and its hard link data/b (inode %d) are not one file", a.Ino, a.Nlink, b.Ino)
				}
				assertNoTemp(t, s)
			})
		}
	}
}

// assertNoTemp fails t if the store holds a half-made layer or a layer
// without its record.
func assertNoTemp(t *testing.T, s *Store) {
	t.Helper()
	for _, e := range onDisk(t, s, "layers") {
		if !validLayerID(e) || !s.HasLayer(e) {
			t.Errorf("layers/%s: not a whole layer", e)
		}
	}
}

// blobLog is a reverse proxy to a registry that records the blobs it
// serves.
type blobLog struct {
	mu   sync.Mutex
	gets []string // digests, in order
}

// proxy starts a proxy to the registry at host and returns its host.
func (b *blobLog) proxy(t *testing.T, host string) string {
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, d, ok := strings.Cut(r.URL.Path, "/blobs/"); ok && r.Method == http.MethodGet {
			b.mu.Lock()
			b.gets = append(b.gets, d)
			b.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// take returns the digests fetched since the last call.
func (b *blobLog) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.gets
	b.gets = nil
	return out
}

// layerDigests are the digests of img's layer blobs.
func layerDigests(t *testing.T, img v1.Image) []string {
	var out []string
	for _, l := range must(img.Layers()) {
		out = append(out, must(l.Digest()).String())
	}
	return out
}

// TestImportFetchesOnlyNew: a layer the store has is not fetched again,
// whichever image it comes with; an import that failed keeps the layers
// it finished, so a retry fetches only the rest.
func TestImportFetchesOnlyNew(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners")
	host := ocitest.StartRegistry(t, ocitest.AcceptMismatchedBlobs())
	var blobs blobLog
	proxy := blobs.proxy(t, host)

	shared := ocitest.Layer(t, ocitest.File{Path: "etc/"}, ocitest.File{Path: "etc/os-release", Content: "ID=shared\n"})
	topA := ocitest.Layer(t, ocitest.File{Path: "a", Content: "a\n"})
	topB := ocitest.Layer(t, ocitest.File{Path: "b", Content: "b\n"})
	imgA := ocitest.Image(t, ocitest.ImageConfig{}, shared, topA)
	imgB := ocitest.Image(t, ocitest.ImageConfig{}, shared, topB)
	broken := ocitest.Image(t, ocitest.ImageConfig{}, shared, topB, ocitest.TruncatedGzipLayer(t))
	fixed := ocitest.Image(t, ocitest.ImageConfig{}, shared, topB, ocitest.Layer(t, ocitest.File{Path: "c", Content: "c\n"}))
	for ref, img := range map[string]v1.Image{"a:1": imgA, "b:1": imgB, "c:broken": broken, "c:fixed": fixed} {
		ocitest.Push(t, host+"/"+ref, img)
	}
	s := newStore(t)
	digests := func(img v1.Image, which ...int) []string {
		all := layerDigests(t, img)
		var out []string
		for _, i := range which {
			out = append(out, all[i])
		}
		return out
	}
	steps := []struct {
		name, ref string
		fetched   []string // layer blobs fetched
		inStore   []int    // layers the log says the store had (1-based)
		wantErr   bool
	}{
		{"first image: every layer", "a:1", digests(imgA, 0, 1), nil, false},
		{"the same image again: none", "a:1", nil, []int{1, 2}, false},
		{"another image on the same bottom layer: its top only", "b:1", digests(imgB, 1), []int{1}, false},
		{"an image whose third layer is cut short: fails", "c:broken", digests(broken, 2), []int{1, 2}, true},
		{"the image fixed: the new third layer only", "c:fixed", digests(fixed, 2), []int{1, 2}, false},
	}
	for _, st := range steps {
		var log bytes.Buffer
		_, err := s.Import(t.Context(), "x", proxy+"/"+st.ref, ImportOptions{Progress: &log})
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: Import = %v, want error %v\n%s", st.name, err, st.wantErr, log.String())
		}
		var fetched []string
		for _, d := range blobs.take() {
			if isLayerBlob(t, d, imgA, imgB, broken, fixed) {
				fetched = append(fetched, d)
			}
		}
		if diff := cmp.Diff(st.fetched, fetched); diff != "" {
			t.Errorf("%s: layer blobs fetched (-want +got):\n%s", st.name, diff)
		}
		var inStore []int
		for _, line := range strings.Split(log.String(), "\n") {
			var i, n int
			if _, err := fmt.Sscanf(line, "layer %d/%d", &i, &n); err == nil && strings.HasSuffix(line, ": already in the store") {
				inStore = append(inStore, i)
			}
		}
		if !slices.Equal(inStore, st.inStore) {
			t.Errorf("%s: the log says layers %v were in the store, want %v:\n%s", st.name, inStore, st.inStore, log.String())
		}
		assertNoTemp(t, s)
	}
}

// TestImportRemoveFrees: removing an imported template deletes the layers
// only it used at once (the cache entries that let a failed import resume
// do not outlive a successful one), and keeps those another template uses.
func TestImportRemoveFrees(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners")
	shared := ocitest.Layer(t, ocitest.File{Path: "etc/"}, ocitest.File{Path: "etc/os-release", Content: "ID=shared\n"})
	s := newStore(t)
	for _, name := range []string{"a", "b"} {
		dir := filepath.Join(t.TempDir(), "layout")
		ocitest.WriteOCILayout(t, dir, ocitest.Image(t, ocitest.ImageConfig{}, shared, ocitest.Layer(t, ocitest.File{Path: name, Content: name + "\n"})))
		if _, err := s.Import(t.Context(), name, dir, ImportOptions{}); err != nil {
			t.Fatalf("Import %s: %v", name, err)
		}
	}
	a, b := must(s.Get("a")), must(s.Get("b"))
	for _, step := range []struct {
		remove string
		want   []string
	}{
		{"a", sorted(b.Layers...)},
		{"b", nil},
	} {
		if err := s.Remove(step.remove, nil); err != nil {
			t.Fatalf("Remove %s: %v", step.remove, err)
		}
		if got := onDisk(t, s, "layers"); !slices.Equal(got, step.want) {
			t.Errorf("layers after Remove(%s): %v, want %v (a's: %v)", step.remove, got, step.want, a.Layers)
		}
	}
}

// isLayerBlob reports whether digest d is a layer of one of imgs.
func isLayerBlob(t *testing.T, d string, imgs ...v1.Image) bool {
	for _, img := range imgs {
		if slices.Contains(layerDigests(t, img), d) {
			return true
		}
	}
	return false
}

// TestImportAuth: a registry that wants credentials refuses an import
// without them, or with wrong ones, with an error that says so; with
// them the import works.
func TestImportAuth(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners")
	host := ocitest.StartRegistry(t, ocitest.WithBasicAuth("alice", "s3cret"))
	ref := host + "/private:v1"
	img := ocitest.Image(t, ocitest.ImageConfig{}, ocitest.Layer(t, ocitest.File{Path: "secret", Content: "s\n"}))
	ocitest.Push(t, ref, img, remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	tests := []struct {
		name           string
		user, password string
		ok             bool
	}{
		{"no credentials", "", "", false},
		{"wrong password", "alice", "guess", false},
		{"wrong user", "bob", "s3cret", false},
		{"right credentials", "alice", "s3cret", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			tpl, err := s.Import(t.Context(), "private", ref, ImportOptions{Username: tc.user, Password: tc.password})
			if tc.ok {
				if err != nil {
					t.Fatalf("Import: %v", err)
				}
				if b, err := os.ReadFile(filepath.Join(tpl.LowerDirs()[0], "secret")); err != nil || string(b) != "s\n" {
					t.Errorf("the layer's /secret = %q, %v", b, err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "refused access") || !strings.Contains(err.Error(), ref) {
				t.Errorf("Import = %v; want an ErrInvalidArgument saying the registry refused access to %s", err, ref)
			}
			if _, err := s.Get("private"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get after a refused import = %v, want ErrNotFound", err)
			}
		})
	}
}

// TestImportPlatform: from a multi-platform image, the host's platform
// is imported unless another is asked for; one the image lacks is not
// found.
func TestImportPlatform(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners")
	imgFor := func(arch, variant string) v1.Image {
		return ocitest.Image(t, ocitest.ImageConfig{Architecture: arch, Variant: variant},
			ocitest.Layer(t, ocitest.File{Path: "arch", Content: arch + variant + "\n"}))
	}
	idx := ocitest.Index(t, imgFor("amd64", ""), imgFor("arm64", "v8"), imgFor("arm", "v7"))
	sources := []struct {
		name string
		put  func(t *testing.T) string
	}{
		{"registry", func(t *testing.T) string {
			ref := ocitest.StartRegistry(t) + "/multi:v1"
			ocitest.PushIndex(t, ref, idx)
			return ref
		}},
		{"OCI layout", func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "layout")
			ocitest.WriteOCILayoutIndex(t, d, idx)
			return d
		}},
	}
	tests := []struct {
		platform string
		want     string // /arch
		wantErr  error
	}{
		{"", "amd64\n", nil},
		{"linux/amd64", "amd64\n", nil},
		{"linux/arm64", "arm64v8\n", nil},
		{"linux/arm64/v8", "arm64v8\n", nil},
		{"linux/arm/v7", "armv7\n", nil},
		{"linux/s390x", "", errdefs.ErrNotFound},
		{"windows/amd64", "", errdefs.ErrNotFound},
	}
	for _, src := range sources {
		ref := src.put(t)
		for _, tc := range tests {
			t.Run(src.name+"/"+tc.platform, func(t *testing.T) {
				s := newStore(t)
				tpl, err := s.Import(t.Context(), "multi", ref, ImportOptions{Platform: tc.platform})
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Errorf("Import = %v, want %v", err, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatalf("Import: %v", err)
				}
				if b, err := os.ReadFile(filepath.Join(tpl.LowerDirs()[0], "arch")); err != nil || string(b) != tc.want {
					t.Errorf("/arch = %q, %v; want %q", b, err, tc.want)
				}
			})
		}
	}
}

// TestImportNotFound: an image that is not there is ErrNotFound, and a
// source that is no image at all ErrInvalidArgument.
func TestImportNotFound(t *testing.T) {
	host := ocitest.StartRegistry(t)
	ocitest.Push(t, host+"/app:v1", ocitest.Image(t, ocitest.ImageConfig{}, ocitest.Layer(t, ocitest.File{Path: "f"})))
	notADir := filepath.Join(t.TempDir(), "not-an-image")
	os.WriteFile(notADir, []byte("hello"), 0o644)
	emptyDir := t.TempDir()
	tests := []struct {
		source  string
		wantErr error
	}{
		{host + "/nope:v1", errdefs.ErrNotFound},
		{host + "/app:v2", errdefs.ErrNotFound},
		{host + "/app@sha256:" + strings.Repeat("0", 64), errdefs.ErrNotFound},
		{notADir, errdefs.ErrInvalidArgument},
		{emptyDir, errdefs.ErrInvalidArgument},
		{"Not A Ref!", errdefs.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.source, func(t *testing.T) {
			s := newStore(t)
			if _, err := s.Import(t.Context(), "app", tc.source, ImportOptions{}); !errors.Is(err, tc.wantErr) {
				t.Errorf("Import(%s) = %v, want %v", tc.source, err, tc.wantErr)
			}
			if got := onDisk(t, s, "names"); len(got) != 0 {
				t.Errorf("names registered: %v", got)
			}
		})
	}
	if _, err := newStore(t).Import(t.Context(), "Bad Name", host+"/app:v1", ImportOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Import under a bad name = %v, want ErrInvalidArgument", err)
	}
}

// TestImportHostile imports, from each kind of source, an image whose
// second layer is one an attacker or a broken registry serves. Each is
// refused with an error naming what is wrong; nothing is registered,
// nothing is written outside the store, and no half layer is left (the
// sound first layer is kept, so that a retry resumes after it).
func TestImportHostile(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners")
	if _, err := os.Lstat("/etc/evil"); err == nil {
		t.Fatal("/etc/evil exists before the test")
	}
	tests := []struct {
		name    string
		layer   func(t testing.TB) v1.Layer
		entry   string // the entry a BadLayerError names, if one is wanted
		message string // in the error, otherwise
		// escapes are where the layer would write outside the store,
		// relative to the directory holding the store ("/..." absolute).
		escapes []string
	}{
		{"dot-dot", ocitest.DotDotLayer, "../../etc/evil", "", []string{"store/layers/etc/evil", "store/etc/evil", "etc/evil", "/etc/evil"}},
		{"absolute path", ocitest.AbsolutePathLayer, "/etc/evil", "", []string{"/etc/evil"}},
		{"symlink escape", ocitest.SymlinkEscapeLayer, "x", "", []string{"etc/evil", "/etc/evil"}},
		{"hardlink escape", ocitest.HardlinkEscapeLayer, "shadow", "", nil},
		{"truncated gzip", ocitest.TruncatedGzipLayer, "", "layer 2/2", nil},
		{"corrupt tar", ocitest.CorruptTarLayer, "", "layer 2/2", nil},
		{"mismatched content", ocitest.MismatchedLayer, "", "layer 2/2", nil},
	}
	bottom := ocitest.Layer(t, ocitest.File{Path: "etc/"}, ocitest.File{Path: "etc/os-release", Content: "ID=sound\n"})
	bottomID := must(bottom.DiffID()).Hex
	for _, src := range imageSources {
		for _, tc := range tests {
			t.Run(src.name+"/"+tc.name, func(t *testing.T) {
				img := ocitest.Image(t, ocitest.ImageConfig{}, bottom, tc.layer(t))
				ref := src.put(t, img, ocitest.AcceptMismatchedBlobs())
				top := filepath.Join(t.TempDir(), "t")
				s := Open(filepath.Join(top, "store"))
				var log bytes.Buffer
				_, err := s.Import(t.Context(), "evil", ref, ImportOptions{Progress: &log})
				t.Logf("Import: %v\n%s", err, log.String())
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("Import = %v, want ErrInvalidArgument", err)
				}
				if tc.entry != "" {
					var bad *BadLayerError
					if !errors.As(err, &bad) || bad.Entry != tc.entry || !strings.Contains(err.Error(), `"`+tc.entry+`"`) {
						t.Errorf("Import = %v, want a BadLayerError naming %q", err, tc.entry)
					}
				}
				if err != nil && !strings.Contains(err.Error(), tc.message) {
					t.Errorf("Import = %v, want it to say %q", err, tc.message)
				}
				if _, err := s.Get("evil"); !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("Get after a refused import = %v, want ErrNotFound", err)
				}
				if _, err := os.Stat(filepath.Join(s.Dir(), "names", "evil.json")); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("names/evil.json: %v, want none", err)
				}
				if got := onDisk(t, s, "builds"); len(got) != 0 {
					t.Errorf("builds registered: %v", got)
				}
				if got := onDisk(t, s, "layers"); !slices.Equal(got, []string{bottomID}) {
					t.Errorf("layers/ holds %v, want only the sound first layer %.12s", got, bottomID)
				}
				assertNoTemp(t, s)
				for _, e := range tc.escapes {
					p := e
					if !filepath.IsAbs(p) {
						p = filepath.Join(top, e)
					}
					if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("%s was written (%v)", p, err)
					}
				}
				// And the store is sound: a good image imports after it.
				good := ocitest.Image(t, ocitest.ImageConfig{}, bottom)
				if _, err := s.Import(t.Context(), "good", src.put(t, good), ImportOptions{}); err != nil {
					t.Errorf("a sound image after the hostile one: %v", err)
				}
			})
		}
	}
}

// TestImportKeepsInside: entries that resolve through the layer's own
// links stay inside the layer.
func TestImportKeepsInside(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners")
	layer := ocitest.Layer(t,
		ocitest.File{Path: "etc/"},
		ocitest.File{Path: "abs", Link: "/etc"},
		ocitest.File{Path: "abs/through-abs", Content: "in the layer\n"},
		ocitest.File{Path: "d/"},
		ocitest.File{Path: "d/up", Link: "../etc"},
		ocitest.File{Path: "d/up/through-rel", Content: "in the layer\n"},
		ocitest.File{Path: "hard", Hardlink: "abs/through-abs"},
	)
	s := newStore(t)
	tpl, err := s.Import(t.Context(), "inside", imageSources[2].put(t, ocitest.Image(t, ocitest.ImageConfig{}, layer)), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	root := tpl.LowerDirs()[0]
	for _, p := range []string{"etc/through-abs", "etc/through-rel", "hard"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != "in the layer\n" {
			t.Errorf("/%s in the layer = %q, %v", p, b, err)
		}
	}
	for _, p := range []string{"/etc/through-abs", "/etc/through-rel"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the host's %s was written (%v)", p, err)
		}
	}
}

// TestImportDevices: device nodes are skipped, and the log says so.
func TestImportDevices(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners")
	for _, src := range imageSources {
		t.Run(src.name, func(t *testing.T) {
			s := newStore(t)
			var log bytes.Buffer
			tpl, err := s.Import(t.Context(), "dev", src.put(t, ocitest.Image(t, ocitest.ImageConfig{}, ocitest.DeviceLayer(t))), ImportOptions{Progress: &log})
			if err != nil {
				t.Fatal(err)
			}
			root := tpl.LowerDirs()[0]
			checkEntry(t, root, entryWant{path: "evil", mode: fs.ModeDir | 0o755})
			checkEntry(t, root, entryWant{path: "evil/mem", absent: true})
			checkEntry(t, root, entryWant{path: "evil/sda", absent: true})
			for _, e := range []string{"evil/mem", "evil/sda"} {
				if !strings.Contains(log.String(), "skipped device node "+e) {
					t.Errorf("the log does not say %s was skipped:\n%s", e, log.String())
				}
			}
		})
	}
}

// TestImportDiskFull: an image that would fill the store's disk is
// refused before it does, whether its layers' sizes tell at once or only
// unpacking shows it (a gzip bomb), and leaves nothing behind.
func TestImportDiskFull(t *testing.T) {
	testenv.RequireRoot(t, "mounts a small tmpfs as the store")
	tests := []struct {
		name string
		fs   string // tmpfs size
		huge int64
	}{
		{"less room than the floor", "size=64m", 200 << 20},
		{"a layer that unpacks to more than the room", "size=320m", 1 << 30},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := ocitest.Image(t, ocitest.ImageConfig{}, ocitest.HugeLayer(t, tc.huge))
			ref := imageSources[0].put(t, img)
			dir := t.TempDir()
			if err := unix.Mount("tmpfs", dir, "tmpfs", 0, tc.fs); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
			s := Open(dir)
			var log bytes.Buffer
			_, err := s.Import(t.Context(), "huge", ref, ImportOptions{Progress: &log})
			t.Logf("Import: %v\n%s", err, log.String())
			if !errors.Is(err, errdefs.ErrResourceExhausted) {
				t.Errorf("Import = %v, want ErrResourceExhausted", err)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				t.Fatal(err)
			}
			if used := int64(st.Blocks-st.Bfree) * st.Bsize; used > 1<<20 {
				t.Errorf("%d bytes left used on the store's disk", used)
			}
			if got := onDisk(t, s, "layers"); len(got) != 0 {
				t.Errorf("layers/ holds %v", got)
			}
			if _, err := s.Get("huge"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get = %v, want ErrNotFound", err)
			}
		})
	}
}

// TestImportPrivilegedFiles: setuid files and file capabilities are
// kept as the image has them (real images carry su and ping); the store
// keeps them from host users (TestStoreModes) and sandboxes run them
// only as their own root.
func TestImportPrivilegedFiles(t *testing.T) {
	testenv.RequireRoot(t, "layers keep the image's owners and capabilities")
	tests := []struct {
		name  string
		layer func(testing.TB) v1.Layer
		want  entryWant
	}{
		{"setuid root", ocitest.SetuidRootLayer, entryWant{path: "usr/local/bin/rootshell", mode: fs.ModeSetuid | 0o755, content: "#!/bin/sh\nexec /bin/sh -p\n"}},
		{"file capability", ocitest.FileCapLayer, entryWant{path: "usr/local/bin/capshell", mode: 0o755, content: "#!/bin/sh\nexec /bin/sh\n",
			xattrs: map[string]string{"security.capability": string(ocitest.CapSysAdmin())}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			tpl, err := s.Import(t.Context(), "priv", imageSources[0].put(t, ocitest.Image(t, ocitest.ImageConfig{}, tc.layer(t))), ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkEntry(t, tpl.LowerDirs()[0], tc.want)
		})
	}
}
