package filesystem

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
	"github.com/hutch-sandbox/hutch/internal/envd/config"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// env is one in-process envd filesystem service behind a real HTTP server.
type env struct {
	st  *config.State
	svc *Service
	url string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testenv.RequireRoot(t, "the service chowns what it creates")
	st := config.New("0.6.13", "root")
	svc := NewService(st, nil)
	mux := http.NewServeMux()
	mux.Handle(svc.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		svc.Close()
	})
	return &env{st: st, svc: svc, url: srv.URL}
}

// codecs are the two encodings a client may use: the SDKs use JSON, the
// binary one is connect-go's default.
var codecs = []struct {
	name string
	opts []connect.ClientOption
}{
	{"proto", nil},
	{"json", []connect.ClientOption{connect.WithProtoJSON()}},
}

// eachCodec runs f once per codec with a client of that codec.
func (e *env) eachCodec(t *testing.T, f func(t *testing.T, c filesystemconnect.FilesystemClient)) {
	for _, cd := range codecs {
		t.Run(cd.name, func(t *testing.T) {
			f(t, filesystemconnect.NewFilesystemClient(http.DefaultClient, e.url, cd.opts...))
		})
	}
}

func (e *env) jsonClient() filesystemconnect.FilesystemClient {
	return filesystemconnect.NewFilesystemClient(http.DefaultClient, e.url, connect.WithProtoJSON())
}

// asUser sets the header the SDK sends to act as user.
func asUser[T any](req *connect.Request[T], user string) *connect.Request[T] {
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	return req
}

func wantCode(t *testing.T, err error, want connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
}

func writeFile(t *testing.T, path, data string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // umask-proof
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
}

