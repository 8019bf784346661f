package volume

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/store"
)

// newVolume returns a manager over a fresh store and data dir, a volume
// of it, and its content opened with its token.
func newVolume(t *testing.T) (*Manager, Volume, *Content) {
	t.Helper()
	ctx := context.Background()
	data := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(data, "hutch.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := New(st, data, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Create(ctx, "", "vol")
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.Open(ctx, v.ID, v.Token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return m, v, c
}

// TestContentEscapes: no path, whatever symlinks a sandbox planted in the
// volume, reads, writes, lists, changes or removes a file outside it.
func TestContentEscapes(t *testing.T) {
	_, v, c := newVolume(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What a sandbox could plant: links out, absolute and relative, to a
	// file and to a directory, and a link chain.
	for name, target := range map[string]string{
		"abs":      secret,
		"absdir":   outside,
		"rel":      "../../../../../../../../" + secret,
		"etc":      "/etc",
		"chain":    "abs",
		"procroot": "/proc/self/root",
	} {
		if err := os.Symlink(target, filepath.Join(v.Dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(v.Dir, "fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	ops := map[string]func(p string) error{
		"read": func(p string) error {
			f, _, err := c.Open(p)
			if err == nil {
				f.Close()
			}
			return err
		},
		"write":  func(p string) error { _, err := c.WriteFile(p, strings.NewReader("x"), Owner{}); return err },
		"list":   func(p string) error { _, err := c.List(context.Background(), p, 1); return err },
		"mkdir":  func(p string) error { _, err := c.MakeDir(p, Owner{}, true); return err },
		"update": func(p string) error { m := uint32(0o777); _, err := c.Update(p, Owner{Mode: &m}); return err },
	}
	for _, tc := range []struct {
		path string
		ops  []string
	}{
		{"/../secret", []string{"read", "write", "list", "mkdir", "update"}},
		{"../../../../etc/passwd", []string{"read", "write", "update"}},
		{"/a/../../secret", []string{"read", "write", "mkdir"}},
		{"/abs", []string{"read", "write"}},
		{"/rel", []string{"read", "write"}},
		{"/chain", []string{"read", "write"}},
		{"/absdir/secret", []string{"read", "write", "update"}},
		{"/absdir/new", []string{"write", "mkdir"}},
		{"/absdir", []string{"list"}},
		{"/etc/passwd", []string{"read", "write"}},
		{"/procroot/etc/passwd", []string{"read", "write"}},
		{"/fifo", []string{"read", "write"}},
	} {
		for _, op := range tc.ops {
			t.Run(op+" "+tc.path, func(t *testing.T) {
				err := ops[op](tc.path)
				if err == nil {
					t.Fatalf("%s %s succeeded", op, tc.path)
				}
				if !clientError(err) {
					t.Errorf("%s %s: %v: not a client error", op, tc.path, err)
				}
			})
		}
	}
	// Escapes say so.
	if _, _, err := c.Open("/../secret"); !errors.Is(err, ErrEscapes) {
		t.Errorf("read /../secret: %v, want ErrEscapes", err)
	}
	if _, _, err := c.Open("/abs"); !errors.Is(err, ErrEscapes) {
		t.Errorf("read /abs: %v, want ErrEscapes", err)
	}
	// And nothing outside changed.
	b, err := os.ReadFile(secret)
	if err != nil || string(b) != "host secret" {
		t.Errorf("secret = %q, %v", b, err)
	}
	fi, _ := os.Stat(secret)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("secret's mode became %v", fi.Mode())
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Errorf("outside dir has %d entries, want only the secret", len(ents))
	}
	// Removing a link removes the link, not its target.
	if err := c.Remove("/absdir"); err != nil {
		t.Errorf("remove /absdir: %v", err)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("removing a link removed its target: %v", err)
	}
}

func TestContentRoundTrip(t *testing.T) {
	_, _, c := newVolume(t)
	uid, gid, mode := uint32(1000), uint32(1001), uint32(0o640)
	e, err := c.WriteFile("/dir/sub/f.txt", strings.NewReader("hello"), Owner{UID: &uid, GID: &gid, Mode: &mode})
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != "/dir/sub/f.txt" || e.Name != "f.txt" || e.Size != 5 || e.UID != 1000 || e.GID != 1001 || e.Mode != 0o640 || e.Type != TypeFile {
		t.Errorf("WriteFile entry = %+v", e)
	}
	// Parents made for it get its owner.
	if d, err := c.Stat("/dir/sub"); err != nil || d.Type != TypeDirectory || d.UID != 1000 {
		t.Errorf("parent = %+v, %v", d, err)
	}
	f, _, err := c.Open("dir/sub/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "hello" {
		t.Errorf("read %q", b)
	}
	// Overwrite keeps the owner.
	if e, err = c.WriteFile("/dir/sub/f.txt", strings.NewReader("hi"), Owner{}); err != nil || e.Size != 2 || e.UID != 1000 || e.Mode != 0o640 {
		t.Errorf("overwrite = %+v, %v", e, err)
	}
	list, err := c.List(context.Background(), "/", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range list {
		paths = append(paths, e.Path)
	}
	if got := strings.Join(paths, " "); got != "/dir /dir/sub /dir/sub/f.txt" {
		t.Errorf("List depth 3 = %s", got)
	}
	if list, _ := c.List(context.Background(), "/", 1); len(list) != 1 {
		t.Errorf("List depth 1 = %+v", list)
	}
	if _, err := c.MakeDir("/dir", Owner{}, false); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("MakeDir existing = %v", err)
	}
	if _, err := c.MakeDir("/x/y", Owner{}, false); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("MakeDir without parent = %v", err)
	}
	if _, err := c.MakeDir("/x/y", Owner{}, true); err != nil {
		t.Errorf("MakeDir with parents = %v", err)
	}
	m := uint32(0o700)
	if e, err := c.Update("/x", Owner{Mode: &m}); err != nil || e.Mode != 0o700 {
		t.Errorf("Update = %+v, %v", e, err)
	}
	big := uint32(70000)
	if _, err := c.Update("/x", Owner{UID: &big}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Update uid 70000 = %v, want invalid", err)
	}
	if err := c.Remove("/"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Remove / = %v", err)
	}
	if err := c.Remove("/dir"); err != nil {
		t.Errorf("Remove /dir = %v", err)
	}
	if _, err := c.Stat("/dir/sub/f.txt"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stat removed = %v", err)
	}
}

func TestManager(t *testing.T) {
	m, v, _ := newVolume(t)
	ctx := context.Background()
	for _, name := range []string{"", "a b", "../x", "x/y", strings.Repeat("a", 65), "é"} {
		if _, err := m.Create(ctx, "", name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create(%q) = %v, want invalid argument", name, err)
		}
	}
	if _, err := m.Create(ctx, "", "vol"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Create duplicate = %v", err)
	}
	if _, err := m.Open(ctx, v.ID, "wrong"); !errors.Is(err, ErrBadToken) {
		t.Errorf("Open with a wrong token = %v", err)
	}
	if _, err := m.Open(ctx, "nope", v.Token); !errors.Is(err, ErrBadToken) {
		t.Errorf("Open of an unknown volume = %v", err)
	}
	fi, err := os.Stat(v.Dir)
	if err != nil || fi.Mode() != os.ModeDir|os.ModeSticky|0o777 {
		t.Errorf("volume dir mode = %v, %v", fi.Mode(), err)
	}
	_, release, err := m.Hold(ctx, "", []string{"vol"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "", v.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Delete of a held volume = %v", err)
	}
	release()
	if _, _, err := m.Hold(ctx, "", []string{"vol", "nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Hold of an unknown name = %v", err)
	}
	if err := m.Delete(ctx, "", v.ID); err != nil {
		t.Errorf("Delete = %v", err)
	}
	if _, err := os.Stat(v.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume dir after delete: %v", err)
	}
	if err := m.Delete(ctx, "", v.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Delete = %v", err)
	}
}

// clientError reports whether err is of a class the API answers 4xx.
func clientError(err error) bool {
	for _, c := range []error{errdefs.ErrInvalidArgument, errdefs.ErrNotFound, errdefs.ErrAlreadyExists, errdefs.ErrFailedPrecondition, errdefs.ErrPermissionDenied} {
		if errors.Is(err, c) {
			return true
		}
	}
	return false
}

// TestListBounds: what a sandbox put in a volume cannot make one listing
// hold the server's memory hostage (review 17: a 2,000-level tree listed
// at depth 100,000 took 2.5 GB): the depth, the entries and the path's
// length are bounded, each with a clear 400.
func TestListBounds(t *testing.T) {
	_, v, c := newVolume(t)
	deep := v.Dir
	for i := 0; i < 40; i++ {
		deep = filepath.Join(deep, strings.Repeat("d", 20))
	}
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(context.Background(), "/", MaxListDepth+1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("depth %d = %v; want invalid argument", MaxListDepth+1, err)
	}
	if got, err := c.List(context.Background(), "/", MaxListDepth); err != nil || len(got) != MaxListDepth {
		t.Errorf("depth %d: %d entries, %v", MaxListDepth, len(got), err)
	}
	if _, err := c.List(context.Background(), "/"+strings.Repeat("x/", MaxPath), 1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a path past PATH_MAX = %v; want invalid argument", err)
	}
	many := filepath.Join(v.Dir, "many")
	os.Mkdir(many, 0o755)
	for i := 0; i <= MaxListEntries; i++ {
		if err := os.WriteFile(filepath.Join(many, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.List(context.Background(), "/many", 1); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "entries") {
		t.Errorf("%d entries = %v; want invalid argument naming the bound", MaxListEntries+1, err)
	}
}

// TestListNeverWaitsForever: a listing opens what it reads without waiting
// (a FIFO a sandbox swapped in for a directory fails at once), and waits
// for its turn among the server's listings only as long as its request
// (review 19: four listings stuck on FIFOs stopped every listing).
func TestListNeverWaitsForever(t *testing.T) {
	_, v, c := newVolume(t)
	if err := syscall.Mkfifo(filepath.Join(v.Dir, "f"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		f, err := c.openDir("f")
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a FIFO opened as a directory")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("opening a FIFO as a directory waits for a writer")
	}
	for range cap(c.lists) {
		c.lists <- struct{}{}
	}
	defer func() {
		for range cap(c.lists) {
			<-c.lists
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.List(ctx, "/", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a listing with every slot taken = %v; want its request's deadline", err)
	}
}
