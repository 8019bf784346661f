package template

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// files is a layer's content for addLayer: path -> content, a path
// ending in "/" being a directory.
type files map[string]string

// addLayer adds a layer holding fs to s under lease and returns its id,
// a hash of fs: the same files make the same layer.
func addLayer(t *testing.T, s *Store, lease *Lease, fs files) string {
	t.Helper()
	id := layerID(fs)
	l, err := s.AddLayer(lease, "test", func(root string) (string, error) {
		for _, p := range slices.Sorted(maps.Keys(fs)) {
			full := filepath.Join(root, p)
			if strings.HasSuffix(p, "/") {
				if err := os.MkdirAll(full, 0o755); err != nil {
					return "", err
				}
				continue
			}
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return "", err
			}
			if err := os.WriteFile(full, []byte(fs[p]), 0o644); err != nil {
				return "", err
			}
		}
		return id, nil
	})
	if err != nil {
		t.Fatalf("AddLayer: %v", err)
	}
	if l.ID != id {
		t.Fatalf("AddLayer made layer %s, want %s", l.ID, id)
	}
	return id
}

// commit adds layers (bottom first) to s and commits them as a build of
// name with tags and cfg.
func commit(t *testing.T, s *Store, name string, tags []string, cfg Config, layers ...files) *Template {
	t.Helper()
	lease, err := s.NewLease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	var ids []string
	for _, fs := range layers {
		ids = append(ids, addLayer(t, s, lease, fs))
	}
	tpl, err := s.Commit(name, tags, ids, cfg)
	if err != nil {
		t.Fatalf("Commit(%s, %v): %v", name, tags, err)
	}
	return tpl
}

// onDisk lists what the store's directory holds under sub (layers,
// builds, names), sorted, leaving out the lock files.
func onDisk(t *testing.T, s *Store, sub string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Dir(), sub))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".json"))
	}
	return out
}

// sorted returns a sorted copy of ss.
func sorted(ss ...string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}

func TestParseRef(t *testing.T) {
	tests := []struct {
		ref       string
		name, tag string
		ok        bool
	}{
		{"base", "base", "default", true},
		{"base:v2", "base", "v2", true},
		{"my-app_1.2:release-3", "my-app_1.2", "release-3", true},
		{"0abc", "0abc", "default", true},
		{strings.Repeat("a", 63), strings.Repeat("a", 63), "default", true},
		{strings.Repeat("a", 64), "", "", false},
		{"app:" + strings.Repeat("t", 64), "", "", false},
		{"", "", "", false},
		{"Base", "", "", false},
		{".hidden", "", "", false},
		{"-x", "", "", false},
		{"team/app", "", "", false},
		{"team/app:v1", "", "", false},
		{"app:", "", "", false},
		{":v1", "", "", false},
		{"app:V1", "", "", false},
		{"app:-v1", "", "", false},
		{"app:v1:v2", "", "", false},
		{"../etc", "", "", false},
		{"app name", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			name, tag, err := ParseRef(tc.ref)
			if !tc.ok {
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("ParseRef(%q) = %q, %q, %v; want ErrInvalidArgument", tc.ref, name, tag, err)
				}
				return
			}
			if err != nil || name != tc.name || tag != tc.tag {
				t.Errorf("ParseRef(%q) = %q, %q, %v; want %q, %q", tc.ref, name, tag, err, tc.name, tc.tag)
			}
		})
	}
}

