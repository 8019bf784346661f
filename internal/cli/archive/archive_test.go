package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// node is what a test expects at a path: a file (content, mode), a
// directory (mode) or a symlink (target).
type node struct {
	Kind    string // "file", "dir", "link"
	Content string
	Mode    fs.FileMode
	Target  string
}

// snapshot describes the tree under dir, keyed by slash-separated
// relative path ("." for dir itself).
func snapshot(t *testing.T, dir string) map[string]node {
	t.Helper()
	out := map[string]node{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = node{Kind: "link", Target: target}
		case fi.IsDir():
			out[rel] = node{Kind: "dir", Mode: fi.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid)}
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = node{Kind: "file", Content: string(b), Mode: fi.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// makeTree builds the tree the round-trip tests copy.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub", "deeper"), 0o755))
	must(os.Mkdir(filepath.Join(dir, "empty"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "secret"), []byte("s3cret"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "sub", "deeper", "data.txt"), []byte(strings.Repeat("x", 5000)), 0o644))
	must(os.Symlink("sub/deeper/data.txt", filepath.Join(dir, "link")))
	must(os.Symlink("/nonexistent/abs", filepath.Join(dir, "sub", "abs-link")))
	must(os.Mkdir(filepath.Join(dir, "readonly"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "readonly", "f"), []byte("ro"), 0o444))
	must(os.Chmod(filepath.Join(dir, "readonly"), 0o555))
	must(os.Chmod(filepath.Join(dir, "sub"), 0o711))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(os.Chtimes(filepath.Join(dir, "run.sh"), old, old))
}

func TestPackUnpackRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "tree")
	makeTree(t, src)
	want := snapshot(t, src)

	tests := []struct {
		name   string // archive name of the source
		opts   Options
		into   string // where the copy lands, relative to dst
		mkInto bool   // the destination exists already (contents copy): it keeps its mode
	}{
		{name: "tree", opts: Options{Name: "tree"}, into: "tree"},
		{name: "tree", opts: Options{Name: "tree", Rename: "renamed"}, into: "renamed"},
		{name: ".", opts: Options{Name: ".", Rename: "new"}, into: "new"},
		{name: ".", into: "existing", mkInto: true},
	}
	for _, tt := range tests {
		t.Run(tt.name+"->"+tt.into, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Pack(&buf, src, tt.name); err != nil {
				t.Fatal(err)
			}
			size, err := Size(src)
			if err != nil {
				t.Fatal(err)
			}
			if int64(buf.Len()) != size {
				t.Errorf("Size = %d, Pack wrote %d", size, buf.Len())
			}
			dst := t.TempDir()
			dir := dst
			if tt.mkInto {
				dir = filepath.Join(dst, tt.into)
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := Unpack(&buf, dir, tt.opts); err != nil {
				t.Fatal(err)
			}
			got := snapshot(t, filepath.Join(dst, tt.into))
			want := want
			if tt.mkInto {
				want = maps.Clone(want)
				want["."] = node{Kind: "dir", Mode: 0o700}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("tree differs (-want +got):\n%s", diff)
			}
			fi, err := os.Stat(filepath.Join(dst, tt.into, "run.sh"))
			if err != nil {
				t.Fatal(err)
			}
			if y := fi.ModTime().UTC().Year(); y != 2020 {
				t.Errorf("run.sh modified in %d, want 2020 (mtime kept)", y)
			}
		})
	}
}

// TestUnpackGNUTar reads what GNU tar writes, both forms `hutch cp` asks
// a sandbox for.
func TestUnpackGNUTar(t *testing.T) {
	tarBin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar")
	}
	parent := t.TempDir()
	src := filepath.Join(parent, "tree")
	makeTree(t, src)
	want := snapshot(t, src)
	for _, tc := range []struct {
		name string
		args []string
		opts Options
		into string
	}{
		{"named", []string{"-C", parent, "./tree"}, Options{Name: "tree", Rename: "copy"}, "copy"},
		{"contents", []string{"-C", src, "."}, Options{}, "."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(tarBin, append([]string{"-c", "-f", "-"}, tc.args...)...).Output()
			if err != nil {
				t.Fatal(err)
			}
			dst := t.TempDir()
			if err := Unpack(bytes.NewReader(out), dst, tc.opts); err != nil {
				t.Fatal(err)
			}
			got := snapshot(t, filepath.Join(dst, tc.into))
			delete(got, ".")
			w := map[string]node{}
			for k, v := range want {
				if k != "." {
					w[k] = v
				}
			}
			if diff := cmp.Diff(w, got); diff != "" {
				t.Errorf("tree differs (-want +got):\n%s", diff)
			}
		})
	}
}

// entry is one header (and content) of a hand-made archive.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func makeTar(t *testing.T, entries []entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body)), ModTime: time.Unix(1e9, 0), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

