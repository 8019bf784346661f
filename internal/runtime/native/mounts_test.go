package native

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// run runs sh -c script in a new sandbox with mounts, as user, and
// returns its output; it fails the test unless the script exits 0.
func runWithMounts(t *testing.T, rt *Runtime, user, script string, mounts ...runtime.Mount) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Mounts: mounts,
		Process: runtime.Process{Args: []string{"sh", "-c", script}, User: user, Cwd: "/", Stdout: &out, Stderr: &out}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer sbx.Delete(context.Background())
	st, err := sbx.Wait(ctx)
	if err != nil || st.Code != 0 {
		t.Fatalf("%q as %s: %+v, %v; output %q", script, user, st, err, out.String())
	}
	return out.String()
}

// volumeDir makes a directory as the volume package does: root-owned,
// mode 1777.
func volumeDir(t *testing.T) string {
	t.Helper()
	parent := t.TempDir()
	dir := filepath.Join(parent, "vol")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMountsShareOwners: a file the sandbox's user writes in a mounted
// directory is owned by the same uid on disk and in another sandbox, and
// survives both sandboxes.
func TestMountsShareOwners(t *testing.T) {
	requireBase(t)
	rt := testRuntime(t)
	dir := volumeDir(t)
	m := runtime.Mount{Source: dir, Target: "/mnt/data"}
	runWithMounts(t, rt, "user", "echo hi > /mnt/data/f && mkdir /mnt/data/d", m)
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "f"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 1000 || st.Gid != 1000 {
		t.Errorf("file written by the sandbox's uid 1000 is %d:%d on disk, want 1000:1000", st.Uid, st.Gid)
	}
	// A second mount elsewhere, in a sandbox of another uid slot.
	got := runWithMounts(t, rt, "root", "stat -c '%u:%g %n' /home/user/v/f /home/user/v/d && cat /home/user/v/f && stat -c %u:%g /home/user/v",
		runtime.Mount{Source: dir, Target: "/home/user/v"})
	want := "1000:1000 /home/user/v/f\n1000:1000 /home/user/v/d\nhi\n0:0\n"
	if got != want {
		t.Errorf("second sandbox sees %q, want %q", got, want)
	}
	// Read-only mounts refuse writes.
	runWithMounts(t, rt, "root", "! touch /ro/x 2>/dev/null", runtime.Mount{Source: dir, Target: "/ro", ReadOnly: true})
}

func TestMountTargets(t *testing.T) {
	requireBase(t)
	rt := testRuntime(t)
	dir := volumeDir(t)
	for _, target := range []string{
		"relative", "/", "/proc", "/proc/1", "/sys/x", "/dev", "/dev/shm", "/a/../etc", "/mnt/../../x",
		// Symlinks in the template (Debian's merged /usr): refused, not
		// followed.
		"/bin/vol", "/lib/x",
		// A file, not a directory.
		"/etc/passwd", "/etc/hostname/x",
	} {
		t.Run(target, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Mounts: []runtime.Mount{{Source: dir, Target: target}},
				Process: runtime.Process{Args: []string{"true"}}})
			if err == nil {
				sbx.Delete(context.Background())
				t.Fatalf("a mount at %q was made", target)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("mount at %q: %v, want an invalid argument", target, err)
			}
		})
	}
	// Nothing of the failed sandboxes' mkdirs reached the host.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("volume dir holds %s", strings.Join(names, " "))
	}
}
