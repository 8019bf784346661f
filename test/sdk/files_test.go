package sdk_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdapi"
	"github.com/hutch-sandbox/hutch/sdk"
)

// TestFiles: reading, writing, listing, stat, mkdir, rename, remove,
// users, metadata, path resolution and signed URLs.
func TestFiles(t *testing.T) {
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{})
	ctx := t.Context()
	base := home + "/" + unique("files")
	if ok, err := sbx.Files.MakeDir(ctx, base, nil); err != nil || !ok {
		t.Fatalf("MakeDir(%s) = %v, %v", base, ok, err)
	}

	t.Run("write and read back", func(t *testing.T) {
		all := make([]byte, 256*4)
		for i := range all {
			all[i] = byte(i)
		}
		for _, tc := range []struct {
			name string
			data []byte
		}{
			{"text", []byte("Hello, wörld!\n")},
			{"every byte value", all},
			{"empty", []byte{}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := base + "/" + unique("rw")
				info, err := sbx.Files.Write(ctx, path, tc.data, nil)
				must(t, err, "Write")
				if info.Path != path || info.Name != filepath.Base(path) || info.Type != sdk.FileTypeFile {
					t.Errorf("Write info %+v", info)
				}
				got, err := sbx.Files.Read(ctx, path, nil)
				must(t, err, "Read")
				if !bytes.Equal(got, tc.data) {
					t.Errorf("Read gave %d bytes %q, wrote %d", len(got), got, len(tc.data))
				}
				// The sandbox sees the same bytes.
				sum := sha256.Sum256(tc.data)
				if out := run(t, sbx, "sha256sum < "+path, nil).Stdout; !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
					t.Errorf("sha256sum in the sandbox: %q, want %x", out, sum)
				}
				st, err := sbx.Files.GetInfo(ctx, path, nil)
				must(t, err, "GetInfo")
				if st.Size != int64(len(tc.data)) {
					t.Errorf("GetInfo size %d, wrote %d", st.Size, len(tc.data))
				}
			})
		}
	})

	t.Run("write overwrites and creates parent directories", func(t *testing.T) {
		path := base + "/deep/er/still/file.txt"
		_, err := sbx.Files.Write(ctx, path, []byte("a much longer first version"), nil)
		must(t, err, "Write")
		_, err = sbx.Files.Write(ctx, path, []byte("short"), nil)
		must(t, err, "second Write")
		got, err := sbx.Files.Read(ctx, path, nil)
		must(t, err, "Read")
		if string(got) != "short" {
			t.Errorf("after overwrite: %q", got)
		}
		dir, err := sbx.Files.GetInfo(ctx, base+"/deep/er", nil)
		must(t, err, "GetInfo of a made parent")
		if dir.Type != sdk.FileTypeDir || dir.Owner != "user" {
			t.Errorf("made parent: type %q owner %q, want dir owned by user", dir.Type, dir.Owner)
		}
	})

	t.Run("WriteMany", func(t *testing.T) {
		entries := []sdk.WriteEntry{
			{Path: base + "/multi/a.txt", Data: []byte("A")},
			{Path: base + "/multi/sub/b.txt", Data: []byte("BB")},
			{Path: base + "/multi/c.bin", Data: []byte{0, 1, 2, 255}},
		}
		infos, err := sbx.Files.WriteMany(ctx, entries, nil)
		must(t, err, "WriteMany")
		var paths, want []string
		for _, i := range infos {
			paths = append(paths, i.Path)
			if i.Type != sdk.FileTypeFile {
				t.Errorf("WriteMany info %+v", i)
			}
		}
		for _, e := range entries {
			want = append(want, e.Path)
			got, err := sbx.Files.Read(ctx, e.Path, nil)
			must(t, err, "Read")
			if !bytes.Equal(got, e.Data) {
				t.Errorf("%s: read %q, wrote %q", e.Path, got, e.Data)
			}
		}
		slices.Sort(paths)
		slices.Sort(want)
		if !slices.Equal(paths, want) {
			t.Errorf("WriteMany infos name %v, want %v", paths, want)
		}
		if infos, err := sbx.Files.WriteMany(ctx, nil, nil); err != nil || len(infos) != 0 {
			t.Errorf("WriteMany of nothing = %v, %v", infos, err)
		}
	})

	t.Run("WriteStream 20 MB and ReadStream", func(t *testing.T) {
		const size = 20 << 20
		path := base + "/big.bin"
		src := io.LimitReader(rand.NewChaCha8([32]byte{'h', 'u', 't', 'c', 'h'}), size)
		sent := sha256.New()
		info, err := sbx.Files.WriteStream(ctx, path, io.TeeReader(src, sent), nil)
		must(t, err, "WriteStream")
		if info.Path != path {
			t.Errorf("WriteStream info path %q", info.Path)
		}
		rc, err := sbx.Files.ReadStream(ctx, path, nil)
		must(t, err, "ReadStream")
		got := sha256.New()
		n, err := io.Copy(got, rc)
		rc.Close()
		must(t, err, "reading the stream")
		if n != size || !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
			t.Errorf("ReadStream gave %d bytes with sha256 %x; wrote %d with %x", n, got.Sum(nil), size, sent.Sum(nil))
		}
		whole, err := sbx.Files.Read(ctx, path, nil)
		must(t, err, "Read")
		if sum := sha256.Sum256(whole); len(whole) != size || !bytes.Equal(sum[:], sent.Sum(nil)) {
			t.Errorf("Read gave %d bytes with sha256 %x", len(whole), sum)
		}
		if out := run(t, sbx, "sha256sum < "+path, nil).Stdout; !strings.HasPrefix(out, hex.EncodeToString(sent.Sum(nil))) {
			t.Errorf("sha256sum in the sandbox: %q, want %x", out, sent.Sum(nil))
		}
		must(t, sbx.Files.Remove(ctx, path, nil), "Remove")
	})

	t.Run("read and write errors", func(t *testing.T) {
		must(t, func() error { _, err := sbx.Files.MakeDir(ctx, base+"/adir", nil); return err }(), "MakeDir")
		for _, tc := range []struct {
			name string
			call func() error
			want error
		}{
			{"Read of a missing file", func() error { _, err := sbx.Files.Read(ctx, base+"/nope.txt", nil); return err }, sdk.ErrNotFound},
			{"ReadStream of a missing file", func() error { _, err := sbx.Files.ReadStream(ctx, base+"/nope.txt", nil); return err }, sdk.ErrNotFound},
			{"Read of a directory", func() error { _, err := sbx.Files.Read(ctx, base, nil); return err }, sdk.ErrInvalidArgument},
			{"Write onto a directory", func() error { _, err := sbx.Files.Write(ctx, base+"/adir", []byte("x"), nil); return err }, sdk.ErrInvalidArgument},
			{"GetInfo of a missing path", func() error { _, err := sbx.Files.GetInfo(ctx, base+"/missing", nil); return err }, sdk.ErrNotFound},
			{"List of a missing directory", func() error { _, err := sbx.Files.List(ctx, base+"/missing", nil); return err }, sdk.ErrNotFound},
			{"Rename of a missing file", func() error { _, err := sbx.Files.Rename(ctx, base+"/missing", base+"/x", nil); return err }, sdk.ErrNotFound},
			{"Read as an unknown user", func() error {
				_, err := sbx.Files.Read(ctx, "/etc/hostname", &sdk.FileOptions{User: "nosuchuser"})
				return err
			}, sdk.ErrAuthentication},
		} {
			is(t, tc.call(), tc.want, tc.name)
		}
	})

	t.Run("relative paths resolve under the home directory", func(t *testing.T) {
		name := unique("rel") + ".txt"
		info, err := sbx.Files.Write(ctx, name, []byte("relative"), nil)
		must(t, err, "Write")
		if info.Path != home+"/"+name {
			t.Errorf("Write(%q) wrote %q, want %s/%s", name, info.Path, home, name)
		}
		got, err := sbx.Files.Read(ctx, home+"/"+name, nil)
		must(t, err, "Read by absolute path")
		if string(got) != "relative" {
			t.Errorf("Read(%s/%s) = %q", home, name, got)
		}
		st, err := sbx.Files.GetInfo(ctx, name, nil)
		must(t, err, "GetInfo")
		if st.Path != home+"/"+name {
			t.Errorf("GetInfo(%q).Path = %q", name, st.Path)
		}
		listed, err := sbx.Files.List(ctx, ".", nil)
		must(t, err, "List(.)")
		if !slices.ContainsFunc(listed, func(e sdk.EntryInfo) bool { return e.Path == home+"/"+name }) {
			t.Errorf("List(.) does not have %s/%s", home, name)
		}
		// Root's relative paths are under /root.
		st, err = sbx.Files.GetInfo(ctx, ".bashrc", &sdk.FileOptions{User: "root"})
		must(t, err, "GetInfo(.bashrc) as root")
		if st.Path != "/root/.bashrc" {
			t.Errorf("GetInfo(.bashrc) as root: %q", st.Path)
		}
		must(t, sbx.Files.Remove(ctx, name, nil), "Remove")
	})

	t.Run("list with depth", func(t *testing.T) {
		root := base + "/tree"
		_, err := sbx.Files.WriteMany(ctx, []sdk.WriteEntry{{Path: root + "/d1/d2/deep.txt", Data: []byte("x")}, {Path: root + "/top.txt", Data: []byte("top")}}, nil)
		must(t, err, "WriteMany")
		paths := func(es []sdk.EntryInfo) []string {
			var out []string
			for _, e := range es {
				out = append(out, e.Path)
			}
			slices.Sort(out)
			return out
		}
		for _, tc := range []struct {
			depth int
			want  []string
		}{
			{0, []string{root + "/d1", root + "/top.txt"}},
			{1, []string{root + "/d1", root + "/top.txt"}},
			{2, []string{root + "/d1", root + "/d1/d2", root + "/top.txt"}},
			{3, []string{root + "/d1", root + "/d1/d2", root + "/d1/d2/deep.txt", root + "/top.txt"}},
		} {
			es, err := sbx.Files.List(ctx, root, &sdk.ListDirOptions{Depth: tc.depth})
			must(t, err, "List")
			if got := paths(es); !slices.Equal(got, tc.want) {
				t.Errorf("List depth %d: %v, want %v", tc.depth, got, tc.want)
			}
			for _, e := range es {
				switch e.Name {
				case "d1", "d2":
					if e.Type != sdk.FileTypeDir {
						t.Errorf("List depth %d: %s has type %q", tc.depth, e.Path, e.Type)
					}
				case "top.txt":
					if e.Type != sdk.FileTypeFile || e.Size != 3 {
						t.Errorf("List depth %d: %s has type %q size %d", tc.depth, e.Path, e.Type, e.Size)
					}
				}
			}
		}
		_, err = sbx.Files.List(ctx, root+"/top.txt", nil)
		is(t, err, sdk.ErrInvalidArgument, "List of a file")
	})

	t.Run("GetInfo of a file, a directory and symlinks", func(t *testing.T) {
		path := base + "/info.txt"
		_, err := sbx.Files.Write(ctx, path, []byte("12345"), nil)
		must(t, err, "Write")
		run(t, sbx, fmt.Sprintf("ln -s %[1]s/info.txt %[1]s/link; ln -s %[1]s/deep %[1]s/dirlink", base), nil)
		for _, tc := range []struct {
			path string
			want sdk.EntryInfo // the fields compared
		}{
			{path, sdk.EntryInfo{Name: "info.txt", Path: path, Type: sdk.FileTypeFile, Size: 5, Mode: 0o644, Permissions: "-rw-r--r--", Owner: "user", Group: "user"}},
			{base + "/deep", sdk.EntryInfo{Name: "deep", Path: base + "/deep", Type: sdk.FileTypeDir, Mode: 0o755, Permissions: "drwxr-xr-x", Owner: "user", Group: "user"}},
			// A symlink: type and mode are its target's.
			{base + "/link", sdk.EntryInfo{Name: "link", Path: base + "/link", Type: sdk.FileTypeFile, Mode: 0o644, Owner: "user", Group: "user", SymlinkTarget: path}},
			{base + "/dirlink", sdk.EntryInfo{Name: "dirlink", Path: base + "/dirlink", Type: sdk.FileTypeDir, Mode: 0o755, Owner: "user", Group: "user", SymlinkTarget: base + "/deep"}},
		} {
			got, err := sbx.Files.GetInfo(ctx, tc.path, nil)
			must(t, err, "GetInfo")
			w := tc.want
			if got.Name != w.Name || got.Path != w.Path || got.Type != w.Type || got.Mode != w.Mode ||
				got.Owner != w.Owner || got.Group != w.Group || got.SymlinkTarget != w.SymlinkTarget {
				t.Errorf("GetInfo(%s) = %+v\nwant %+v", tc.path, *got, w)
			}
			if w.Permissions != "" && got.Permissions != w.Permissions {
				t.Errorf("GetInfo(%s).Permissions = %q, want %q", tc.path, got.Permissions, w.Permissions)
			}
			if w.Type == sdk.FileTypeFile && w.SymlinkTarget == "" && got.Size != w.Size {
				t.Errorf("GetInfo(%s).Size = %d, want %d", tc.path, got.Size, w.Size)
			}
			if got.ModifiedTime.IsZero() || got.ModifiedTime.After(time.Now().Add(time.Minute)) {
				t.Errorf("GetInfo(%s).ModifiedTime = %v", tc.path, got.ModifiedTime)
			}
		}
		// Permissions follow chmod.
		run(t, sbx, "chmod 640 "+path, nil)
		got, err := sbx.Files.GetInfo(ctx, path, nil)
		must(t, err, "GetInfo")
		if got.Mode != 0o640 || got.Permissions != "-rw-r-----" {
			t.Errorf("after chmod 640: mode %v permissions %q", got.Mode, got.Permissions)
		}
	})

	t.Run("Exists", func(t *testing.T) {
		for path, want := range map[string]bool{base: true, base + "/deep/er/still/file.txt": true, base + "/nothing-here": false, "/etc/passwd": true} {
			got, err := sbx.Files.Exists(ctx, path, nil)
			if err != nil || got != want {
				t.Errorf("Exists(%s) = %v, %v; want %v", path, got, err, want)
			}
		}
	})

	t.Run("MakeDir", func(t *testing.T) {
		dir := base + "/made/with/parents"
		if ok, err := sbx.Files.MakeDir(ctx, dir, nil); err != nil || !ok {
			t.Errorf("MakeDir = %v, %v; want true", ok, err)
		}
		if ok, err := sbx.Files.MakeDir(ctx, dir, nil); err != nil || ok {
			t.Errorf("MakeDir of an existing directory = %v, %v; want false, nil", ok, err)
		}
		for _, p := range []string{dir, base + "/made"} {
			st, err := sbx.Files.GetInfo(ctx, p, nil)
			must(t, err, "GetInfo")
			if st.Type != sdk.FileTypeDir || st.Owner != "user" {
				t.Errorf("%s: type %q owner %q", p, st.Type, st.Owner)
			}
		}
		_, err := sbx.Files.MakeDir(ctx, base+"/info.txt", nil)
		is(t, err, sdk.ErrInvalidArgument, "MakeDir onto a file")
	})

	t.Run("Rename", func(t *testing.T) {
		_, err := sbx.Files.Write(ctx, base+"/old.txt", []byte("moving"), nil)
		must(t, err, "Write")
		info, err := sbx.Files.Rename(ctx, base+"/old.txt", base+"/renamed/new.txt", nil)
		must(t, err, "Rename")
		if info.Path != base+"/renamed/new.txt" || info.Name != "new.txt" || info.Type != sdk.FileTypeFile {
			t.Errorf("Rename returned %+v", info)
		}
		if ok, _ := sbx.Files.Exists(ctx, base+"/old.txt", nil); ok {
			t.Error("the old path still exists")
		}
		got, err := sbx.Files.Read(ctx, base+"/renamed/new.txt", nil)
		if err != nil || string(got) != "moving" {
			t.Errorf("Read of the new path = %q, %v", got, err)
		}
	})

	t.Run("Remove", func(t *testing.T) {
		_, err := sbx.Files.WriteMany(ctx, []sdk.WriteEntry{{Path: base + "/rm/a/b.txt", Data: []byte("b")}, {Path: base + "/rm/c.txt", Data: []byte("c")}}, nil)
		must(t, err, "WriteMany")
		must(t, sbx.Files.Remove(ctx, base+"/rm/c.txt", nil), "Remove of a file")
		if ok, _ := sbx.Files.Exists(ctx, base+"/rm/c.txt", nil); ok {
			t.Error("the removed file exists")
		}
		must(t, sbx.Files.Remove(ctx, base+"/rm", nil), "Remove of a tree")
		if ok, _ := sbx.Files.Exists(ctx, base+"/rm", nil); ok {
			t.Error("the removed tree exists")
		}
		must(t, sbx.Files.Remove(ctx, base+"/rm", nil), "Remove of a missing path")
	})

	t.Run("user root", func(t *testing.T) {
		path := "/root/" + unique("root") + ".txt"
		root := &sdk.FileOptions{User: "root"}
		info, err := sbx.Files.Write(ctx, path, []byte("secret"), &sdk.WriteOptions{User: "root"})
		must(t, err, "Write as root")
		if info.Path != path {
			t.Errorf("Write as root: path %q", info.Path)
		}
		st, err := sbx.Files.GetInfo(ctx, path, root)
		must(t, err, "GetInfo as root")
		if st.Owner != "root" || st.Group != "root" {
			t.Errorf("a file written as root is owned by %s:%s", st.Owner, st.Group)
		}
		got, err := sbx.Files.Read(ctx, path, root)
		if err != nil || string(got) != "secret" {
			t.Errorf("Read as root = %q, %v", got, err)
		}
		if out := run(t, sbx, "stat -c %U:%G "+path, &sdk.RunOptions{User: "root"}).Stdout; out != "root:root\n" {
			t.Errorf("stat(1) says %q", out)
		}
		// A file root writes in the user's tree is root's too.
		_, err = sbx.Files.Write(ctx, base+"/by-root/x.txt", []byte("r"), &sdk.WriteOptions{User: "root"})
		must(t, err, "Write as root into the user's home")
		if out := run(t, sbx, fmt.Sprintf("stat -c %%U %[1]s/by-root %[1]s/by-root/x.txt", base), nil).Stdout; out != "root\nroot\n" {
			t.Errorf("owners of what root wrote: %q", out)
		}
		must(t, sbx.Files.Remove(ctx, path, root), "Remove as root")
	})

	t.Run("metadata", func(t *testing.T) {
		path := base + "/meta.txt"
		want := map[string]string{"author": "alice", "kind": "report"}
		info, err := sbx.Files.Write(ctx, path, []byte("m"), &sdk.WriteOptions{Metadata: map[string]string{"Author": "alice", "kind": "report"}})
		must(t, err, "Write with metadata")
		if !maps.Equal(info.Metadata, want) {
			t.Errorf("Write returned metadata %v, want %v", info.Metadata, want)
		}
		st, err := sbx.Files.GetInfo(ctx, path, nil)
		must(t, err, "GetInfo")
		if !maps.Equal(st.Metadata, want) {
			t.Errorf("GetInfo metadata %v, want %v", st.Metadata, want)
		}
		es, err := sbx.Files.List(ctx, base, nil)
		must(t, err, "List")
		i := slices.IndexFunc(es, func(e sdk.EntryInfo) bool { return e.Name == "meta.txt" })
		if i < 0 || !maps.Equal(es[i].Metadata, want) {
			t.Errorf("List does not show meta.txt with metadata %v", want)
		}
		// A new write replaces the metadata; none clears it.
		_, err = sbx.Files.Write(ctx, path, []byte("m2"), &sdk.WriteOptions{Metadata: map[string]string{"kind": "final"}})
		must(t, err, "Write")
		if st, _ := sbx.Files.GetInfo(ctx, path, nil); !maps.Equal(st.Metadata, map[string]string{"kind": "final"}) {
			t.Errorf("after rewrite: metadata %v", st.Metadata)
		}
		_, err = sbx.Files.Write(ctx, path, []byte("m3"), nil)
		must(t, err, "Write")
		if st, _ := sbx.Files.GetInfo(ctx, path, nil); len(st.Metadata) != 0 {
			t.Errorf("after a write without metadata: %v", st.Metadata)
		}
	})

	t.Run("paths resolve inside the sandbox, never on the host", func(t *testing.T) {
		// ../ climbs to the sandbox's root, whose /etc/passwd is its own.
		inside := run(t, sbx, "cat /etc/passwd", nil).Stdout
		got, err := sbx.Files.Read(ctx, "../../etc/passwd", nil)
		must(t, err, "Read(../../etc/passwd)")
		if string(got) != inside {
			t.Errorf("Read(../../etc/passwd) is not the sandbox's /etc/passwd:\n%s", got)
		}
		st, err := sbx.Files.GetInfo(ctx, "../../../../../../etc/passwd", nil)
		must(t, err, "GetInfo")
		if st.Path != "/etc/passwd" {
			t.Errorf("GetInfo(../../../../../../etc/passwd).Path = %q", st.Path)
		}

		// A file on the host is not visible at its path in the sandbox.
		hostDir := t.TempDir()
		secret := unique("host-secret")
		hostFile := filepath.Join(hostDir, "marker.txt")
		must(t, os.WriteFile(hostFile, []byte(secret), 0o644), "writing the host marker")
		for _, p := range []string{hostFile, "../../../../.." + hostFile} {
			b, err := sbx.Files.Read(ctx, p, nil)
			is(t, err, sdk.ErrNotFound, "Read of the host's "+p)
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("the sandbox read the host's file through %s", p)
			}
			if ok, err := sbx.Files.Exists(ctx, p, nil); ok || err != nil {
				t.Errorf("Exists(%s) = %v, %v; want false", p, ok, err)
			}
		}
		if res, _ := sbx.Commands.Run(ctx, "cat "+hostFile, nil); res == nil || res.ExitCode == 0 || strings.Contains(res.Stdout, secret) {
			t.Errorf("cat of the host's file in the sandbox: %+v", res)
		}
		// Writing to the host's path writes inside the sandbox.
		escape := filepath.Join(hostDir, "escape.txt")
		info, err := sbx.Files.Write(ctx, "../.."+escape, []byte("inside"), nil)
		must(t, err, "Write")
		if info.Path != escape {
			t.Errorf("Write(../..%s) wrote %q", escape, info.Path)
		}
		if _, err := os.Stat(escape); !os.IsNotExist(err) {
			t.Errorf("a write in the sandbox made %s on the host (stat: %v)", escape, err)
		}
		if b, _ := os.ReadFile(hostFile); string(b) != secret {
			t.Errorf("the host's marker changed: %q", b)
		}
	})

	t.Run("signed URLs", func(t *testing.T) {
		path := base + "/url.txt"
		_, err := sbx.Files.Write(ctx, path, []byte("via url"), nil)
		must(t, err, "Write")
		get := func(u string) (int, string) {
			t.Helper()
			resp, err := http.Get(u)
			must(t, err, "GET "+u)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}

		dl, err := sbx.DownloadURL(path, nil)
		must(t, err, "DownloadURL")
		if !strings.Contains(dl, "signature=v1_") {
			t.Errorf("download URL has no signature: %s", dl)
		}
		if code, body := get(dl); code != 200 || body != "via url" {
			t.Errorf("GET download URL: %d %q", code, body)
		}

		// Upload with a multipart POST, field "file".
		upPath := base + "/uploaded.txt"
		ul, err := sbx.UploadURL(upPath, nil)
		must(t, err, "UploadURL")
		post := func(u, content string) (int, string) {
			t.Helper()
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			fw, _ := mw.CreateFormFile("file", "uploaded.txt")
			fw.Write([]byte(content))
			mw.Close()
			resp, err := http.Post(u, mw.FormDataContentType(), &body)
			must(t, err, "POST "+u)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := post(ul, "uploaded via url"); code != 200 {
			t.Fatalf("POST upload URL: %d %s", code, body)
		}
		if got, err := sbx.Files.Read(ctx, upPath, nil); err != nil || string(got) != "uploaded via url" {
			t.Errorf("the uploaded file reads %q, %v", got, err)
		}

		// Root's files need a URL signed for root.
		rootPath := "/root/url-root.txt"
		_, err = sbx.Files.Write(ctx, rootPath, []byte("root's"), &sdk.WriteOptions{User: "root"})
		must(t, err, "Write as root")
		rootURL, err := sbx.DownloadURL(rootPath, &sdk.URLOptions{User: "root"})
		must(t, err, "DownloadURL as root")
		if code, body := get(rootURL); code != 200 || body != "root's" {
			t.Errorf("GET root's download URL: %d %q", code, body)
		}

		// Every tampering is refused.
		tamper := func(u, key, value string) string {
			p, err := url.Parse(u)
			must(t, err, "parse URL")
			q := p.Query()
			q.Set(key, value)
			p.RawQuery = q.Encode()
			return p.String()
		}
		for name, u := range map[string]string{
			"tampered signature":         tamper(dl, "signature", "v1_AAAA"),
			"other path":                 tamper(dl, "path", base+"/uploaded.txt"),
			"other user":                 tamper(dl, "username", "root"),
			"upload signature for a GET": ul,
		} {
			if code, body := get(u); code != http.StatusUnauthorized {
				t.Errorf("%s: GET answered %d %q, want 401", name, code, body)
			}
		}
		if code, body := post(tamper(ul, "signature", "v1_AAAA"), "x"); code != http.StatusUnauthorized {
			t.Errorf("tampered upload: POST answered %d %q, want 401", code, body)
		}

		// Expiring URLs work until they expire.
		long, err := sbx.DownloadURL(path, &sdk.URLOptions{Expires: time.Minute})
		must(t, err, "DownloadURL expiring in a minute")
		if code, body := get(long); code != 200 || body != "via url" {
			t.Errorf("GET download URL valid for a minute: %d %q", code, body)
		}
		if code, _ := get(tamper(long, "signature_expiration", fmt.Sprint(time.Now().Add(time.Hour).Unix()))); code != http.StatusUnauthorized {
			t.Errorf("a URL with a pushed-back expiration answered %d, want 401", code)
		}
		// signature_expiration=0 takes part in the hash (envd hashes "0")
		// and has long passed: the router, which finds the sandbox by the
		// signature alone, reads it as envd does (review 6 found it
		// answering "invalid signature" where envd says expired).
		zero := tamper(tamper(dl, "signature_expiration", "0"), "signature",
			envdapi.SignExpiration(path, envdapi.OpRead, "", sbx.EnvdAccessToken, "0"))
		if code, body := get(zero); code != http.StatusUnauthorized || !strings.Contains(body, "signature is already expired") {
			t.Errorf("a URL signed to expire at 0: %d %q, want 401 \"signature is already expired\"", code, body)
		}
		short, err := sbx.DownloadURL(path, &sdk.URLOptions{Expires: time.Second})
		must(t, err, "DownloadURL expiring in a second")
		var code int
		waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("the URL to expire (last answer %d)", code) }, func() bool {
			code, _ = get(short)
			return code == http.StatusUnauthorized
		})
	})
}