// TestUnpackRefusesEscapes feeds Unpack malicious archives: none may touch
// anything outside the destination.
func TestUnpackRefusesEscapes(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dst, outside string) // before unpacking
		entries []entry
		opts    Options
		wantErr string
	}{
		{
			name:    "absolute name",
			entries: []entry{{name: "OUTSIDE/evil", typ: tar.TypeReg, body: "x"}},
			wantErr: "absolute name",
		},
		{
			name:    "dot-dot",
			entries: []entry{{name: "../outside/evil", typ: tar.TypeReg, body: "x"}},
			wantErr: `".."`,
		},
		{
			name:    "dot-dot inside a name",
			entries: []entry{{name: "a/../../outside/evil", typ: tar.TypeReg, body: "x"}},
			wantErr: `".."`,
		},
		{
			name:    "dot-dot directory",
			entries: []entry{{name: "../outside/newdir/", typ: tar.TypeDir, mode: 0o777}},
			wantErr: `".."`,
		},
		{
			name: "through an absolute symlink the archive made",
			entries: []entry{
				{name: "link", typ: tar.TypeSymlink, link: "OUTSIDE"},
				{name: "link/evil", typ: tar.TypeReg, body: "x"},
			},
			wantErr: "link",
		},
		{
			name: "through a relative symlink the archive made",
			entries: []entry{
				{name: "up", typ: tar.TypeSymlink, link: "../outside"},
				{name: "up/evil", typ: tar.TypeReg, body: "x"},
			},
			wantErr: "escapes",
		},
		{
			name: "through a symlink chain",
			entries: []entry{
				{name: "a/", typ: tar.TypeDir, mode: 0o755},
				{name: "a/b", typ: tar.TypeSymlink, link: "../c"},
				{name: "c", typ: tar.TypeSymlink, link: "../outside"},
				{name: "a/b/evil", typ: tar.TypeReg, body: "x"},
			},
			wantErr: "escapes",
		},
		{
			name: "directory through a symlink",
			entries: []entry{
				{name: "up", typ: tar.TypeSymlink, link: "../outside"},
				{name: "up/newdir/", typ: tar.TypeDir, mode: 0o777},
			},
			wantErr: "escapes",
		},
		{
			name: "symlink then a hard link through it",
			entries: []entry{
				{name: "up", typ: tar.TypeSymlink, link: "../outside"},
				{name: "stolen", typ: tar.TypeLink, link: "up/target"},
			},
			wantErr: "escapes",
		},
		{
			name: "through a symlink that was there",
			setup: func(t *testing.T, dst, outside string) {
				if err := os.Symlink(outside, filepath.Join(dst, "pre")); err != nil {
					t.Fatal(err)
				}
			},
			entries: []entry{{name: "pre/evil", typ: tar.TypeReg, body: "x"}},
			wantErr: "pre",
		},
		{
			name:    "hard link out",
			entries: []entry{{name: "hl", typ: tar.TypeLink, link: "../outside/target"}},
			wantErr: `".."`,
		},
		{
			name:    "hard link to an absolute name",
			entries: []entry{{name: "hl", typ: tar.TypeLink, link: "OUTSIDE/target"}},
			wantErr: "absolute name",
		},
		{
			name:    "hard link to the destination",
			entries: []entry{{name: "hl", typ: tar.TypeLink, link: "./"}},
			wantErr: "not a file",
		},
		{
			name:    "file in the destination's place",
			entries: []entry{{name: ".", typ: tar.TypeReg, body: "x"}},
			wantErr: "only a directory",
		},
		{
			name:    "renamed dot-dot",
			entries: []entry{{name: "top/../../outside/evil", typ: tar.TypeReg, body: "x"}},
			opts:    Options{Name: "top", Rename: "new"},
			wantErr: `".."`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dst := filepath.Join(base, "dst")
			outside := filepath.Join(base, "outside")
			for _, d := range []string{dst, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(outside, "target"), []byte("original"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, dst, outside)
			}
			for i := range tt.entries {
				e := &tt.entries[i]
				e.name = strings.ReplaceAll(e.name, "OUTSIDE", outside)
				e.link = strings.ReplaceAll(e.link, "OUTSIDE", outside)
			}
			before := snapshot(t, outside)
			err := Unpack(makeTar(t, tt.entries), dst, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Unpack: %v; want an error mentioning %q", err, tt.wantErr)
			}
			t.Logf("Unpack: %v", err)
			if diff := cmp.Diff(before, snapshot(t, outside)); diff != "" {
				t.Errorf("outside the destination changed (-before +after):\n%s", diff)
			}
			if _, err := os.Lstat(filepath.Join(base, "evil")); err == nil {
				t.Errorf("%s was created", filepath.Join(base, "evil"))
			}
		})
	}
}