func owner(t *testing.T, path string) (uid, gid uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

func TestStat(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file.txt")
	writeFile(t, file, "hello", 0o644)
	sub := filepath.Join(dir, "sub")
	mkdir(t, sub)
	linkDir := filepath.Join(dir, "link-dir")
	if err := os.Symlink(sub, linkDir); err != nil {
		t.Fatal(err)
	}
	linkFile := filepath.Join(dir, "link-file")
	if err := os.Symlink("file.txt", linkFile); err != nil { // relative target
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	nobodyFile := filepath.Join(dir, "nobody.txt")
	writeFile(t, nobodyFile, "", 0o600)
	if err := os.Chown(nobodyFile, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	unknownIDs := filepath.Join(dir, "unknown-ids")
	writeFile(t, unknownIDs, "", 0o640)
	if err := os.Chown(unknownIDs, 54321, 54322); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		path     string
		code     connect.Code // 0: success
		typ      pb.FileType
		mode     uint32
		perms    string
		size     int64 // -1: don't check
		target   string
		own, grp string
	}{
		{name: "file", path: file, typ: pb.FileType_FILE_TYPE_FILE, mode: 0o644, perms: "-rw-r--r--", size: 5, own: "root", grp: "root"},
		{name: "dir", path: sub, typ: pb.FileType_FILE_TYPE_DIRECTORY, mode: 0o755, perms: "drwxr-xr-x", size: -1, own: "root", grp: "root"},
		{name: "symlink to dir", path: linkDir, typ: pb.FileType_FILE_TYPE_DIRECTORY, mode: 0o755, perms: "Lrwxrwxrwx", size: -1, target: sub, own: "root", grp: "root"},
		{name: "relative symlink to file", path: linkFile, typ: pb.FileType_FILE_TYPE_FILE, mode: 0o644, perms: "Lrwxrwxrwx", size: -1, target: file, own: "root", grp: "root"},
		{name: "dangling symlink", path: dangling, typ: pb.FileType_FILE_TYPE_UNSPECIFIED, mode: 0, perms: "Lrwxrwxrwx", size: -1, target: filepath.Join(dir, "nowhere"), own: "root", grp: "root"},
		{name: "owned by nobody", path: nobodyFile, typ: pb.FileType_FILE_TYPE_FILE, mode: 0o600, perms: "-rw-------", size: 0, own: "nobody", grp: "nogroup"},
		{name: "unknown ids are numeric", path: unknownIDs, typ: pb.FileType_FILE_TYPE_FILE, mode: 0o640, perms: "-rw-r-----", size: 0, own: "54321", grp: "54322"},
		{name: "missing", path: filepath.Join(dir, "missing"), code: connect.CodeNotFound},
		{name: "below a file", path: filepath.Join(file, "x"), code: connect.CodeNotFound},
	}
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp, err := c.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: tt.path}))
				if tt.code != 0 {
					wantCode(t, err, tt.code)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				en := resp.Msg.GetEntry()
				if en.GetName() != filepath.Base(tt.path) || en.GetPath() != tt.path {
					t.Errorf("name/path = %q %q", en.GetName(), en.GetPath())
				}
				if en.GetType() != tt.typ || en.GetMode() != tt.mode || en.GetPermissions() != tt.perms {
					t.Errorf("type/mode/perms = %v %o %q, want %v %o %q", en.GetType(), en.GetMode(), en.GetPermissions(), tt.typ, tt.mode, tt.perms)
				}
				if tt.size >= 0 && en.GetSize() != tt.size {
					t.Errorf("size = %d, want %d", en.GetSize(), tt.size)
				}
				if got := en.GetSymlinkTarget(); got != tt.target || (tt.target == "") != (en.SymlinkTarget == nil) {
					t.Errorf("symlinkTarget = %v, want %q", en.SymlinkTarget, tt.target)
				}
				if en.GetOwner() != tt.own || en.GetGroup() != tt.grp {
					t.Errorf("owner/group = %q %q, want %q %q", en.GetOwner(), en.GetGroup(), tt.own, tt.grp)
				}
				if en.GetModifiedTime() == nil || time.Since(en.GetModifiedTime().AsTime()) > time.Hour {
					t.Errorf("modifiedTime = %v", en.GetModifiedTime())
				}
			})
		}
	})
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStatJSONShape checks the field spellings the SDKs parse (§3.3).
func TestStatJSONShape(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "f")
	writeFile(t, file, "hello", 0o644)
	body := `{"path":` + jsonString(file) + `}`
	resp, err := http.Post(e.url+"/filesystem.Filesystem/Stat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	var got struct {
		Entry map[string]any `json:"entry"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"type": "FILE_TYPE_FILE", "size": "5", "mode": float64(420), "permissions": "-rw-r--r--"} {
		if got.Entry[k] != want {
			t.Errorf("%s = %#v, want %#v (body %s)", k, got.Entry[k], want, raw)
		}
	}
	if _, ok := got.Entry["modifiedTime"].(string); !ok {
		t.Errorf("modifiedTime missing or not a string: %s", raw)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestRelativePathAndHome(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rel.txt"), "x", 0o644)
	c := e.jsonClient()

	// No default workdir: relative paths start at the user's home (/root).
	if _, err := c.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: "rel.txt"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("relative path without workdir: %v", err)
	}
	e.st.SetDefaults("", dir)
	resp, err := c.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: "rel.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetEntry().GetPath(); got != filepath.Join(dir, "rel.txt") {
		t.Fatalf("path = %q", got)
	}
}

func TestMetadataXattrs(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "meta.txt")
	writeFile(t, file, "x", 0o644)
	for k, v := range map[string]string{"user.e2b.owner": "alice", "user.e2b.kind": "report", "user.other": "ignored"} {
		if err := unix.Setxattr(file, k, []byte(v), 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) {
				t.Skip("temp dir has no user xattrs")
			}
			t.Fatal(err)
		}
	}
	plain := filepath.Join(dir, "plain.txt")
	writeFile(t, plain, "x", 0o644)
	want := map[string]string{"owner": "alice", "kind": "report"}
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		resp, err := c.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: file}))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Msg.GetEntry().GetMetadata(); !mapsEqual(got, want) {
			t.Errorf("Stat metadata = %v, want %v", got, want)
		}
		list, err := c.ListDir(context.Background(), connect.NewRequest(&pb.ListDirRequest{Path: dir}))
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range list.Msg.GetEntries() {
			switch en.GetName() {
			case "meta.txt":
				if !mapsEqual(en.GetMetadata(), want) {
					t.Errorf("ListDir metadata = %v", en.GetMetadata())
				}
			case "plain.txt":
				if len(en.GetMetadata()) != 0 {
					t.Errorf("plain file metadata = %v", en.GetMetadata())
				}
			}
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestListDir(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	writeFile(t, filepath.Join(root, "a.txt"), "a", 0o644)
	writeFile(t, filepath.Join(root, "sub", "b.txt"), "b", 0o644)
	writeFile(t, filepath.Join(root, "sub", "deeper", "c.txt"), "c", 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	// A symlink cycle inside the tree must not make deep listings endless.
	if err := os.Symlink(root, filepath.Join(root, "sub", "loop")); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		path  string
		depth uint32
		want  []string // paths relative to path
		code  connect.Code
	}{
		{name: "depth 0 is 1", path: root, depth: 0, want: []string{"a.txt", "sub"}},
		{name: "depth 1", path: root, depth: 1, want: []string{"a.txt", "sub"}},
		{name: "depth 2", path: root, depth: 2, want: []string{"a.txt", "sub", "sub/b.txt", "sub/deeper", "sub/loop"}},
		{name: "depth 5", path: root, depth: 5, want: []string{"a.txt", "sub", "sub/b.txt", "sub/deeper", "sub/deeper/c.txt", "sub/loop"}},
		{name: "through symlinked dir", path: link, depth: 2, want: []string{"a.txt", "sub", "sub/b.txt", "sub/deeper", "sub/loop"}},
		{name: "not a dir", path: filepath.Join(root, "a.txt"), code: connect.CodeInvalidArgument},
		{name: "missing", path: filepath.Join(root, "nope"), code: connect.CodeNotFound},
	}
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				resp, err := c.ListDir(context.Background(), connect.NewRequest(&pb.ListDirRequest{Path: tt.path, Depth: tt.depth}))
				if tt.code != 0 {
					wantCode(t, err, tt.code)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, en := range resp.Msg.GetEntries() {
					if !strings.HasPrefix(en.GetPath(), tt.path+"/") {
						t.Errorf("entry path %q not under %q", en.GetPath(), tt.path)
					}
					if en.GetName() != filepath.Base(en.GetPath()) {
						t.Errorf("name %q of %q", en.GetName(), en.GetPath())
					}
					got = append(got, strings.TrimPrefix(en.GetPath(), tt.path+"/"))
					if strings.HasSuffix(en.GetPath(), "/sub") && en.GetType() != pb.FileType_FILE_TYPE_DIRECTORY {
						t.Errorf("sub has type %v", en.GetType())
					}
					if strings.HasSuffix(en.GetPath(), "/loop") && (en.GetType() != pb.FileType_FILE_TYPE_DIRECTORY || en.GetSymlinkTarget() != root) {
						t.Errorf("loop link = %v %q", en.GetType(), en.GetSymlinkTarget())
					}
				}
				sort.Strings(got)
				if !slices.Equal(got, tt.want) {
					t.Errorf("entries = %v, want %v", got, tt.want)
				}
			})
		}
	})
}

func TestMakeDir(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	writeFile(t, file, "x", 0o644)
	existing := filepath.Join(dir, "existing")
	mkdir(t, existing)

	tests := []struct {
		name string
		path string
		user string
		code connect.Code
	}{
		{name: "new nested as nobody", path: filepath.Join(existing, "a", "b", "c"), user: "nobody"},
		{name: "new as default user", path: filepath.Join(dir, "rootdir")},
		{name: "existing dir", path: existing, code: connect.CodeAlreadyExists},
		{name: "over a file", path: file, code: connect.CodeInvalidArgument},
		{name: "below a file", path: filepath.Join(file, "sub"), code: connect.CodeInvalidArgument},
		{name: "unknown user", path: filepath.Join(dir, "u"), user: "no-such-user-hutch", code: connect.CodeUnauthenticated},
	}
	for _, cd := range codecs {
		c := filesystemconnect.NewFilesystemClient(http.DefaultClient, e.url, cd.opts...)
		for _, tt := range tests {
			t.Run(cd.name+"/"+tt.name, func(t *testing.T) {
				path := tt.path
				if tt.code == 0 {
					path = filepath.Join(path, cd.name) // fresh per codec
				}
				req := connect.NewRequest(&pb.MakeDirRequest{Path: path})
				if tt.user != "" {
					asUser(req, tt.user)
				}
				resp, err := c.MakeDir(context.Background(), req)
				if tt.code != 0 {
					wantCode(t, err, tt.code)
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				en := resp.Msg.GetEntry()
				if en.GetPath() != path || en.GetType() != pb.FileType_FILE_TYPE_DIRECTORY {
					t.Fatalf("entry = %v", en)
				}
				wantUID := uint32(0)
				if tt.user == "nobody" {
					wantUID = 65534
				}
				// Every directory the call created belongs to the user; the
				// ones that existed before keep their owner.
				for p := path; p != dir && p != existing; p = filepath.Dir(p) {
					if uid, _ := owner(t, p); uid != wantUID {
						t.Errorf("%s owned by %d, want %d", p, uid, wantUID)
					}
				}
				if uid, _ := owner(t, existing); uid != 0 {
					t.Errorf("pre-existing parent re-owned to %d", uid)
				}
				if tt.user == "nobody" && en.GetOwner() != "nobody" {
					t.Errorf("entry owner = %q", en.GetOwner())
				}
			})
		}
	}
}

func TestMove(t *testing.T) {
	e := newEnv(t)
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		dir := t.TempDir()
		src := filepath.Join(dir, "src.txt")
		writeFile(t, src, "moved", 0o644)
		dst := filepath.Join(dir, "new", "parents", "dst.txt")

		resp, err := c.Move(context.Background(), asUser(connect.NewRequest(&pb.MoveRequest{Source: src, Destination: dst}), "nobody"))
		if err != nil {
			t.Fatal(err)
		}
		en := resp.Msg.GetEntry()
		if en.GetPath() != dst || en.GetName() != "dst.txt" || en.GetType() != pb.FileType_FILE_TYPE_FILE || en.GetSize() != 5 {
			t.Errorf("entry = %v", en)
		}
		if _, err := os.Lstat(src); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("source still there: %v", err)
		}
		if got := readString(t, dst); got != "moved" {
			t.Errorf("destination holds %q", got)
		}
		for _, p := range []string{filepath.Join(dir, "new"), filepath.Join(dir, "new", "parents")} {
			if uid, gid := owner(t, p); uid != 65534 || gid != 65534 {
				t.Errorf("%s owned by %d:%d, want nobody", p, uid, gid)
			}
		}

		// Moving a directory works the same way.
		mkdir(t, filepath.Join(dir, "d", "inner"))
		if _, err := c.Move(context.Background(), connect.NewRequest(&pb.MoveRequest{Source: filepath.Join(dir, "d"), Destination: filepath.Join(dir, "d2")})); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "d2", "inner")); err != nil {
			t.Error(err)
		}

		_, err = c.Move(context.Background(), connect.NewRequest(&pb.MoveRequest{Source: filepath.Join(dir, "missing"), Destination: filepath.Join(dir, "x")}))
		wantCode(t, err, connect.CodeNotFound)
	})
}

func TestRemove(t *testing.T) {
	e := newEnv(t)
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "tree", "a", "b.txt"), "x", 0o644)
		writeFile(t, filepath.Join(dir, "file"), "x", 0o644)
		tests := []struct{ name, path string }{
			{"tree", filepath.Join(dir, "tree")},
			{"file", filepath.Join(dir, "file")},
			{"missing is ok", filepath.Join(dir, "missing")},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if _, err := c.Remove(context.Background(), connect.NewRequest(&pb.RemoveRequest{Path: tt.path})); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Lstat(tt.path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("still there: %v", err)
				}
			})
		}
	})
}

func TestUnauthenticated(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.eachCodec(t, func(t *testing.T, c filesystemconnect.FilesystemClient) {
		ctx := context.Background()
		const bad = "no-such-user-hutch"
		calls := map[string]func() error{
			"Stat": func() error {
				_, err := c.Stat(ctx, asUser(connect.NewRequest(&pb.StatRequest{Path: dir}), bad))
				return err
			},
			"ListDir": func() error {
				_, err := c.ListDir(ctx, asUser(connect.NewRequest(&pb.ListDirRequest{Path: dir}), bad))
				return err
			},
			"Remove": func() error {
				_, err := c.Remove(ctx, asUser(connect.NewRequest(&pb.RemoveRequest{Path: filepath.Join(dir, "x")}), bad))
				return err
			},
			"Move": func() error {
				_, err := c.Move(ctx, asUser(connect.NewRequest(&pb.MoveRequest{Source: dir, Destination: dir + "2"}), bad))
				return err
			},
			"CreateWatcher": func() error {
				_, err := c.CreateWatcher(ctx, asUser(connect.NewRequest(&pb.CreateWatcherRequest{Path: dir}), bad))
				return err
			},
			"WatchDir": func() error {
				s, err := c.WatchDir(ctx, asUser(connect.NewRequest(&pb.WatchDirRequest{Path: dir}), bad))
				if err != nil {
					return err
				}
				defer s.Close()
				for s.Receive() {
				}
				return s.Err()
			},
			"garbled header": func() error {
				req := connect.NewRequest(&pb.StatRequest{Path: dir})
				req.Header().Set("Authorization", "Basic !!!")
				_, err := c.Stat(ctx, req)
				return err
			},
		}
		for name, call := range calls {
			t.Run(name, func(t *testing.T) { wantCode(t, call(), connect.CodeUnauthenticated) })
		}
		// A known user works.
		if _, err := c.Stat(ctx, asUser(connect.NewRequest(&pb.StatRequest{Path: dir}), "nobody")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMalformedJSON(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{`{"path":`, `not json`, `{"path": 5}`, `{"path":["a"]}`} {
		t.Run(body, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, e.url+"/filesystem.Filesystem/Stat", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Connect-Protocol-Version", "1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status = %d, want 400 (%s)", resp.StatusCode, raw)
			}
			var ce struct{ Code, Message string }
			if err := json.Unmarshal(raw, &ce); err != nil {
				t.Fatalf("body is not JSON: %q", raw)
			}
			if ce.Code != "invalid_argument" || ce.Message == "" {
				t.Errorf("error body = %s", raw)
			}
		})
	}
	// The server survived and still answers.
	if _, err := e.jsonClient().Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: "/"})); err != nil {
		t.Fatal(err)
	}
}

func TestHandleMounts(t *testing.T) {
	mux := http.NewServeMux()
	Handle(mux, config.New("0.6.13", "root"), nil)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := filesystemconnect.NewFilesystemClient(http.DefaultClient, srv.URL, connect.WithProtoJSON())
	resp, err := c.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: "/"}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.GetEntry().GetType() != pb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("/ is %v", resp.Msg.GetEntry().GetType())
	}
}

// TestErrorMessages pins the code and the message of the service's
// errors, as the SDKs receive them.
func TestErrorMessages(t *testing.T) {
	e := newEnv(t)
	c := e.jsonClient()
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	writeFile(t, file, "x", 0o644)
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name string
		call func() error
		code connect.Code
		msg  string
	}{
		{"stat missing", func() error {
			_, err := c.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: missing}))
			return err
		}, connect.CodeNotFound, "stat " + missing + ": lstat " + missing + ": no such file or directory"},
		{"list a file", func() error {
			_, err := c.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: file}))
			return err
		}, connect.CodeInvalidArgument, "list " + file + ": not a directory: invalid argument"},
		{"make an existing directory", func() error {
			_, err := c.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: dir}))
			return err
		}, connect.CodeAlreadyExists, "directory " + dir + ": already exists"},
		{"move a missing source", func() error {
			_, err := c.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: missing, Destination: file + "2"}))
			return err
		}, connect.CodeNotFound, "source " + missing + ": lstat " + missing + ": no such file or directory"},
		{"bad ~", func() error {
			_, err := c.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "~x"}))
			return err
		}, connect.CodeInvalidArgument, `path "~x": only ~ and ~/ are expanded: invalid argument`},
		{"unknown watcher", func() error {
			_, err := c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: "wnope"}))
			return err
		}, connect.CodeNotFound, `watcher "wnope": not found`},
		{"remove an unknown watcher", func() error {
			_, err := c.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: "wnope"}))
			return err
		}, connect.CodeNotFound, `watcher "wnope": not found`},
		{"watch a file", func() error {
			_, err := c.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: file}))
			return err
		}, connect.CodeInvalidArgument, "watch " + file + ": not a directory: invalid argument"},
		{"watch a missing directory", func() error {
			s, err := c.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: missing}))
			if err != nil {
				return err
			}
			defer s.Close()
			for s.Receive() {
			}
			return s.Err()
		}, connect.CodeNotFound, "watch " + missing + ": stat " + missing + ": no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cerr *connect.Error
			if err := tc.call(); !errors.As(err, &cerr) {
				t.Fatalf("got %v, want a Connect error", err)
			}
			if cerr.Code() != tc.code || cerr.Message() != tc.msg {
				t.Errorf("got %v %q, want %v %q", cerr.Code(), cerr.Message(), tc.code, tc.msg)
			}
		})
	}
}
