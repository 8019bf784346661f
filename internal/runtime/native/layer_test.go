package native

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// TestWriteLayer writes upper directories made by hand, with every mark
// overlayfs leaves, and checks the OCI layer made of each. The conformance
// suite checks a layer a real overlay wrote.
func TestWriteLayer(t *testing.T) {
	testenv.RequireRoot(t, "whiteouts are device nodes, files belong to a sandbox's uids")
	const host = uidBase + 3*uidRange // the sandbox's root on the host
	type entry struct {
		Type     byte
		Mode     int64
		Uid, Gid int
		Link     string
		Data     string
		Xattrs   map[string]string
	}
	tests := []struct {
		name    string
		make    func(t *testing.T, dir string)
		want    map[string]entry
		wantErr string
	}{
		{
			name: "marks and owners",
			make: func(t *testing.T, dir string) {
				mkdir(t, dir, "opaque", 0o755, host)
				setxattr(t, dir, "opaque", "user.overlay.opaque", "y")
				file(t, dir, "opaque/f", "in", 0o600, host+1000)
				mknod(t, dir, "gone", unix.S_IFCHR, 0, host) // a whiteout
				file(t, dir, "xgone", "", 0o644, host)       // a whiteout in an xattr (Linux 6.7+)
				setxattr(t, dir, "xgone", "user.overlay.whiteout", "")
				mkdir(t, dir, "notopaque", 0o700, host+1)
				setxattr(t, dir, "notopaque", "user.overlay.opaque", "x") // holds xattr whiteouts: not opaque
				file(t, dir, "data", "hello", 0o4755, host+1000)
				setxattr(t, dir, "data", "user.note", "kept")
				setxattr(t, dir, "data", "user.overlay.origin", "dropped")
				file(t, dir, "foreign", "x", 0o644, 12345)
				mknod(t, dir, "sock", unix.S_IFSOCK, 0, host)
				mknod(t, dir, "fifo", unix.S_IFIFO, 0, host)
				if err := os.Symlink("../../etc/passwd", filepath.Join(dir, "link")); err != nil {
					t.Fatal(err)
				}
				os.Lchown(filepath.Join(dir, "link"), host, host)
				if err := os.Link(filepath.Join(dir, "data"), filepath.Join(dir, "zhard")); err != nil {
					t.Fatal(err)
				}
			},
			want: map[string]entry{
				"data":                {Type: tar.TypeReg, Mode: 0o4755, Uid: 1000, Gid: 1000, Data: "hello", Xattrs: map[string]string{"SCHILY.xattr.user.note": "kept"}},
				"fifo":                {Type: tar.TypeFifo, Mode: 0o644},
				"foreign":             {Type: tar.TypeReg, Mode: 0o644, Uid: 65534, Gid: 65534, Data: "x"},
				".wh.gone":            {Type: tar.TypeReg},
				"link":                {Type: tar.TypeSymlink, Mode: 0o777, Link: "../../etc/passwd"},
				"notopaque/":          {Type: tar.TypeDir, Mode: 0o700, Uid: 1, Gid: 1},
				"opaque/":             {Type: tar.TypeDir, Mode: 0o755},
				"opaque/.wh..wh..opq": {Type: tar.TypeReg},
				"opaque/f":            {Type: tar.TypeReg, Mode: 0o600, Uid: 1000, Gid: 1000, Data: "in"},
				".wh.xgone":           {Type: tar.TypeReg},
				"zhard":               {Type: tar.TypeLink, Mode: 0o4755, Uid: 1000, Gid: 1000, Link: "data"},
			},
		},
		{
			name: "renamed directory",
			make: func(t *testing.T, dir string) {
				mkdir(t, dir, "moved", 0o755, host)
				setxattr(t, dir, "moved", "user.overlay.redirect", "/orig")
			},
			wantErr: "redirect_dir",
		},
		{
			name: "metadata only copy",
			make: func(t *testing.T, dir string) {
				file(t, dir, "meta", "", 0o644, host)
				setxattr(t, dir, "meta", "trusted.overlay.metacopy", "")
			},
			wantErr: "metacopy",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, dir)
			var buf bytes.Buffer
			err := writeLayer(context.Background(), &buf, dir, host)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("writeLayer = %v, want an error about %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]entry{}
			var order []string
			tr := tar.NewReader(&buf)
			for {
				hdr, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				data, _ := io.ReadAll(tr)
				var x map[string]string
				for k, v := range hdr.PAXRecords {
					if strings.HasPrefix(k, "SCHILY.xattr.") {
						if x == nil {
							x = map[string]string{}
						}
						x[k] = v
					}
				}
				got[hdr.Name] = entry{Type: hdr.Typeflag, Mode: hdr.Mode, Uid: hdr.Uid, Gid: hdr.Gid, Link: hdr.Linkname, Data: string(data), Xattrs: x}
				order = append(order, hdr.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("layer (-want +got):\n%s", diff)
			}
			// Name order within a directory (a whiteout where the name it
			// hides would be), parents first: the same tree always gives
			// the same stream.
			want := []string{"data", "fifo", "foreign", ".wh.gone", "link", "notopaque/", "opaque/", "opaque/.wh..wh..opq", "opaque/f", ".wh.xgone", "zhard"}
			if diff := cmp.Diff(want, order); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
		})
	}
}

func mkdir(t *testing.T, dir, name string, mode uint32, owner int) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	chown(t, p, mode, owner)
}

func file(t *testing.T, dir, name, data string, mode uint32, owner int) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	chown(t, p, mode, owner)
}

// chown gives p its owner and then its mode (chown clears setuid).
func chown(t *testing.T, p string, mode uint32, owner int) {
	t.Helper()
	if err := os.Chown(p, owner, owner); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// mknod makes a node of the given kind with mode 0644, owned by owner.
func mknod(t *testing.T, dir, name string, kind uint32, dev, owner int) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := unix.Mknod(p, kind|0o644, dev); err != nil {
		t.Fatal(err)
	}
	chown(t, p, 0o644, owner)
}

func setxattr(t *testing.T, dir, name, key, value string) {
	t.Helper()
	if err := unix.Lsetxattr(filepath.Join(dir, name), key, []byte(value), 0); err != nil {
		t.Fatalf("setxattr %s on %s: %v", key, name, err)
	}
}