func TestUnpack(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dst, outside string)
		entries []entry
		opts    Options
		want    map[string]node // paths under dst (only those listed are checked)
	}{
		{
			name: "setuid and setgid are dropped, sticky kept",
			entries: []entry{
				{name: "suid", typ: tar.TypeReg, body: "x", mode: 0o4755},
				{name: "sgid", typ: tar.TypeReg, body: "x", mode: 0o2750},
				{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
			},
			want: map[string]node{
				"suid": {Kind: "file", Content: "x", Mode: 0o755},
				"sgid": {Kind: "file", Content: "x", Mode: 0o750},
				"tmp":  {Kind: "dir", Mode: 0o777 | fs.ModeSticky},
			},
		},
		{
			name: "a file replaces a symlink, not what it points to",
			setup: func(t *testing.T, dst, outside string) {
				if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(dst, "f")); err != nil {
					t.Fatal(err)
				}
			},
			entries: []entry{{name: "f", typ: tar.TypeReg, body: "new", mode: 0o600}},
			want:    map[string]node{"f": {Kind: "file", Content: "new", Mode: 0o600}},
		},
		{
			name: "a directory replaces a file",
			setup: func(t *testing.T, dst, outside string) {
				os.WriteFile(filepath.Join(dst, "d"), nil, 0o644)
			},
			entries: []entry{{name: "d/", typ: tar.TypeDir, mode: 0o750}, {name: "d/x", typ: tar.TypeReg, body: "1"}},
			want:    map[string]node{"d": {Kind: "dir", Mode: 0o750}, "d/x": {Kind: "file", Content: "1", Mode: 0o644}},
		},
		{
			name:    "symlinks keep absolute and outward targets (never followed)",
			entries: []entry{{name: "abs", typ: tar.TypeSymlink, link: "/etc/passwd"}, {name: "rel", typ: tar.TypeSymlink, link: "../../x"}},
			want:    map[string]node{"abs": {Kind: "link", Target: "/etc/passwd"}, "rel": {Kind: "link", Target: "../../x"}},
		},
		{
			name:    "hard link inside",
			entries: []entry{{name: "a", typ: tar.TypeReg, body: "same"}, {name: "b", typ: tar.TypeLink, link: "a"}},
			want:    map[string]node{"b": {Kind: "file", Content: "same", Mode: 0o644}},
		},
		{
			name:    "missing parents are made",
			entries: []entry{{name: "p/q/r", typ: tar.TypeReg, body: "deep"}},
			want:    map[string]node{"p": {Kind: "dir", Mode: 0o755}, "p/q/r": {Kind: "file", Content: "deep", Mode: 0o644}},
		},
		{
			name:    "rename of the top entry",
			entries: []entry{{name: "./orig/", typ: tar.TypeDir, mode: 0o700}, {name: "./orig/f", typ: tar.TypeReg, body: "1"}},
			opts:    Options{Name: "orig", Rename: "new"},
			want:    map[string]node{".": {Kind: "dir", Mode: 0o755}, "new": {Kind: "dir", Mode: 0o700}, "new/f": {Kind: "file", Content: "1", Mode: 0o644}},
		},
		{
			name:    "devices and FIFOs are skipped",
			entries: []entry{{name: "fifo", typ: tar.TypeFifo}, {name: "null", typ: tar.TypeChar}, {name: "ok", typ: tar.TypeReg, body: "1"}},
			want:    map[string]node{"ok": {Kind: "file", Content: "1", Mode: 0o644}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dst := filepath.Join(base, "dst")
			outside := filepath.Join(base, "outside")
			os.Mkdir(dst, 0o755)
			os.Mkdir(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "target"), []byte("original"), 0o600)
			if tt.setup != nil {
				tt.setup(t, dst, outside)
			}
			if err := Unpack(makeTar(t, tt.entries), dst, tt.opts); err != nil {
				t.Fatal(err)
			}
			got := snapshot(t, dst)
			for p, w := range tt.want {
				if diff := cmp.Diff(w, got[p]); diff != "" {
					t.Errorf("%s (-want +got):\n%s", p, diff)
				}
			}
			var names []string
			for p := range got {
				names = append(names, p)
			}
			sort.Strings(names)
			if b, _ := os.ReadFile(filepath.Join(outside, "target")); string(b) != "original" {
				t.Errorf("outside target now %q", b)
			}
			if _, err := os.Lstat(filepath.Join(dst, "fifo")); err == nil {
				t.Errorf("a FIFO was made; entries: %v", names)
			}
		})
	}
}

func TestUnpackRejectsBadOptions(t *testing.T) {
	for _, opts := range []Options{
		{Name: "x", Rename: "a/b"}, {Name: "x", Rename: "."}, {Name: "x", Rename: ".."},
		{Rename: "x"}, {Name: "."}, {Name: ".."}, {Name: "a/b"}, {Name: "/"},
	} {
		if err := Unpack(makeTar(t, []entry{{name: "x", typ: tar.TypeReg}}), t.TempDir(), opts); err == nil {
			t.Errorf("%+v accepted", opts)
		}
	}
}