// TestRefs: a build is reached by name (its default tag), name:tag and
// its id; Tag and Untag move and drop tags as `docker tag` and `docker
// rmi name:tag` do.
func TestRefs(t *testing.T) {
	s := Open(t.TempDir())
	v1 := commit(t, s, "app", nil, Config{Env: []string{"V=1"}}, files{"v": "1"})
	v2 := commit(t, s, "app", []string{"v2", "latest"}, Config{Env: []string{"V=2"}}, files{"v": "2"})
	other := commit(t, s, "other", []string{"x"}, Config{}, files{"o": "o"})
	if _, err := s.Tag("app:v2", "stable"); err != nil {
		t.Fatalf("Tag: %v", err)
	}
	if _, err := s.Tag("app", "old"); err != nil {
		t.Fatalf("Tag: %v", err)
	}

	tests := []struct {
		ref     string
		want    string   // build id
		tags    []string // its tags, default first
		wantErr error
	}{
		{"app", v1.ID, []string{"default", "old"}, nil},
		{"app:default", v1.ID, []string{"default", "old"}, nil},
		{"app:old", v1.ID, []string{"default", "old"}, nil},
		{"app:v2", v2.ID, []string{"latest", "stable", "v2"}, nil},
		{"app:stable", v2.ID, []string{"latest", "stable", "v2"}, nil},
		{v2.ID, v2.ID, []string{"latest", "stable", "v2"}, nil},
		{"other:x", other.ID, []string{"x"}, nil},
		{"other", "", nil, errdefs.ErrNotFound}, // no default tag
		{"app:v3", "", nil, errdefs.ErrNotFound},
		{"nope", "", nil, errdefs.ErrNotFound},
		{"00000000-0000-4000-8000-000000000000", "", nil, errdefs.ErrNotFound},
		{"App", "", nil, errdefs.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.ref, func(t *testing.T) {
			got, err := s.Get(tc.ref)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("Get(%q) = %v, %v; want %v", tc.ref, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get(%q): %v", tc.ref, err)
			}
			if got.ID != tc.want || !slices.Equal(got.Tags, tc.tags) {
				t.Errorf("Get(%q) = build %s tags %v; want %s tags %v", tc.ref, got.ID, got.Tags, tc.want, tc.tags)
			}
		})
	}
	if got, _ := s.Get("app:v2"); got.Env[0] != "V=2" || got.Name != "app" || got.Ref() != "app:latest" {
		t.Errorf("app:v2 = %+v (ref %s); want its own config, name app, ref app:latest", got.Config, got.Ref())
	}

	tags, err := s.Tags("app")
	if err != nil {
		t.Fatal(err)
	}
	var gotTags []string
	for _, ti := range tags {
		gotTags = append(gotTags, ti.Tag+"="+ti.BuildID[:8])
		if ti.Created.IsZero() {
			t.Errorf("tag %s has no creation time", ti.Tag)
		}
	}
	wantTags := []string{"default=" + v1.ID[:8], "latest=" + v2.ID[:8], "old=" + v1.ID[:8], "stable=" + v2.ID[:8], "v2=" + v2.ID[:8]}
	if diff := cmp.Diff(wantTags, gotTags); diff != "" {
		t.Errorf("Tags(app) (-want +got):\n%s", diff)
	}
	if _, err := s.Tags("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Tags(nope) = %v, want ErrNotFound", err)
	}
	if _, err := s.Tag("app", "Bad Tag"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Tag with a bad tag = %v, want ErrInvalidArgument", err)
	}
	if _, err := s.Tag("nope", "x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Tag of an unknown template = %v, want ErrNotFound", err)
	}
	if _, err := s.Commit("Bad", nil, nil, Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Commit of a bad name = %v, want ErrInvalidArgument", err)
	}
	if _, err := s.Commit("app", []string{"a:b"}, nil, Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Commit with a bad tag = %v, want ErrInvalidArgument", err)
	}
	if _, err := s.Commit("app", nil, []string{strings.Repeat("0", 64)}, Config{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Commit of a layer not in the store = %v, want ErrNotFound", err)
	}

	// Moving every tag off a build removes it; untagging the last tag
	// removes the name.
	steps := []struct {
		name   string
		do     func() error
		builds []string // on disk afterwards
		names  []string
	}{
		{"untag v2 and latest: stable still points at v2", func() error { return s.Untag("app", "v2", "latest") }, sorted(v1.ID, v2.ID, other.ID), []string{"app", "other"}},
		{"untag an unknown tag", func() error { return s.Untag("app", "nope") }, sorted(v1.ID, v2.ID, other.ID), []string{"app", "other"}},
		{"stable moved to v1: v2 goes", func() error { _, err := s.Tag("app", "stable"); return err }, sorted(v1.ID, other.ID), []string{"app", "other"}},
		{"untag all of app", func() error { return s.Untag("app", "default", "old", "stable") }, []string{other.ID}, []string{"other"}},
		{"untag an unknown name", func() error { return s.Untag("app", "default") }, []string{other.ID}, []string{"other"}},
	}
	for _, st := range steps {
		err := st.do()
		if strings.Contains(st.name, "unknown") {
			if !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("%s: %v, want ErrNotFound", st.name, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := onDisk(t, s, "builds"); !slices.Equal(got, st.builds) {
			t.Errorf("%s: builds on disk %v, want %v", st.name, got, st.builds)
		}
		if got := onDisk(t, s, "names"); !slices.Equal(got, st.names) {
			t.Errorf("%s: names on disk %v, want %v", st.name, got, st.names)
		}
	}
	if got := onDisk(t, s, "layers"); !slices.Equal(got, other.Layers) {
		t.Errorf("layers on disk %v, want only other's %v", got, other.Layers)
	}
}

// Layers of the templates TestRemove makes: app and other share bottom.
var (
	bottom   = files{"bin/": "", "bin/sh": "shared shell", "etc/os-release": "shared"}
	appTop   = files{"app/main": "app v1"}
	appTop2  = files{"app/main": "app v2"}
	otherTop = files{"other/main": "other"}
)

// layerID is the id addLayer gives fs.
func layerID(fs files) string {
	h := sha256.New()
	for _, p := range slices.Sorted(maps.Keys(fs)) {
		fmt.Fprintf(h, "%s\x00%s\x00", p, fs[p])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestRemove(t *testing.T) {
	type fixture struct {
		s            *Store
		app, app2    *Template // app (default) and app:v2
		other        *Template
		appUntagged  *Template // an app build no tag points at
		otherUntouch []string
	}
	setup := func(t *testing.T) *fixture {
		s := Open(t.TempDir())
		f := &fixture{s: s}
		f.app = commit(t, s, "app", nil, Config{}, bottom, appTop)
		f.app2 = commit(t, s, "app", []string{"v2"}, Config{}, bottom, appTop2)
		f.other = commit(t, s, "other", nil, Config{}, bottom, otherTop)
		return f
	}
	noUsers := func(string) []string { return nil }
	tests := []struct {
		name    string
		ref     func(f *fixture) string
		usedBy  func(f *fixture) func(string) []string
		wantErr error
		// what is left afterwards
		refs   func(f *fixture) map[string]string // ref -> build id ("" for not found)
		layers []string
	}{
		{
			name: "a name: all its tags and builds; the shared layer stays",
			ref:  func(*fixture) string { return "app" },
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": "", "app:v2": "", f.app.ID: "", f.app2.ID: "", "other": f.other.ID}
			},
			layers: sorted(layerID(bottom), layerID(otherTop)),
		},
		{
			name: "a tag: its build and the layer only it used",
			ref:  func(*fixture) string { return "app:v2" },
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID, "app:v2": "", f.app2.ID: "", "other": f.other.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(otherTop)),
		},
		{
			name: "a build id: the build and the tags pointing at it",
			ref:  func(f *fixture) string { return f.app.ID },
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": "", "app:v2": f.app2.ID, f.app.ID: "", "other": f.other.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop2), layerID(otherTop)),
		},
		{
			name: "the other name: the shared layer stays for app",
			ref:  func(*fixture) string { return "other" },
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID, "app:v2": f.app2.ID, "other": ""}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(appTop2)),
		},
		{
			name: "in use by a sandbox: nothing removed",
			ref:  func(*fixture) string { return "app" },
			usedBy: func(f *fixture) func(string) []string {
				return func(id string) []string {
					if id == f.app2.ID {
						return []string{"sbx-1", "sbx-2"}
					}
					return nil
				}
			},
			wantErr: errdefs.ErrFailedPrecondition,
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID, "app:v2": f.app2.ID, "other": f.other.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(appTop2), layerID(otherTop)),
		},
		{
			name: "a tag of another build in use: removed",
			ref:  func(*fixture) string { return "app:v2" },
			usedBy: func(f *fixture) func(string) []string {
				return func(id string) []string {
					if id == f.app.ID {
						return []string{"sbx-1"}
					}
					return nil
				}
			},
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID, "app:v2": "", "other": f.other.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(otherTop)),
		},
		{
			name:    "an unknown name",
			ref:     func(*fixture) string { return "nope" },
			wantErr: errdefs.ErrNotFound,
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID, "app:v2": f.app2.ID, "other": f.other.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(appTop2), layerID(otherTop)),
		},
		{
			name:    "an unknown tag",
			ref:     func(*fixture) string { return "app:v3" },
			wantErr: errdefs.ErrNotFound,
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID, "app:v2": f.app2.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(appTop2), layerID(otherTop)),
		},
		{
			name:    "an unknown build",
			ref:     func(*fixture) string { return "00000000-0000-4000-8000-000000000000" },
			wantErr: errdefs.ErrNotFound,
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID, "app:v2": f.app2.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(appTop2), layerID(otherTop)),
		},
		{
			name:    "a malformed ref",
			ref:     func(*fixture) string { return "../app" },
			wantErr: errdefs.ErrInvalidArgument,
			refs: func(f *fixture) map[string]string {
				return map[string]string{"app": f.app.ID}
			},
			layers: sorted(layerID(bottom), layerID(appTop), layerID(appTop2), layerID(otherTop)),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			usedBy := noUsers
			if tc.usedBy != nil {
				usedBy = tc.usedBy(f)
			}
			err := f.s.Remove(tc.ref(f), usedBy)
			if tc.wantErr == nil && err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Remove = %v, want %v", err, tc.wantErr)
			}
			if errors.Is(tc.wantErr, errdefs.ErrFailedPrecondition) {
				var inUse *InUseError
				if !errors.As(err, &inUse) || !slices.Equal(inUse.Sandboxes, []string{"sbx-1", "sbx-2"}) || !strings.Contains(err.Error(), "sbx-1, sbx-2") {
					t.Errorf("Remove = %v, want an InUseError naming sbx-1 and sbx-2", err)
				}
			}
			for ref, want := range tc.refs(f) {
				got, err := f.s.Get(ref)
				switch {
				case want == "" && !errors.Is(err, errdefs.ErrNotFound):
					t.Errorf("Get(%s) after Remove = %v, %v; want ErrNotFound", ref, got, err)
				case want != "" && (err != nil || got.ID != want):
					t.Errorf("Get(%s) after Remove = %v, %v; want build %s", ref, got, err, want)
				}
			}
			if got := onDisk(t, f.s, "layers"); !slices.Equal(got, tc.layers) {
				t.Errorf("layers on disk %v, want %v", got, tc.layers)
			}
			for _, id := range tc.layers {
				if _, err := os.Stat(filepath.Join(f.s.Dir(), "layers", id, "rootfs")); err != nil {
					t.Errorf("kept layer %.12s: %v", id, err)
				}
			}
		})
	}
}

