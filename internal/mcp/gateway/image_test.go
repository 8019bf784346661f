package gateway

import (
	"os"
	"path/filepath"
	"strings"
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
	if err := os.Symlink("../../../../"+outside, filepath.Join(root, "tmp")); err != nil {
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
