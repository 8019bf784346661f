package native

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// TestImageRoot: an image root is the image's layers merged, writable by
// the sandbox without changing the layers, with the sandbox's masked
// /proc and its /dev, and its config beside it; a program chrooted there
// runs from the image's files.
func TestImageRoot(t *testing.T) {
	requireBase(t)
	rt := testRuntime(t)
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
	script := strings.Join([]string{
		"cat /opt/images/one.json; echo",
		"echo shared > /srv/shared/f",
		"chroot /opt/images/one /bin/sh -c 'cat /hello; echo written > /hello; cat /hello; ls /dev/null; wc -c < /proc/cmdline; grep -c . /proc/self/status >/dev/null && echo proc; cat /data/f; cat /config/name >/dev/null && echo file; echo x 2>/dev/null > /config/name || echo read-only'",
		// A program of the image as a uid of its own: its /proc hides other
		// uids' processes (pid 1, root's), and binds are nosuid and nodev;
		// /dev/shm is its own.
		"touch /dev/shm/sandbox-only",
		"chroot --userspec=61000:61000 /opt/images/one /bin/sh -c 'test -e /proc/1 && echo pid1-visible || echo pid1-hidden; grep \" /data \" /proc/self/mounts | grep -c nosuid,nodev; ls /dev/shm | wc -l'",
		"cat /opt/images/one/hello",
	}, " && ")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	sbx, err := rt.Create(ctx, runtime.Spec{Template: "base", Images: []runtime.ImageRoot{img},
		Process: runtime.Process{Args: []string{"sh", "-c", script}, User: "root", Cwd: "/", Stdout: &out, Stderr: &out}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	defer sbx.Delete(context.Background())
	st, err := sbx.Wait(ctx)
	if err != nil || st.Code != 0 {
		t.Fatalf("%+v, %v; output %q", st, err, out.String())
	}
	want := "{\"cmd\":[\"x\"]}\nfrom the top layer\nwritten\n/dev/null\n0\nproc\nshared\nfile\nread-only\npid1-hidden\n1\n0\nwritten\n"
	if out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	if b, _ := os.ReadFile(filepath.Join(top, "hello")); string(b) != "from the top layer\n" {
		t.Errorf("the layer changed: %q", b)
	}
}

// TestImageRootRefused: bad image roots fail Create as bad input.
func TestImageRootRefused(t *testing.T) {
	ok := runtime.Process{Args: []string{"true"}}
	for _, img := range []runtime.ImageRoot{
		{Build: "b", Layers: []string{"/x"}, Target: "/proc/x"},
		{Build: "b", Layers: []string{"/x"}, Target: "relative"},
		{Build: "b", Target: "/opt/x"},
		{Build: "b", Layers: []string{"x"}, Target: "/opt/x"},
		{Build: "b", Layers: []string{"/x"}, Target: "/opt/x", Binds: []runtime.ImageBind{{From: "/", To: "/data"}}},
		{Build: "b", Layers: []string{"/x"}, Target: "/opt/x", Binds: []runtime.ImageBind{{From: "/opt", To: "/data"}}},
		{Build: "b", Layers: []string{"/x"}, Target: "/opt/x", Binds: []runtime.ImageBind{{From: "/opt/x/y", To: "/data"}}},
		{Build: "b", Layers: []string{"/x"}, Target: "/opt/x", Binds: []runtime.ImageBind{{From: "/proc", To: "/data"}}},
		{Build: "b", Layers: []string{"/x"}, Target: "/opt/x", Binds: []runtime.ImageBind{{From: "/home", To: "../data"}}},
		{Build: "b", Layers: []string{"/x"}, Target: "/opt/x", Binds: []runtime.ImageBind{{From: "/home/" + strings.Repeat("x", 256), To: "/data"}}},
	} {
		if err := validateSpec(&runtime.Spec{Process: ok, Images: []runtime.ImageRoot{img}}); err == nil {
			t.Errorf("%+v: accepted", img)
		}
	}
	two := []runtime.ImageRoot{{Build: "a", Layers: []string{"/x"}, Target: "/opt/a"}, {Build: "b", Layers: []string{"/x"}, Target: "/opt/a/b"}}
	if err := validateSpec(&runtime.Spec{Process: ok, Images: two}); err == nil {
		t.Error("an image root inside another: accepted")
	}
}