// TestRemoveUntagged: removing a name takes its builds no tag points at
// too (a build Tag moved every tag off is collected at once, so one is
// made by hand here, as a crash between Commit's writes would leave it).
func TestRemoveUntagged(t *testing.T) {
	s := Open(t.TempDir())
	app := commit(t, s, "app", nil, Config{}, bottom, appTop)
	stray := *app
	stray.ID = newBuildID()
	stray.Layers = []string{layerID(bottom)}
	if err := writeJSON(s.buildPath(stray.ID), &stray); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(stray.ID); err != nil || len(got.Tags) != 0 {
		t.Fatalf("the untagged build: %v, %v", got, err)
	}
	if err := s.Remove("app", nil); err != nil {
		t.Fatal(err)
	}
	if got := onDisk(t, s, "builds"); len(got) != 0 {
		t.Errorf("builds left after removing app: %v", got)
	}
	if got := onDisk(t, s, "layers"); len(got) != 0 {
		t.Errorf("layers left after removing app: %v", got)
	}
}

// holdMount bind-mounts dir onto itself in a mount namespace of a
// process of its own, as a sandbox's mount of a layer is, until the test
// ends or release is called.
func holdMount(t *testing.T, dir string) (release func()) {
	t.Helper()
	return holdMountCmd(t, `mount --bind "$1" "$1"`, dir)
}

