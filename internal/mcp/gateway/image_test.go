package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPrepareRootLinks: an image's links do not have the gateway write
// outside the image's root.
func TestPrepareRootLinks(t *testing.T) {
	outside := t.TempDir()
	root := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	// A link that stays in the root, to a directory the sandbox's trees
	// could be mounted at: refused too.
	os.Mkdir(filepath.Join(root, "dev"), 0o755)
	if err := os.Symlink("dev", filepath.Join(root, "tmp")); err != nil {
		t.Fatal(err)
	}
	err := prepareRoot(root)
	if err == nil {
		t.Error("links out of the root: prepared")
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("wrote outside the root: %v", ents)
	}
	if fi, _ := os.Stat(outside); fi.Mode()&os.ModeSticky != 0 {
		t.Error("chmod outside the root")
	}
	if fi, _ := os.Stat(filepath.Join(root, "dev")); fi.Mode()&os.ModeSticky != 0 {
		t.Error("chmod through the tmp link")
	}
	// A plain root is prepared: /tmp for everyone, the sandbox's hosts.
	plain := t.TempDir()
	if err := prepareRoot(plain); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(plain, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("/tmp: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(plain, "etc", "hosts")); err != nil {
		t.Errorf("/etc/hosts: %v", err)
	}
}

// TestPrepareRootMounts: a mount inside the root (the sandbox's /dev, a
// bound directory) is not the image's to change.
func TestPrepareRootMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	root, shared := t.TempDir(), t.TempDir()
	os.Mkdir(filepath.Join(root, "tmp"), 0o755)
	if err := syscall.Mount(shared, filepath.Join(root, "tmp"), "", syscall.MS_BIND, ""); err != nil {
		t.Skip("cannot bind-mount here:", err)
	}
	defer syscall.Unmount(filepath.Join(root, "tmp"), syscall.MNT_DETACH)
	if err := prepareRoot(root); err == nil {
		t.Error("a mount at /tmp: prepared")
	}
	if fi, _ := os.Stat(shared); fi.Mode()&os.ModeSticky != 0 {
		t.Error("chmod of the mounted directory")
	}
}

func TestLookPathIn(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "usr/bin/node"), []byte("#!"), 0o755)
	os.Symlink("/usr/bin/node", filepath.Join(root, "usr/bin/nodejs"))
	os.WriteFile(filepath.Join(root, "usr/bin/data"), []byte("x"), 0o644)
	for name, want := range map[string]string{"node": "/usr/bin/node", "nodejs": "/usr/bin/nodejs", "/app/x": "/app/x", "data": "", "python": ""} {
		got, err := lookPathIn(root, name, "/bin:/usr/bin")
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "not found in the image") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