// TestUnpackKeepsHoles extracts files that were sparse where they were
// archived: a tar stream carries their zeros either in full (plain tar, or
// Go's writer) or as a map of holes (GNU tar --sparse). Both come out
// sparse, with the same bytes.
func TestUnpackKeepsHoles(t *testing.T) {
	const size = 48 << 20
	src := t.TempDir()
	sparseFile := filepath.Join(src, "holes")
	f, err := os.Create(sparseFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		off  int64
		data string
	}{{0, "head"}, {10<<20 + 5, "middle"}} { // then a trailing hole
		if _, err := f.WriteAt([]byte(w.data), w.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want, err := os.ReadFile(sparseFile)
	if err != nil {
		t.Fatal(err)
	}

	gnuTar := func(args ...string) func(t *testing.T) *bytes.Buffer {
		return func(t *testing.T) *bytes.Buffer {
			tarBin, err := exec.LookPath("tar")
			if err != nil {
				t.Skip("no tar")
			}
			out, err := exec.Command(tarBin, append(append([]string{"-c", "-f", "-"}, args...), "-C", src, "holes")...).Output()
			if err != nil {
				t.Fatal(err)
			}
			return bytes.NewBuffer(out)
		}
	}
	for _, tc := range []struct {
		name   string
		stream func(t *testing.T) *bytes.Buffer
	}{
		{"zeros in the stream", func(t *testing.T) *bytes.Buffer {
			return makeTar(t, []entry{{name: "holes", typ: tar.TypeReg, body: string(want)}})
		}},
		{"GNU tar", gnuTar()},
		{"GNU tar --sparse", gnuTar("--sparse")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := tc.stream(t)
			dst := t.TempDir()
			if err := Unpack(stream, dst, Options{}); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dst, "holes")
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("extracted %d bytes, not the %d archived", len(got), len(want))
			}
			fi, _ := os.Stat(p)
			if alloc := fi.Sys().(*syscall.Stat_t).Blocks * 512; alloc > 1<<20 {
				t.Errorf("%d bytes allocated for a %d-byte file of two short runs of data; want holes", alloc, size)
			}
		})
	}
}

// TestUnpackRemovesPartialFile cuts a stream in the middle of a file:
// Unpack fails, the entries before stay and the cut file is gone.
func TestUnpackRemovesPartialFile(t *testing.T) {
	stream := makeTar(t, []entry{
		{name: "first", typ: tar.TypeReg, body: "complete"},
		{name: "cut", typ: tar.TypeReg, body: strings.Repeat("x", 100<<10)},
	}).Bytes()
	cut := bytes.Index(stream, []byte("xxxx")) + 50<<10
	dst := t.TempDir()
	err := Unpack(bytes.NewReader(stream[:cut]), dst, Options{})
	if err == nil || !strings.Contains(err.Error(), `entry "cut"`) {
		t.Fatalf("Unpack of a cut stream: %v, want an error about entry \"cut\"", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "first")); string(b) != "complete" {
		t.Errorf("first: %q, %v; want it extracted", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "cut")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the partial file is still there (Lstat: %v)", err)
	}
}

// hostDir makes the directory a copy from a sandbox lands in, as a home
// directory would be, with a sibling directory beside the tree: dst,
// mode 0755, holding .bashrc, .ssh/authorized_keys and sibling/f.
func hostDir(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "home")
	for _, step := range []error{
		os.MkdirAll(filepath.Join(dst, ".ssh"), 0o700),
		os.Mkdir(filepath.Join(dst, "sibling"), 0o755),
		os.WriteFile(filepath.Join(dst, ".bashrc"), []byte("mine\n"), 0o644),
		os.WriteFile(filepath.Join(dst, ".ssh", "authorized_keys"), []byte("ssh-ed25519 mine\n"), 0o600),
		os.WriteFile(filepath.Join(dst, "sibling", "f"), []byte("sibling\n"), 0o644),
		os.Chmod(dst, 0o755),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return dst
}

// leftovers lists the temporary directories Unpack left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, stagePattern))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// archived is the modification time makeTar gives every entry.
var archived = time.Unix(1e9, 0)