// holdMountCmd runs the shell command mount (given args as $1, ...) in a
// mount namespace of a process of its own, which keeps the mount until
// the test ends or release is called.
func holdMountCmd(t *testing.T, mount string, args ...string) (release func()) {
	t.Helper()
	testenv.RequireRoot(t, "mounts in a mount namespace of its own")
	held := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c",
		mount + ` && echo ready && exec sleep 60`, "sh"}, args...)...)
	out, err := held.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	held.Stderr = os.Stderr
	if err := held.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() { once.Do(func() { held.Process.Kill(); held.Wait() }) }
	t.Cleanup(release)
	buf := make([]byte, 6)
	if _, err := io.ReadFull(out, buf); err != nil {
		t.Fatalf("%s %v: %v", mount, args, err)
	}
	return release
}

// TestCollectKeeps: a layer no build refers to is kept while a mount
// table names it, a lease holds it or the build cache made it within a
// day, and collected once none of these holds.
func TestCollectKeeps(t *testing.T) {
	tests := []struct {
		name string
		// hold keeps layer id of build b in store s; release lets it go.
		hold func(t *testing.T, s *Store, b *Template, id string) (release func())
	}{
		{"mounted in a sandbox's mount namespace", func(t *testing.T, s *Store, _ *Template, id string) func() {
			return holdMount(t, filepath.Join(s.Dir(), "layers", id, "rootfs"))
		}},
		{"a directory inside it mounted", func(t *testing.T, s *Store, _ *Template, id string) func() {
			return holdMount(t, filepath.Join(s.Dir(), "layers", id, "rootfs", "app"))
		}},
		{"its build named by a sandbox root's mount source", func(t *testing.T, s *Store, b *Template, _ string) func() {
			return holdMountCmd(t, `mount -t tmpfs "$1" "$2"`, MountSource(b.ID), t.TempDir())
		}},
		{"held by a lease", func(t *testing.T, s *Store, _ *Template, id string) func() {
			lease, err := s.NewLease()
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Add(id); err != nil {
				t.Fatal(err)
			}
			return lease.Release
		}},
		{"made by a cached step within a day", func(t *testing.T, s *Store, _ *Template, id string) func() {
			key := strings.Repeat("ab", 32)
			if err := s.CachePut(key, id); err != nil {
				t.Fatal(err)
			}
			if got, ok := s.CacheGet(key); !ok || got != id {
				t.Fatalf("CacheGet = %q, %v; want %s", got, ok, id)
			}
			return func() {
				old := time.Now().Add(-cacheGrace - time.Hour)
				os.Chtimes(filepath.Join(s.Dir(), "cache", key), old, old)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Open(t.TempDir())
			commit(t, s, "other", nil, Config{}, bottom, otherTop)
			app := commit(t, s, "app", nil, Config{}, bottom, appTop)
			top := app.Layers[1]
			release := tc.hold(t, s, app, top)
			if err := s.Remove("app", nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get("app"); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Get(app) after Remove = %v, want ErrNotFound", err)
			}
			if _, err := os.Stat(filepath.Join(s.Dir(), "layers", top, "rootfs", "app", "main")); err != nil {
				t.Errorf("the held layer was collected: %v", err)
			}
			if _, err := s.Collect(); err != nil {
				t.Fatal(err)
			}
			if !s.HasLayer(top) {
				t.Errorf("Collect removed the held layer")
			}
			release()
			size := must(s.Layer(top)).Size
			freed, err := s.Collect()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := onDisk(t, s, "layers"), sorted(layerID(bottom), layerID(otherTop)); !slices.Equal(got, want) {
				t.Errorf("layers after the hold ended: %v, want %v", got, want)
			}
			if freed != size {
				t.Errorf("Collect freed %d bytes, want the layer's %d", freed, size)
			}
			if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "cache")); len(ents) != 0 {
				t.Errorf("cache entries of a collected layer left: %v", ents)
			}
			if got := onDisk(t, s, "builds"); len(got) != 1 {
				t.Errorf("builds after the hold ended: %v, want other's only", got)
			}
			if ents, _ := os.ReadDir(filepath.Join(s.Dir(), "leases")); len(ents) != 0 {
				t.Errorf("leases left: %v", ents)
			}
		})
	}
}

