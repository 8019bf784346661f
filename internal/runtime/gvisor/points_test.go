package gvisor

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// TestMountPointsNoSymlinks: a volume's mount point under a template
// directory keeps that directory's owner and mode, but under a template
// symlink (absolute, or climbing out of the layer) it gets the defaults:
// the host directory the symlink names is never looked at, so its
// existence, owner and mode do not show in the sandbox (review 23, F5).
func TestMountPointsNoSymlinks(t *testing.T) {
	testenv.RequireRoot(t, "chown of the mount points")
	base := t.TempDir()
	// A host directory the sandbox must learn nothing about.
	host := filepath.Join(base, "host")
	secret := filepath.Join(host, "secret")
	if err := os.MkdirAll(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(secret, 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(secret, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(base, "layer")
	// A directory of the template's own: its owner and mode are kept.
	own := filepath.Join(layer, "own", "secret")
	if err := os.MkdirAll(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(own, 0o751); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(layer, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../host", filepath.Join(layer, "climb")); err != nil {
		t.Fatal(err)
	}
	const hostID = 200000
	rec := &record{
		HostID: hostID, IDs: 65536, TemplateLayers: []string{layer},
		Mounts: []runtime.Mount{{Target: "/own/secret/x"}, {Target: "/abs/secret/x"}, {Target: "/climb/secret/x"}},
	}
	points := filepath.Join(base, "points")
	if err := mountPoints(points, "h", rec); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path     string
		mode     uint32
		uid, gid uint32
	}{
		{"/own/secret", 0o751, hostID + 1234, hostID + 5678},
		{"/abs/secret", 0o755, hostID, hostID},
		{"/climb/secret", 0o755, hostID, hostID},
		{"/abs", 0o755, hostID, hostID},
	} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(points, tc.path), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.Mode&0o7777 != tc.mode || st.Uid != tc.uid || st.Gid != tc.gid {
			t.Errorf("%s: mode %o owner %d:%d, want a directory %o %d:%d", tc.path, st.Mode, st.Uid, st.Gid, tc.mode, tc.uid, tc.gid)
		}
	}
}
