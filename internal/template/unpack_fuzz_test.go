package template

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// layerNames are the entry names the layer generator picks from: plain
// ones, ones that climb out or are absolute, whiteouts and opaque markers,
// and paths through the symlinks the generator makes ("l", "l2").
var layerNames = []string{
	"a", "d", "d/f", "d/e/f", "l", "l/f", "l/secret", "l/d/f", "l2", "l2/secret",
	"h", "..", ".", "../escape", "../outside/secret", "/abs", "/etc/x", "./d/../../x",
	"d/../../outside/secret", ".wh.a", ".wh.d", ".wh..", ".wh...", "d/.wh..", "d/.wh...",
	"d/.wh..wh..opq", ".wh..wh..opq", "l/.wh.secret", "l/.wh..wh..opq", "d/.wh.f",
	"outside", "outside/secret", "neighbor",
}

// layerTypes are the entry types the generator picks from.
var layerTypes = []byte{
	tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeChar,
	tar.TypeBlock, tar.TypeFifo, tar.TypeReg, tar.TypeSymlink, tar.TypeLink,
}

// fuzzLayer turns fuzz input into a tar stream of up to 24 entries whose
// types, names, link targets, modes, owners, sizes and xattrs come from the
// input's bytes (a structured generator reaches ../, absolute paths,
// symlink-then-write-through, hard links to outside files, whiteouts and
// device nodes in a few mutations, where raw tar bytes would not). dir is
// the directory holding the root; link targets include its absolute paths,
// which is where a write through a symlink would land if it were followed
// on the host. A size byte of 255 declares a huge file the stream then
// cuts short.
func fuzzLayer(in []byte, dir string) []byte {
	next := func() byte {
		if len(in) == 0 {
			return 0
		}
		b := in[0]
		in = in[1:]
		return b
	}
	targets := []string{
		"a", "d", "d/f", "l", "l/secret", "..", "../..", "../outside", "../outside/secret",
		"d/../..", ".", "/", dir, filepath.Join(dir, "outside"), filepath.Join(dir, "outside", "secret"),
		filepath.Join(dir, "neighbor"), "outside/secret", "neighbor", "../neighbor",
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := 0; i < 24 && len(in) > 0; i++ {
		typ := layerTypes[int(next())%len(layerTypes)]
		nb := next()
		name := layerNames[int(nb&0x7f)%len(layerNames)]
		if nb&0x80 != 0 {
			name += "/" + layerNames[int(next())%len(layerNames)]
		}
		hdr := &tar.Header{
			Typeflag: typ,
			Name:     name,
			Mode:     int64(next())<<1&0o777 | int64(next()&0o7)<<9, // setuid, setgid, sticky too
			Uid:      []int{0, 1000, 65534, 1 << 30}[next()%4],
			Gid:      []int{0, 1000, 65534, 1 << 30}[next()%4],
			Format:   tar.FormatPAX,
		}
		switch typ {
		case tar.TypeSymlink, tar.TypeLink:
			hdr.Linkname = targets[int(next())%len(targets)]
		case tar.TypeChar, tar.TypeBlock:
			hdr.Devmajor, hdr.Devminor = int64(next()%8), int64(next()%8)
		}
		if x := next(); x%5 == 0 {
			hdr.PAXRecords = map[string]string{
				[]string{"SCHILY.xattr.trusted.overlay.redirect", "SCHILY.xattr.user.overlay.redirect",
					"SCHILY.xattr.user.overlay.opaque", "SCHILY.xattr.user.fuzz"}[int(x/5)%4]: "/outside",
			}
		}
		var content []byte
		if typ == tar.TypeReg {
			size := next()
			if size == 255 {
				hdr.Size = 1 << 40
				tw.WriteHeader(hdr)
				tw.Write([]byte("cut short"))
				return buf.Bytes() // no Close: the stream ends mid-file
			}
			content = bytes.Repeat([]byte{next()}, int(size))
			hdr.Size = int64(len(content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			continue
		}
		tw.Write(content)
	}
	tw.Close()
	return buf.Bytes()
}

// treeState describes every file under dir except root's contents: the
// state nothing a layer does may change.
func treeState(t *testing.T, dir, root string) map[string]string {
	t.Helper()
	state := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			state[p] = "root " + fi.Mode().String()
			return fs.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%s size=%d nlink=%d uid=%d gid=%d mtime=%d.%d", fi.Mode(), fi.Size(), st.Nlink, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + l
		}
		state[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// FuzzUnpack: a layer tar, whatever its entries, is unpacked (by unpack,
// as an image's layer, or by Extract, as a build's copied files) or
// refused, never panics, and changes nothing outside the root: the
// sentinel files and directory planted beside the root keep their
// contents, modes, owners, times and link counts (a hard link to one would
// raise its count), nothing new appears beside the root, and the root stays
// a directory. Nothing in the root carries an overlayfs attribute other
// than the opaque marker unpack sets itself.
func FuzzUnpack(f *testing.F) {
	testenv.RequireRoot(f, "layers keep owners and whiteouts are device nodes")
	seed := func(b ...byte) { f.Add(b) }
	seed(0)
	// typ name mode mode uid gid [link] xattr [size content]
	seed(0, 0, 0, 0x40, 4, 0, 0, 1, 5, 'x')                                          // a plain file "a"
	seed(0, 2, 4, 0x40, 0, 0, 0, 13, 1, 0, 1, 6, 0, 0, 0, 0, 1, 3, 'x')              // l -> outside dir, then l/f
	seed(1, 3, 4, 0x40, 0, 0, 0, 11, 1, 0, 5, 0x40, 0, 0, 0, 1, 4, 'x')              // anySymlink: l -> "..", then l/secret
	seed(2, 3, 32, 0x40, 0, 0, 0, 14, 1, 0, 32, 0x40, 0, 0, 0, 1, 9, 'w')            // Extract: h => outside/secret hard link, then h written
	seed(0, 0, 12, 0x40, 0, 0, 0, 1, 1, 'x', 0, 19, 0, 0, 0, 0, 1, 0, 'y')           // ../escape, .wh.a
	seed(0, 4, 0, 0, 0, 0, 0, 1, 1, 1, 0, 21, 0, 0, 0, 0, 1, 0, 22, 0, 0, 0, 0, 1)   // device node, .wh.., .wh...
	seed(0, 0, 0, 0x40, 0, 0, 0, 0, 255)                                             // a huge file cut short
	seed(0, 1, 1, 0x40, 0, 0, 0, 0, 0, 2, 0x40, 0, 0, 0, 1, 0, 1, 23, 0, 0, 0, 0, 5) // d, d/f with a forged redirect, opaque d
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		mode := in[0] % 3
		dir := t.TempDir()
		root := filepath.Join(dir, "root")
		if err := os.MkdirAll(filepath.Join(dir, "outside", "dir"), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Mkdir(root, 0o755)
		os.WriteFile(filepath.Join(dir, "outside", "secret"), []byte("secret"), 0o600)
		os.WriteFile(filepath.Join(dir, "neighbor"), []byte("neighbor"), 0o644)
		os.Symlink("outside", filepath.Join(dir, "link"))
		before := treeState(t, dir, root)
		layer := fuzzLayer(in[1:], dir)
		ctx := context.Background()
		var err error
		switch mode {
		case 0, 1:
			_, err = unpack(ctx, root, bytes.NewReader(layer), unpackOptions{anySymlink: mode == 1})
		case 2:
			err = Extract(ctx, root, bytes.NewReader(layer))
		}
		after := treeState(t, dir, root)
		for p, was := range before {
			if now, ok := after[p]; !ok {
				t.Errorf("%s was removed (was %s)", p, was)
			} else if now != was {
				t.Errorf("%s changed:\n was %s\n now %s", p, was, now)
			}
		}
		for p, now := range after {
			if _, ok := before[p]; !ok {
				t.Errorf("%s appeared outside the root: %s", p, now)
			}
		}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			sz, _ := unix.Llistxattr(p, nil)
			if sz <= 0 {
				return nil
			}
			buf := make([]byte, sz)
			n, _ := unix.Llistxattr(p, buf)
			for _, x := range strings.Split(string(buf[:max(n, 0)]), "\x00") {
				if strings.HasPrefix(x, "trusted.") || strings.HasPrefix(x, "user.overlay.") && x != opaqueXattr {
					t.Errorf("%s carries the attribute %s", p, x)
				}
			}
			return nil
		})
		if t.Failed() {
			t.Logf("mode %d, unpack error: %v", mode, err)
			tr := tar.NewReader(bytes.NewReader(layer))
			for {
				h, err := tr.Next()
				if err != nil {
					break
				}
				t.Logf("entry %c %q -> %q mode %o size %d", h.Typeflag, h.Name, h.Linkname, h.Mode, h.Size)
			}
		}
	})
}