// TestLeaseOfDeadHolder: a lease whose holder has gone (its file no
// longer locked) holds nothing.
func TestLeaseOfDeadHolder(t *testing.T) {
	s := Open(t.TempDir())
	lease, err := s.NewLease()
	if err != nil {
		t.Fatal(err)
	}
	id := addLayer(t, s, lease, appTop)
	// What a holder that died leaves: the file, unlocked.
	path := lease.path
	b, _ := os.ReadFile(path)
	lease.f.Close()
	lease.f = nil
	if !strings.Contains(string(b), id) {
		t.Fatalf("the lease file holds %q, not the layer", b)
	}
	if _, err := s.Collect(); err != nil {
		t.Fatal(err)
	}
	if s.HasLayer(id) {
		t.Error("a dead holder's lease kept its layer")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead lease's file is left: %v", err)
	}
}

func TestUsage(t *testing.T) {
	s := Open(t.TempDir())
	big := files{"big": strings.Repeat("x", 256<<10)}
	commit(t, s, "app", nil, Config{}, big, appTop)
	commit(t, s, "app", []string{"v2"}, Config{}, big, appTop2)
	commit(t, s, "other", nil, Config{}, big, otherTop)
	commit(t, s, "solo", nil, Config{}, otherTop)
	size := func(fs files) int64 { return must(s.Layer(layerID(fs))).Size }
	if size(big) < 256<<10 || size(appTop) <= 0 {
		t.Fatalf("layer sizes: big %d, top %d; want at least their content", size(big), size(appTop))
	}
	got, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Usage{
		"app":   {Own: size(appTop) + size(appTop2), Shared: size(big)},
		"other": {Shared: size(big) + size(otherTop)},
		"solo":  {Shared: size(otherTop)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Usage (-want +got):\n%s", diff)
	}
}

// TestConcurrentCommits: Commits of one name from many goroutines leave
// every tag pointing at a build that exists, and no build no tag points
// at.
func TestConcurrentCommits(t *testing.T) {
	tests := []struct {
		name string
		tags func(i int) []string
		// want builds on disk and tags afterwards
		builds, ntags int
	}{
		{"all to the default tag", func(int) []string { return nil }, 1, 1},
		{"each its own tag and the default", func(i int) []string { return []string{DefaultTag, fmt.Sprintf("t%d", i)} }, 16, 17},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Open(t.TempDir())
			lease, err := s.NewLease()
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release()
			layer := addLayer(t, s, lease, appTop)
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for i := range 16 {
				wg.Go(func() {
					_, err := s.Commit("app", tc.tags(i), []string{layer}, Config{})
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("Commit: %v", err)
				}
			}
			tags, err := s.Tags("app")
			if err != nil {
				t.Fatal(err)
			}
			if len(tags) != tc.ntags {
				t.Errorf("%d tags, want %d: %v", len(tags), tc.ntags, tags)
			}
			pointed := map[string]bool{}
			for _, ti := range tags {
				pointed[ti.BuildID] = true
				if _, err := s.Get(ti.BuildID); err != nil {
					t.Errorf("tag %s points at %s: %v", ti.Tag, ti.BuildID, err)
				}
			}
			builds := onDisk(t, s, "builds")
			if len(builds) != tc.builds {
				t.Errorf("%d builds on disk, want %d", len(builds), tc.builds)
			}
			for _, b := range builds {
				if !pointed[b] {
					t.Errorf("build %s on disk, but no tag points at it", b)
				}
			}
			def, err := s.Get("app")
			if err != nil || !slices.Equal(def.Layers, []string{layer}) {
				t.Errorf("Get(app) = %v, %v", def, err)
			}
			for _, dir := range []string{"builds", "names"} {
				for _, f := range onDisk(t, s, dir) {
					if strings.Contains(f, ".tmp-") {
						t.Errorf("%s/%s: a temporary file left", dir, f)
					}
				}
			}
		})
	}
}