// TestUnpackKeepsToTheTree feeds a copy of the tree "results" streams
// with entries elsewhere, as a sandbox whose tar is not tar would send
// them: each is refused with an error naming it, nothing outside the tree
// changes, and a new tree is not made at all.
func TestUnpackKeepsToTheTree(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		wantErr string // besides the entry's name
		entry   string // the refused entry, if not the last
	}{
		{
			name:    "a file beside the tree",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o755}, {name: ".bashrc", typ: tar.TypeReg, body: "echo PWNED\n"}},
			wantErr: `outside "results"`,
		},
		{
			name:    "the review's stream",
			entries: []entry{{name: "./.bashrc", typ: tar.TypeReg, body: "echo PWNED\n"}, {name: "./.ssh/authorized_keys", typ: tar.TypeReg, body: "ssh-ed25519 AAAA attacker\n"}},
			wantErr: `outside "results"`,
			entry:   "./.bashrc",
		},
		{
			name:    "under a directory beside the tree",
			entries: []entry{{name: "./.ssh/authorized_keys", typ: tar.TypeReg, body: "ssh-ed25519 AAAA attacker\n"}},
			wantErr: `outside "results"`,
		},
		{
			name:    "another tree",
			entries: []entry{{name: "other/x", typ: tar.TypeReg, body: "x"}},
			wantErr: `outside "results"`,
		},
		{
			name:    "a name the tree's is a prefix of",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o755}, {name: "resultsx/y", typ: tar.TypeReg, body: "x"}},
			wantErr: `outside "results"`,
		},
		{
			name:    "the destination's own entry",
			entries: []entry{{name: "./", typ: tar.TypeDir, mode: 0o1777}, {name: "./results/", typ: tar.TypeDir, mode: 0o755}},
			wantErr: `outside "results"`,
			entry:   "./",
		},
		{
			name:    "the destination's own entry, last",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o755}, {name: "./results/f", typ: tar.TypeReg, body: "1"}, {name: ".", typ: tar.TypeDir, mode: 0o1777}},
			wantErr: `outside "results"`,
		},
		{
			name:    "a sibling's name, cleaned",
			entries: []entry{{name: "results/../sibling/f", typ: tar.TypeReg, body: "x"}},
			wantErr: `".."`,
		},
		{
			name:    "absolute",
			entries: []entry{{name: "/results/f", typ: tar.TypeReg, body: "x"}},
			wantErr: "absolute name",
		},
		{
			name:    "a hard link to a file beside the tree",
			entries: []entry{{name: "results/", typ: tar.TypeDir, mode: 0o755}, {name: "results/keys", typ: tar.TypeLink, link: ".ssh/authorized_keys"}},
			wantErr: `outside "results"`,
		},
		{
			name: "through a symlink in the tree to a sibling",
			entries: []entry{
				{name: "results/", typ: tar.TypeDir, mode: 0o755},
				{name: "results/up", typ: tar.TypeSymlink, link: "../sibling"},
				{name: "results/up/f", typ: tar.TypeReg, body: "x"},
			},
			wantErr: "symlink out of the tree",
		},
		{
			name: "a directory through a symlink in the tree",
			entries: []entry{
				{name: "results/", typ: tar.TypeDir, mode: 0o755},
				{name: "results/home", typ: tar.TypeSymlink, link: ".."},
				{name: "results/home/.ssh/", typ: tar.TypeDir, mode: 0o777},
			},
			wantErr: "symlink out of the tree",
		},
		{
			name: "a hard link through a symlink in the tree",
			entries: []entry{
				{name: "results/", typ: tar.TypeDir, mode: 0o755},
				{name: "results/home", typ: tar.TypeSymlink, link: ".."},
				{name: "results/keys", typ: tar.TypeLink, link: "results/home/.ssh/authorized_keys"},
			},
			wantErr: "symlink out of the tree",
		},
	}
	for _, tt := range tests {
		for _, merge := range []bool{false, true} {
			mode := "new tree"
			if merge {
				mode = "existing tree"
			}
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				dst := hostDir(t)
				tree := filepath.Join(dst, "results")
				if merge {
					os.Mkdir(tree, 0o750)
					os.WriteFile(filepath.Join(tree, "old"), []byte("old"), 0o644)
				}
				before := snapshot(t, dst)
				err := Unpack(makeTar(t, tt.entries), dst, Options{Name: "results"})
				entry := tt.entry
				if entry == "" {
					entry = tt.entries[len(tt.entries)-1].name
				}
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), strconv.Quote(entry)) {
					t.Fatalf("Unpack: %v; want an error naming entry %q and mentioning %q", err, entry, tt.wantErr)
				}
				after := snapshot(t, dst)
				if merge {
					// What was extracted stays, inside the tree.
					for p := range after {
						if p == "results" || strings.HasPrefix(p, "results/") {
							delete(after, p)
						}
					}
					for p := range before {
						if p == "results" || strings.HasPrefix(p, "results/") {
							delete(before, p)
						}
					}
					if fi, err := os.Stat(tree); err != nil || fi.Mode().Perm() != 0o750 {
						t.Errorf("the existing tree: %v, %v; want its mode 0750 kept", fi.Mode(), err)
					}
					if b, _ := os.ReadFile(filepath.Join(tree, "old")); string(b) != "old" {
						t.Errorf("results/old is now %q", b)
					}
				}
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("the destination changed (-before +after):\n%s", diff)
				}
				if l := leftovers(t, dst); len(l) > 0 {
					t.Errorf("left behind: %v", l)
				}
				if fi, _ := os.Stat(dst); fi.ModTime().Equal(archived) {
					t.Errorf("the destination took the archive's time")
				}
			})
		}
	}
}

