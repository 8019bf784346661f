package gvisor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// testImage is an image root of the base template's layers under a top
// layer of the test's own, holding /hello.
func testImage(t *testing.T) (runtime.ImageRoot, string) {
	t.Helper()
	base, err := template.Open(testenv.TemplatesDir()).Get("base")
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	os.Chmod(top, 0o755)
	if err := os.WriteFile(filepath.Join(top, "hello"), []byte("from the top layer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := runtime.ImageRoot{Build: "test-image", Layers: append(base.LowerDirs(), top), Target: "/opt/images/one", Config: []byte(`{"cmd":["x"]}`),
		Binds: []runtime.ImageBind{{From: "/srv/shared", To: "/data"}, {From: "/etc/hostname", To: "/config/name", ReadOnly: true}}}
	return img, top
}

// imageRuntime is a runtime for tests that shows image roots despite
// errImagesProc, the rest of them tested meanwhile.
func imageRuntime(t *testing.T) *Runtime {
	t.Helper()
	rt := testRuntime(t)
	rt.imagesDespiteProc = true
	return rt
}

// TestImageRootRefused: Create refuses image roots on gVisor, and says
// why (errImagesProc; TestImageRoot shows the /proc that would leak).
func TestImageRootRefused(t *testing.T) {
	requireRunsc(t)
	rt := testRuntime(t)
	img, _ := testImage(t)
	_, err := rt.Create(t.Context(), runtime.Spec{Template: "base", Images: []runtime.ImageRoot{img}, Process: runtime.Process{Args: []string{"true"}}})
	if !errors.Is(err, errdefs.ErrNotImplemented) || !strings.Contains(err.Error(), "hidepid") {
		t.Errorf("Create: %v, want ErrNotImplemented saying why", err)
	}
}

// runIn runs script with sh in a new sandbox of spec (its Process
// replaced) and returns its output, failing t unless it exits 0.
func runIn(t *testing.T, rt *Runtime, spec runtime.Spec, user, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	spec.Template = "base"
	spec.Process = runtime.Process{Args: []string{"sh", "-c", script}, User: user, Cwd: "/", Stdout: &out, Stderr: &out}
	sbx, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer sbx.Delete(context.Background())
	st, err := sbx.Wait(ctx)
	if err != nil || st.Code != 0 {
		t.Fatalf("%+v, %v; output %q", st, err, out.String())
	}
	return out.String()
}

// TestImageRoot is native's TestImageRoot on gVisor: an image root is the
// image's layers merged, writable by the sandbox without changing the
// layers, with a /proc of its own, the sandbox's /dev (its pts too) and a
// /dev/shm of its own, the sandbox's directories and files bound in
// (live, read-only if asked, nosuid and nodev: a setuid-root program of
// the sandbox's raises no one there, as it does in the sandbox), and its
// config beside it; a program chrooted there runs from the image's files.
// One difference, why Create refuses image roots (errImagesProc): a
// program of the image as a uid of its own sees pid 1 (root's) in its
// /proc. When this test sees it hidden, gVisor has hidepid: lift the
// refusal.
func TestImageRoot(t *testing.T) {
	requireRunsc(t)
	rt := imageRuntime(t)
	img, top := testImage(t)
	script := strings.Join([]string{
		"cat /opt/images/one.json; echo",
		"stat -c '%u %a' /opt/images/one.json",
		"echo shared > /srv/shared/f",
		"chroot /opt/images/one /bin/sh -c 'cat /hello; echo written > /hello; cat /hello; ls /dev/null; test -c /dev/pts/ptmx && test -d /dev/shm && echo pts shm; cat /proc/cmdline; grep -c . /proc/self/status >/dev/null && echo proc; cat /data/f; cat /config/name >/dev/null && echo file; echo x 2>/dev/null > /config/name || echo read-only'",
		// A program of the image as a uid of its own: binds are nosuid
		// and nodev, /dev nosuid, /dev/shm its own. A setuid-root id in
		// the sandbox makes it root; through the bind, not.
		"touch /dev/shm/sandbox-only",
		"cp /bin/id /srv/shared/id && chmod 4755 /srv/shared/id",
		"chroot --userspec=61000:61000 / /srv/shared/id -u",
		"chroot --userspec=61000:61000 /opt/images/one /bin/sh -c 'test -e /proc/1 && echo pid1-visible || echo pid1-hidden; grep \" /data \" /proc/self/mounts | grep -c nosuid,nodev; grep \" /dev \" /proc/self/mounts | grep -c nosuid; ls /dev/shm | wc -l; /data/id -u'",
		"cat /opt/images/one/hello",
		"cat /proc/cmdline",
	}, " && ")
	out := runIn(t, rt, runtime.Spec{Images: []runtime.ImageRoot{img}}, "root", script)
	// gVisor's /proc/cmdline is the Sentry's own line, not the host's:
	// there is nothing to mask, but the image root's must be the
	// sandbox's.
	lines := strings.Split(out, "\n")
	if len(lines) < 2 {
		t.Fatalf("output %q", out)
	}
	cmdline := lines[len(lines)-2]
	if host, _ := os.ReadFile("/proc/cmdline"); len(bytes.TrimSpace(host)) > 0 && strings.Contains(out, strings.TrimSpace(string(host))) {
		t.Errorf("the host's kernel command line shows: %q", out)
	}
	want := "{\"cmd\":[\"x\"]}\n0 644\nfrom the top layer\nwritten\n/dev/null\npts shm\n" + cmdline + "\nproc\nshared\nfile\nread-only\n" +
		"0\npid1-visible\n1\n1\n0\n61000\nwritten\n" + cmdline + "\n"
	if out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if b, _ := os.ReadFile(filepath.Join(top, "hello")); string(b) != "from the top layer\n" {
		t.Errorf("the layer changed: %q", b)
	}
}

// TestImageRootUser: PID 1 starts as root with CAP_SYS_ADMIN in a
// sandbox with image roots (for their binds), and the first process
// still runs as it does without them: its user, groups and capabilities
// are the same, root's and another user's.
func TestImageRootUser(t *testing.T) {
	requireRunsc(t)
	rt := imageRuntime(t)
	img, _ := testImage(t)
	const script = "id; grep -E '^(Cap|NoNewPrivs)' /proc/self/status; grep -E '^(Uid|Gid|Cap|NoNewPrivs)' /proc/1/status; pwd"
	for _, tc := range []struct {
		user string
		nnp  bool
	}{{"root", false}, {"user", false}, {"root", true}, {"user", true}} {
		without := runIn(t, rt, runtime.Spec{NoNewPrivileges: tc.nnp}, tc.user, script)
		with := runIn(t, rt, runtime.Spec{NoNewPrivileges: tc.nnp, Images: []runtime.ImageRoot{img}}, tc.user, script)
		if with != without {
			t.Errorf("%+v: with an image root\n%s\nwithout\n%s", tc, with, without)
		}
	}
}

// TestImageRootDisk: in a sandbox with a disk limit, what is written in
// an image root counts against it, as natively.
func TestImageRootDisk(t *testing.T) {
	requireRunsc(t)
	rt := imageRuntime(t)
	img, top := testImage(t)
	img.Binds = nil
	const script = "echo written > /opt/images/one/hello && cat /opt/images/one/hello && " +
		"if dd if=/dev/zero of=/opt/images/one/big bs=1M count=96 2>/dev/null; then echo fits; else echo full; fi"
	out := runIn(t, rt, runtime.Spec{Resources: runtime.Resources{DiskBytes: 64 << 20}, Images: []runtime.ImageRoot{img}}, "root", script)
	if want := "written\nfull\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if b, _ := os.ReadFile(filepath.Join(top, "hello")); string(b) != "from the top layer\n" {
		t.Errorf("the layer changed: %q", b)
	}
}

