package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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
		name    string // archive name of the source
		opts    Options
		into    string // where the copy lands, relative to dst
		mkInto  bool   // the destination exists already (contents copy)
		wantTop bool   // want includes "." (the root entry applied)
	}{
		{name: "tree", into: "tree"},
		{name: "tree", opts: Options{Rename: "renamed"}, into: "renamed"},
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
		{"named", []string{"-C", parent, "./tree"}, Options{Rename: "copy"}, "copy"},
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
			opts:    Options{Rename: "new"},
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
			entries: []entry{{name: "./orig/", typ: tar.TypeDir, mode: 0o700}, {name: "./orig/f", typ: tar.TypeReg, body: "1"}, {name: "./", typ: tar.TypeDir, mode: 0o777}},
			opts:    Options{Rename: "new"},
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

func TestUnpackRejectsBadRename(t *testing.T) {
	for _, r := range []string{"a/b", ".", ".."} {
		if err := Unpack(makeTar(t, nil), t.TempDir(), Options{Rename: r}); err == nil {
			t.Errorf("Rename %q accepted", r)
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