// TestUnpackTree copies the tree "results" into a directory: it lands at
// results (or the new name) and nowhere else, the tree takes the mode of
// its entry in the stream (setuid and setgid dropped), and the directory
// it lands in keeps its own.
func TestUnpackTree(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dst string)
		entries []entry
		opts    Options
		want    map[string]node // paths under dst that are not in hostDir's
	}{
		{
			name:    "GNU tar's names",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o750}, {name: "./results/f", typ: tar.TypeReg, body: "1"}, {name: "./results/sub/g", typ: tar.TypeReg, body: "2"}},
			want: map[string]node{
				"results": {Kind: "dir", Mode: 0o750}, "results/f": {Kind: "file", Content: "1", Mode: 0o644},
				"results/sub": {Kind: "dir", Mode: 0o755}, "results/sub/g": {Kind: "file", Content: "2", Mode: 0o644},
			},
		},
		{
			name:    "plain and doubled slashes",
			entries: []entry{{name: "results", typ: tar.TypeDir, mode: 0o700}, {name: "results//f", typ: tar.TypeReg, body: "1"}, {name: "./results/./g", typ: tar.TypeReg, body: "2"}},
			want:    map[string]node{"results": {Kind: "dir", Mode: 0o700}, "results/f": {Kind: "file", Content: "1", Mode: 0o644}, "results/g": {Kind: "file", Content: "2", Mode: 0o644}},
		},
		{
			name:    "a sticky, world-writable tree",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o1777}},
			want:    map[string]node{"results": {Kind: "dir", Mode: 0o777 | fs.ModeSticky}},
		},
		{
			name:    "a setuid and setgid tree",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o6755}, {name: "./results/f", typ: tar.TypeReg, body: "1"}},
			want:    map[string]node{"results": {Kind: "dir", Mode: 0o755}, "results/f": {Kind: "file", Content: "1", Mode: 0o644}},
		},
		{
			name:    "a read-only tree",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o500}, {name: "./results/f", typ: tar.TypeReg, body: "1", mode: 0o400}},
			want:    map[string]node{"results": {Kind: "dir", Mode: 0o500}, "results/f": {Kind: "file", Content: "1", Mode: 0o400}},
		},
		{
			name:    "a tree without its own entry",
			entries: []entry{{name: "./results/f", typ: tar.TypeReg, body: "1"}},
			want:    map[string]node{"results": {Kind: "dir", Mode: 0o755}, "results/f": {Kind: "file", Content: "1", Mode: 0o644}},
		},
		{
			name:    "renamed",
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o750}, {name: "./results/f", typ: tar.TypeReg, body: "1"}},
			opts:    Options{Name: "results", Rename: "copy"},
			want:    map[string]node{"copy": {Kind: "dir", Mode: 0o750}, "copy/f": {Kind: "file", Content: "1", Mode: 0o644}},
		},
		{
			name:    "a directory's contents as a new tree",
			entries: []entry{{name: "./", typ: tar.TypeDir, mode: 0o1777}, {name: "./f", typ: tar.TypeReg, body: "1"}},
			opts:    Options{Name: ".", Rename: "copy"},
			want:    map[string]node{"copy": {Kind: "dir", Mode: 0o777 | fs.ModeSticky}, "copy/f": {Kind: "file", Content: "1", Mode: 0o644}},
		},
		{
			name:    "a symlink",
			entries: []entry{{name: "./results", typ: tar.TypeSymlink, link: "../etc/passwd"}},
			want:    map[string]node{"results": {Kind: "link", Target: "../etc/passwd"}},
		},
		{
			name: "a symlink replacing a file",
			setup: func(t *testing.T, dst string) {
				os.WriteFile(filepath.Join(dst, "results"), []byte("old"), 0o644)
			},
			entries: []entry{{name: "./results", typ: tar.TypeSymlink, link: "target"}},
			want:    map[string]node{"results": {Kind: "link", Target: "target"}},
		},
		{
			name: "a directory replacing a symlink, not what it points to",
			setup: func(t *testing.T, dst string) {
				os.Symlink("sibling", filepath.Join(dst, "results"))
			},
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o755}, {name: "./results/f", typ: tar.TypeReg, body: "new"}},
			want:    map[string]node{"results": {Kind: "dir", Mode: 0o755}, "results/f": {Kind: "file", Content: "new", Mode: 0o644}},
		},
		{
			name: "merged into an existing tree",
			setup: func(t *testing.T, dst string) {
				os.Mkdir(filepath.Join(dst, "results"), 0o700)
				os.WriteFile(filepath.Join(dst, "results", "old"), []byte("old"), 0o644)
				os.WriteFile(filepath.Join(dst, "results", "f"), []byte("old f"), 0o644)
			},
			entries: []entry{{name: "./results/", typ: tar.TypeDir, mode: 0o750}, {name: "./results/f", typ: tar.TypeReg, body: "1"}},
			want: map[string]node{
				"results": {Kind: "dir", Mode: 0o750}, "results/f": {Kind: "file", Content: "1", Mode: 0o644},
				"results/old": {Kind: "file", Content: "old", Mode: 0o644},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := hostDir(t)
			home := snapshot(t, dst)
			if tt.setup != nil {
				tt.setup(t, dst)
			}
			opts := tt.opts
			if opts.Name == "" {
				opts.Name = "results"
			}
			if err := Unpack(makeTar(t, tt.entries), dst, opts); err != nil {
				t.Fatal(err)
			}
			want := maps.Clone(home)
			maps.Copy(want, tt.want)
			got := snapshot(t, dst)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the destination (-want +got):\n%s", diff)
			}
			// The tree's own entry, when there is one, gives its time.
			for p := range tt.want {
				if got[p].Kind != "dir" || strings.Contains(p, "/") || tt.entries[0].typ != tar.TypeDir {
					continue
				}
				if fi, _ := os.Stat(filepath.Join(dst, p)); !fi.ModTime().Equal(archived) {
					t.Errorf("%s modified at %v, want the archive's %v", p, fi.ModTime(), archived)
				}
			}
			if l := leftovers(t, dst); len(l) > 0 {
				t.Errorf("left behind: %v", l)
			}
			if fi, _ := os.Stat(dst); fi.ModTime().Equal(archived) {
				t.Errorf("the destination took the archive's time")
			}
		})
	}
}