// TestStoreModes: layers/ is 0700, so that no host user reaches an
// image's setuid files; builds and names are readable.
func TestStoreModes(t *testing.T) {
	s := Open(filepath.Join(t.TempDir(), "store"))
	commit(t, s, "app", nil, Config{}, appTop)
	for _, d := range []struct {
		sub  string
		mode os.FileMode
	}{{"layers", 0o700}, {"cache", 0o700}, {"leases", 0o700}, {"builds", 0o755}, {"names", 0o755}} {
		fi, err := os.Stat(filepath.Join(s.Dir(), d.sub))
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode().Perm() != d.mode {
			t.Errorf("%s: mode %v, want %v", d.sub, fi.Mode().Perm(), d.mode)
		}
	}
	// A store made by hand with a looser layers/ is tightened on first write.
	os.Chmod(filepath.Join(s.Dir(), "layers"), 0o755)
	commit(t, s, "app", nil, Config{}, appTop2)
	if fi, _ := os.Stat(filepath.Join(s.Dir(), "layers")); fi.Mode().Perm() != 0o700 {
		t.Errorf("layers/ left at %v", fi.Mode().Perm())
	}
}

// TestReservedNames: names starting with PausedPrefix hold the files of
// paused sandboxes: nothing but such a build may be committed under one,
// and none may be tagged (review 16: a key took "paused-<id>" to keep
// another key's sandbox from pausing).
func TestReservedNames(t *testing.T) {
	s := Open(t.TempDir())
	lease, err := s.NewLease()
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release()
	layer := addLayer(t, s, lease, files{"f": "x"})
	if _, err := s.Commit("paused-i123", nil, []string{layer}, Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a template committed as paused-i123 = %v; want invalid argument", err)
	}
	if _, err := s.Commit("paused-i123", nil, []string{layer}, Config{Snapshot: &SnapshotOf{Sandbox: "i123", Kind: SnapshotUser}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a snapshot committed as paused-i123 = %v; want invalid argument", err)
	}
	p, err := s.Commit("paused-i123", nil, []string{layer}, Config{Snapshot: &SnapshotOf{Sandbox: "i123", Kind: SnapshotPause}})
	if err != nil {
		t.Fatalf("a paused sandbox's files: %v", err)
	}
	if _, err := s.Tag(p.ID, "mine"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a tag on paused-i123 = %v; want invalid argument", err)
	}
}