// TestImageRootMounts: while the sandbox lives, the host's mount table
// names the image's build (the store's GC keeps its layers); a sandbox
// with image roots is not checkpointed (their writable layers are on the
// host), and says why; Delete leaves no mount behind.
func TestImageRootMounts(t *testing.T) {
	requireRunsc(t)
	rt := imageRuntime(t)
	img, _ := testImage(t)
	ctx := t.Context()
	sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Images: []runtime.ImageRoot{img}, Process: runtime.Process{Args: []string{"sleep", "1000"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Delete(context.Background())
	if b, _ := os.ReadFile("/proc/self/mountinfo"); !bytes.Contains(b, []byte(" "+template.MountSource(img.Build)+" ")) {
		t.Errorf("no mount of source %s in the host's mount table", template.MountSource(img.Build))
	}
	err = rt.Checkpoint(ctx, sbx.ID(), filepath.Join(t.TempDir(), "cp"))
	if !errors.Is(err, errdefs.ErrNotImplemented) {
		t.Errorf("Checkpoint: %v, want ErrNotImplemented", err)
	}
	dir := rt.sandboxDir(sbx.ID())
	if err := sbx.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if m := native.MountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left after Delete: %v", m)
	}
}

// TestImageRootLink: a bind's target that is a link in the image (here to
// the sandbox's /) is refused inside, never followed: the sandbox ends
// with 125 and says why, and its first process never runs.
func TestImageRootLink(t *testing.T) {
	requireRunsc(t)
	rt := imageRuntime(t)
	img, top := testImage(t)
	if err := os.Symlink("/", filepath.Join(top, "data")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Images: []runtime.ImageRoot{img},
		Process: runtime.Process{Args: []string{"echo", "ran"}, Stdout: &out, Stderr: &out}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Delete(context.Background())
	st, err := sbx.Wait(ctx)
	if err != nil || st.Code != 125 || !strings.Contains(out.String(), "symlink") || strings.Contains(out.String(), "ran") {
		t.Errorf("%+v, %v; output %q; want exit 125 and why", st, err, out.String())
	}
}