// TestUnpackContentsKeepsDestination extracts a directory's contents (SRC/.)
// into an existing directory: the stream's entry for the directory itself
// does not change its mode or times.
func TestUnpackContentsKeepsDestination(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		want    map[string]node
	}{
		{name: "./ alone", entries: []entry{{name: "./", typ: tar.TypeDir, mode: 0o1777}}},
		{name: ". alone", entries: []entry{{name: ".", typ: tar.TypeDir, mode: 0o700}}},
		{
			name:    "./ first, as GNU tar writes it",
			entries: []entry{{name: "./", typ: tar.TypeDir, mode: 0o1777}, {name: "./f", typ: tar.TypeReg, body: "1"}},
			want:    map[string]node{"f": {Kind: "file", Content: "1", Mode: 0o644}},
		},
		{
			name:    "./ last",
			entries: []entry{{name: "./d/", typ: tar.TypeDir, mode: 0o750}, {name: ".//", typ: tar.TypeDir, mode: 0o6777}},
			want:    map[string]node{"d": {Kind: "dir", Mode: 0o750}},
		},
		{
			name:    "same-named files are replaced",
			entries: []entry{{name: "./", typ: tar.TypeDir, mode: 0o1777}, {name: "./.bashrc", typ: tar.TypeReg, body: "theirs\n", mode: 0o600}},
			want:    map[string]node{".bashrc": {Kind: "file", Content: "theirs\n", Mode: 0o600}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := hostDir(t)
			old := time.Date(2021, 5, 6, 7, 8, 9, 0, time.UTC)
			if err := os.Chtimes(dst, old, old); err != nil {
				t.Fatal(err)
			}
			want := snapshot(t, dst)
			maps.Copy(want, tc.want)
			if err := Unpack(makeTar(t, tc.entries), dst, Options{}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, snapshot(t, dst)); diff != "" {
				t.Errorf("the destination (-want +got):\n%s", diff)
			}
			fi, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid); got != 0o755 {
				t.Errorf("the destination's mode is %v, want 0755 kept", got)
			}
			if len(tc.want) == 0 && !fi.ModTime().Equal(old) {
				t.Errorf("the destination's time is %v, want %v kept", fi.ModTime(), old)
			}
			if fi.ModTime().Equal(archived) {
				t.Errorf("the destination took the archive's time")
			}
		})
	}
}

// TestUnpackNewTreeAllOrNothing: a new tree whose stream is cut, or holds
// nothing, is not made.
func TestUnpackNewTreeAllOrNothing(t *testing.T) {
	full := makeTar(t, []entry{
		{name: "./results/", typ: tar.TypeDir, mode: 0o755},
		{name: "./results/first", typ: tar.TypeReg, body: "complete"},
		{name: "./results/cut", typ: tar.TypeReg, body: strings.Repeat("x", 100<<10)},
	}).Bytes()
	for _, tc := range []struct {
		name    string
		stream  []byte
		wantErr string
	}{
		{"cut", full[:bytes.Index(full, []byte("xxxx"))+50<<10], `entry "./results/cut"`},
		{"empty", makeTar(t, nil).Bytes(), `no entry for "results"`},
		{"only skipped types", makeTar(t, []entry{{name: "results", typ: tar.TypeFifo}}).Bytes(), `no entry for "results"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := hostDir(t)
			before := snapshot(t, dst)
			err := Unpack(bytes.NewReader(tc.stream), dst, Options{Name: "results"})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Unpack: %v, want an error mentioning %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(before, snapshot(t, dst)); diff != "" {
				t.Errorf("the destination changed (-before +after):\n%s", diff)
			}
			if l := leftovers(t, dst); len(l) > 0 {
				t.Errorf("left behind: %v", l)
			}
		})
	}
}

// TestUnpackRepeatedDirectory: a stream that names the same directory
// over and over (as a sandbox's tar may) keeps one record of it, with the
// last entry's mode, rather than one per entry.
func TestUnpackRepeatedDirectory(t *testing.T) {
	entries := []entry{{name: "t/", typ: tar.TypeDir, mode: 0o755}}
	for i := range 10000 {
		entries = append(entries, entry{name: "t/d/", typ: tar.TypeDir, mode: 0o700 + int64(i%2)*0o50})
	}
	entries = append(entries, entry{name: "t/d/", typ: tar.TypeDir, mode: 0o750})
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	u := &unpacker{root: root, top: "t"}
	if err := u.unpack(makeTar(t, entries)); err != nil {
		t.Fatal(err)
	}
	if len(u.dirs) != 2 {
		t.Errorf("%d directory records for 2 directories", len(u.dirs))
	}
	if err := u.finishDirs(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "d")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("d: %v, %v; want the last entry's mode 0750", fi.Mode(), err)
	}
}

// TestUnpackMaxSize: a stream whose files pass Options.MaxSize is refused
// at the file that passes it, before its content is written; a new tree
// is then not made at all (review finding C4: a size the sandbox reported
// is binding).
func TestUnpackMaxSize(t *testing.T) {
	ten := strings.Repeat("x", 10)
	stream := []entry{
		{name: "t/", typ: tar.TypeDir, mode: 0o755},
		{name: "t/a", typ: tar.TypeReg, body: ten},
		{name: "t/l", typ: tar.TypeLink, link: "t/a"},
		{name: "t/b", typ: tar.TypeReg, body: ten},
	}
	tests := []struct {
		name     string
		max      int64
		existing bool     // t is there already: the stream is merged
		want     []string // what t holds after
		tooLarge bool
	}{
		{"no bound", 0, false, []string{"a", "b", "l"}, false},
		{"exactly", 20, false, []string{"a", "b", "l"}, false},
		{"new tree past the bound", 19, false, nil, true},
		{"new tree past the bound at once", 5, false, nil, true},
		{"merged past the bound", 15, true, []string{"a", "l"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.existing {
				if err := os.Mkdir(filepath.Join(dir, "t"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := Unpack(makeTar(t, stream), dir, Options{Name: "t", MaxSize: tt.max})
			if errors.Is(err, ErrTooLarge) != tt.tooLarge {
				t.Fatalf("Unpack: %v, want ErrTooLarge %v", err, tt.tooLarge)
			}
			var got []string
			if ents, err := os.ReadDir(filepath.Join(dir, "t")); err == nil {
				for _, e := range ents {
					got = append(got, e.Name())
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("t holds (-want +got):\n%s", diff)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".hutch-cp-*")); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
	if err := Unpack(makeTar(t, stream), t.TempDir(), Options{Name: "t", MaxSize: -1}); err == nil {
		t.Error("MaxSize -1 accepted")
	}
}

// TestUnpackMaxDiskAndEntries: what a tree takes on disk and in inodes is
// bounded whatever the other end reported: every entry, and every
// directory a path makes on its way, costs an inode and a block (review 4:
// 150 000 empty directories, a 77 MB archive whose sandbox reported 1
// byte, took 618 MB and 150 001 inodes on the host).
func TestUnpackMaxDiskAndEntries(t *testing.T) {
	dirs := []entry{{name: "t/", typ: tar.TypeDir, mode: 0o755}}
	for i := range 10 {
		dirs = append(dirs, entry{name: fmt.Sprintf("t/d%d/", i), typ: tar.TypeDir, mode: 0o755})
	}
	deep := []entry{{name: "t/a/b/c/d/e/f/g/h/file", typ: tar.TypeReg, body: "x"}}
	big := []entry{{name: "t/", typ: tar.TypeDir, mode: 0o755}, {name: "t/f", typ: tar.TypeReg, body: strings.Repeat("x", 10000)}}
	tests := []struct {
		name   string
		stream []entry
		opts   Options
		noRoom bool
	}{
		{"dirs within", dirs, Options{MaxEntries: 10, MaxDisk: 10 * 4096}, false},
		{"dirs past the inodes", dirs, Options{MaxEntries: 9}, true},
		{"dirs past the disk", dirs, Options{MaxDisk: 9 * 4096}, true},
		{"a path's directories count", deep, Options{MaxEntries: 8}, true},
		{"a path's directories within", deep, Options{MaxEntries: 9}, false},
		{"a file's blocks", big, Options{MaxDisk: 4096 + 12288}, false},
		{"a file's blocks past", big, Options{MaxDisk: 4096 + 12288 - 1}, true},
		{"another block size", big, Options{MaxDisk: 1024 + 10240, BlockSize: 1024}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := tt.opts
			opts.Name = "t"
			err := Unpack(makeTar(t, tt.stream), dir, opts)
			if errors.Is(err, ErrNoRoom) != tt.noRoom {
				t.Fatalf("Unpack: %v, want ErrNoRoom %v", err, tt.noRoom)
			}
			if tt.noRoom {
				if ents, _ := os.ReadDir(dir); len(ents) > 0 {
					t.Errorf("a refused tree left %v", ents)
				}
			}
		})
	}
}
