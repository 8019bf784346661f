package escape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// fileAttempts go for the host's files: through paths, /proc, descriptors,
// file handles, envd's file API, links and the layers a sandbox shares.
var fileAttempts = []attempt{
	{"host-file-by-path", "host files", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		S := s.secretPath
		out := run(t, sbx, "root", fmt.Sprintf(`cat %[1]s; cat /proc/1/root%[1]s; cat /proc/self/root%[1]s; cd / && cat ../../../../../..%[1]s
ls -la %[2]s; find / -xdev -name secret -path '*hutch-escape*' 2>/dev/null | xargs -r cat; true`, S, filepath.Dir(S)))
		absent(t, out, s.secret)
	}},
	{"proc-root-of-every-process", "host files", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := run(t, sbx, "root", fmt.Sprintf(`for p in /proc/[0-9]* /proc/self /proc/thread-self; do cat $p/root%[1]s $p/cwd/../../../../..%[1]s 2>/dev/null; done
for f in /proc/[0-9]*/fd/*; do cat "$f/../../../../..%[1]s" 2>/dev/null; done; echo done`, s.secretPath))
		want(t, out, "done")
		absent(t, out, s.secret)
	}},
	{"chroot-breakout", "host files", func(t *testing.T, s *suite, b string) {
		// The classic: chroot into a subdirectory while keeping a
		// descriptor above it, then climb with fchdir and "..".
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", fmt.Sprintf(`
os.makedirs("/tmp/jail", exist_ok=True)
above = os.open("/", os.O_RDONLY)
try:
    os.chroot("/tmp/jail")
    os.fchdir(above)
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
except OSError as e:
    print("chroot:", errno.errorcode[e.errno])
try:
    print(open(%[1]q).read())
except OSError as e:
    print("read:", errno.errorcode[e.errno])
print("finished: yes")
`, s.secretPath))
		want(t, out, "finished: yes")
		absent(t, out, s.secret)
	}},
	{"host-paths-invisible", "host files", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := run(t, sbx, "root", `cat /proc/self/mountinfo /proc/1/mountinfo
for f in /proc/[0-9]*/fd/* /proc/[0-9]*/cwd /proc/[0-9]*/exe /proc/[0-9]*/map_files/*; do readlink "$f"; done 2>/dev/null
cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline /proc/[0-9]*/maps 2>/dev/null | tr '\0' '\n'; echo listed`)
		want(t, out, "listed")
		absent(t, out, s.srv.DataDir, s.templates, "/var/lib/hutch", filepath.Dir(s.secretPath))
	}},
	{"leaked-descriptors", "host files", func(t *testing.T, s *suite, b string) {
		// A command starts with its three standard streams and nothing
		// of the host's: every other descriptor would be a way out.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", `
d = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
for fd in sorted(int(x) for x in os.listdir(d)):
    if fd == d:
        continue
    try:
        print(f"fd {fd}: {os.readlink(f'/proc/self/fd/{fd}')}")
    except OSError as e:
        pass  # gone by now: os.listdir's own
for fd in range(3, 1024):
    if fd == d:
        continue
    try:
        os.fstat(fd)
        print(f"open {fd}")
    except OSError:
        pass
print("scanned: yes")
`)
		want(t, out, "scanned: yes")
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "open ") || (strings.HasPrefix(l, "fd ") && !strings.HasPrefix(l, "fd 0:") && !strings.HasPrefix(l, "fd 1:") && !strings.HasPrefix(l, "fd 2:")) {
				t.Errorf("a command holds a descriptor past its standard streams: %s", l)
			}
		}
		absent(t, out, s.srv.DataDir, "/var/lib/hutch")
	}},
	{"file-handles", "host files", func(t *testing.T, s *suite, b string) {
		// open_by_handle_at opens any inode of a file system by number,
		// whatever the caller's root: the host's root directory is inode
		// 2 of an ext4, an overlay's lower layers are reachable the same.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		s.withABI(t, sbx)
		out := run(t, sbx, "root", `/tmp/abi native open_by_handle_at; /tmp/abi native name_to_handle_at`)
		out += py(t, sbx, "root", `
class Handle(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("f", ctypes.c_ubyte * 128)]
h = Handle()
h.bytes = 8
h.type = 1  # FILEID_INO32_GEN: inode 2, generation 0
h.f[0] = 2
mfd = os.open("/", os.O_RDONLY)
for i, name in ((2, "host-root-inode"), (11, "lost-and-found-inode")):
    h.f[0] = i
    sc("open-" + name, 304, mfd, ctypes.byref(h), os.O_RDONLY)
`)
		refused(t, b, out, "open_by_handle_at", "open-host-root-inode", "open-lost-and-found-inode")
	}},
	{"envd-files-host-paths", "envd's file API", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		var got []string
		for _, p := range []string{s.secretPath, "/proc/1/root" + s.secretPath, "/proc/self/root/../../.." + s.secretPath,
			"/../../../.." + s.secretPath, "/proc/self/cwd/../../.." + s.secretPath, "/proc/1/cwd/" + s.secretPath} {
			for _, user := range []string{"user", "root"} {
				b, err := sbx.Files.Read(t.Context(), p, &sdk.FileOptions{User: user})
				got = append(got, fmt.Sprintf("%s as %s: %q %v", p, user, b, err))
			}
		}
		absent(t, strings.Join(got, "\n"), s.secret)
	}},
	{"envd-files-planted-symlinks", "envd's file API", func(t *testing.T, s *suite, b string) {
		// Links a sandbox plants for envd to follow: envd resolves them
		// inside the sandbox, never on the host.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		dir := filepath.Dir(s.secretPath)
		run(t, sbx, "root", fmt.Sprintf(`ln -s /proc/1/root /tmp/l1; ln -s ../../../../../.. /tmp/l2; ln -s %s /tmp/l3; ln -s /proc/self/root /tmp/l4; mkdir -p /tmp/d && ln -s / /tmp/d/up`, dir))
		var got []string
		for _, p := range []string{"/tmp/l1" + s.secretPath, "/tmp/l2" + s.secretPath, "/tmp/l3/secret", "/tmp/l4" + s.secretPath, "/tmp/d/up" + s.secretPath} {
			b, err := sbx.Files.Read(t.Context(), p, &sdk.FileOptions{User: "root"})
			got = append(got, fmt.Sprintf("%s: %q %v", p, b, err))
			entries, err := sbx.Files.List(t.Context(), filepath.Dir(p), &sdk.ListDirOptions{User: "root"})
			got = append(got, fmt.Sprintf("list %s: %v %v", filepath.Dir(p), entries, err))
		}
		absent(t, strings.Join(got, "\n"), s.secret)
		// Writes through them land inside, if anywhere.
		mark := unique("planted")
		for _, p := range []string{"/tmp/l3/" + mark, "/tmp/l1" + filepath.Join(dir, mark), "/tmp/l2" + filepath.Join(dir, mark)} {
			sbx.Files.Write(t.Context(), p, []byte("x"), &sdk.WriteOptions{User: "root"})
		}
		if _, err := os.Stat(filepath.Join(dir, mark)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a write through a planted link reached the host: %s (%v)", filepath.Join(dir, mark), err)
		}
	}},
	{"envd-files-link-race", "envd's file API", func(t *testing.T, s *suite, b string) {
		// A directory swapped with a link to the host's path while envd
		// writes and reads under it (a race between check and use).
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		dir := filepath.Dir(s.secretPath)
		run(t, sbx, "root", fmt.Sprintf(`mkdir -p %[1]s && echo inside > %[1]s/secret && chmod -R a+rwX %[1]s /tmp`, dir))
		_, err := sbx.Commands.Start(t.Context(), fmt.Sprintf(`while :; do rm -rf /tmp/race; mkdir /tmp/race; rm -rf /tmp/race; ln -s %s /tmp/race; done`, dir), &sdk.RunOptions{User: "root", Timeout: sdk.NoTimeout})
		if err != nil {
			t.Fatal(err)
		}
		mark := unique("raced")
		var got bytes.Buffer
		for i := range 60 {
			sbx.Files.Write(t.Context(), fmt.Sprintf("/tmp/race/%s-%d", mark, i), []byte("x"), &sdk.WriteOptions{User: "root"})
			if b, err := sbx.Files.Read(t.Context(), "/tmp/race/secret", &sdk.FileOptions{User: "root"}); err == nil {
				got.Write(b)
			}
		}
		absent(t, got.String(), s.secret)
		if m, _ := filepath.Glob(filepath.Join(dir, mark+"-*")); len(m) > 0 {
			t.Errorf("writes through the raced link reached the host: %v", m)
		}
	}},
	{"hard-link-to-template-file", "the template", func(t *testing.T, s *suite, b string) {
		// A hard link to a file of the read-only template, written
		// through: the template (and so every later sandbox) is as it was.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		before := run(t, sbx, "root", "sha256sum /etc/passwd /usr/bin/env")
		run(t, sbx, "root", `ln /etc/passwd /tmp/hl; echo 'evil::0:0::/:/bin/sh' >> /tmp/hl; ln /usr/bin/env /tmp/he; printf x > /tmp/he`)
		sbx.Files.Write(t.Context(), "/tmp/hl", []byte("evil::0:0::/:/bin/sh\n"), &sdk.WriteOptions{User: "root"})
		next := s.sandbox(t, b, sdk.CreateOptions{})
		if after := run(t, next, "root", "sha256sum /etc/passwd /usr/bin/env"); after != before {
			t.Errorf("the next sandbox's template files differ:\n%s\nwere\n%s", after, before)
		}
	}},
	{"write-template-files", "the template", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		before := run(t, sbx, "root", "sha256sum /bin/sh /etc/os-release /usr/lib/os-release")
		run(t, sbx, "root", `printf 'echo pwned' > /bin/sh; truncate -s 0 /etc/os-release; rm -f /usr/lib/os-release; mount -o remount,rw / 2>&1; true`)
		next := s.sandbox(t, b, sdk.CreateOptions{})
		if after := run(t, next, "root", "sha256sum /bin/sh /etc/os-release /usr/lib/os-release"); after != before {
			t.Errorf("the next sandbox's template files differ:\n%s\nwere\n%s", after, before)
		}
	}},
	{"overwrite-sandbox-binaries", "the binaries", func(t *testing.T, s *suite, b string) {
		// CVE-2019-5736: the binary that started the sandbox, reached
		// through /proc/<pid>/exe, rewritten for the host to run next.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", `
e = envd_pid()
for name, p in (("self-exe", "/proc/self/exe"), ("init-exe", "/proc/1/exe"), ("envd-exe", f"/proc/{e}/exe"), ("guest-binary", "/.hutch/hutch-sandbox")):
    attempt("write-" + name, lambda p=p: os.close(os.open(p, os.O_WRONLY)))
`)
		// Its own program (/proc/self/exe, python) is a file of its own
		// layer, which root may write (gVisor lets it): what matters is
		// that no other sandbox sees it, and the host's binaries.
		refused(t, b, out, "write-init-exe", "write-envd-exe", "write-guest-binary")
		alive(t, sbx)
		alive(t, s.sandbox(t, b, sdk.CreateOptions{}))
	}},
	{"volume-shared-by-two", "volumes", func(t *testing.T, s *suite, b string) {
		// Two sandboxes share a volume: what one plants there (links out,
		// a set-user-ID shell) gives the other nothing, nor the server.
		v, err := s.client.CreateVolume(t.Context(), unique("vol"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.client.DestroyVolume(context.Background(), v.ID) })
		mounts := []sdk.VolumeMount{{Name: v.Name, Path: "/mnt/v"}}
		a := s.sandbox(t, b, sdk.CreateOptions{Volumes: mounts})
		c := s.sandbox(t, b, sdk.CreateOptions{Volumes: mounts})
		run(t, a, "root", fmt.Sprintf(`cd /mnt/v && ln -s / root && ln -s /proc/1/root proc && ln -s %s host && cp /bin/bash suid && chmod 4755 suid && mkfifo fifo; ls -la`, filepath.Dir(s.secretPath)))
		out := run(t, c, "user", fmt.Sprintf(`cat /mnt/v/host/secret /mnt/v/root%[1]s /mnt/v/proc%[1]s 2>&1; echo "suid: $(/mnt/v/suid -p -c 'id -u')"`, s.secretPath))
		want(t, out, "suid: 1000")
		var got []string
		for _, p := range []string{"host/secret", "root" + s.secretPath, "proc" + s.secretPath} {
			r, err := v.ReadFile(t.Context(), p)
			if err == nil {
				var buf bytes.Buffer
				buf.ReadFrom(r)
				r.Close()
				got = append(got, buf.String())
			}
		}
		absent(t, out+strings.Join(got, "\n"), s.secret)
	}},
	{"symlinked-mount-points", "template layers", func(t *testing.T, s *suite, b string) {
		// A template whose /etc, /proc or /sys is a link — to a host
		// directory, or through /proc/self/cwd to a path of the sandbox's
		// own directory — for the sandbox's start to write the host's
		// files, or mount /proc and /sys where no mask reaches (review 27,
		// F2, F4, F7). Each start is refused, or the link is never
		// followed on the host and the masks hold.
		reg := s.reg(t)
		for _, tc := range []struct{ name, entry, target string }{
			{"etc", "etc", ""}, {"proc", "proc", ""}, {"dev", "dev", ""},
			{"sys", "sys", "/proc/self/cwd/rootfs/opt"},
		} {
			hostDir := openDir(t)
			if tc.target == "" {
				tc.target = hostDir
			}
			files := append(ocitest.BusyboxFiles(t), ocitest.File{Path: "opt/", Mode: fs.ModeDir | 0o755}, ocitest.File{Path: "rootfs/opt/", Mode: fs.ModeDir | 0o755})
			layer := ocitest.Layer(t, ocitest.File{Path: tc.entry, Link: tc.target})
			ref := reg + "/links-" + b + "/" + tc.name + ":1"
			s.push(t, ref, ocitest.Image(t, ocitest.ImageConfig{}, ocitest.Layer(t, files...), layer))
			name := unique("links-" + tc.name)
			_, err := s.client.BuildTemplate(t.Context(), sdk.TemplateBuild{Name: name, FromImage: ref})
			var out string
			if err == nil {
				sbx, err := sdk.Create(t.Context(), sdk.CreateOptions{Config: s.cfg, Template: name, Runtime: b, Timeout: time.Minute})
				if err == nil {
					out = run(t, sbx, "root", "ls /sys/block /sys/class/bdi /proc/timer_list 2>&1; cat /sys/block/*/loop/backing_file 2>&1; echo listed")
					sbx.Kill(t.Context())
				} else {
					t.Logf("%s: create: %v", tc.name, err)
				}
			} else {
				t.Logf("%s: build: %v", tc.name, err)
			}
			absent(t, out, "disk.img", s.srv.DataDir, "sandboxes/")
			if ents, _ := os.ReadDir(hostDir); len(ents) > 0 {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("a start through the template's %s link wrote the host's %s: %v", tc.entry, hostDir, names)
			}
		}
	}},
	{"etc-link-in-own-layer", "template layers", func(t *testing.T, s *suite, b string) {
		// The sandbox makes its own /etc a link to a host directory, then
		// forks: the fork's start must not write there (review 27, F2).
		hostDir := openDir(t)
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		run(t, sbx, "root", fmt.Sprintf("cp -a /etc /etc.real && rm -rf /etc && ln -s %s /etc; ls -ld /etc", hostDir))
		forks, err := sbx.Fork(t.Context(), sdk.ForkOptions{})
		t.Logf("fork: %v", err)
		for _, f := range forks {
			t.Logf("fork: %+v", f)
			if f.Sandbox != nil {
				f.Sandbox.Kill(t.Context())
			}
		}
		if ents, _ := os.ReadDir(hostDir); len(ents) > 0 {
			t.Errorf("the fork's start wrote the host's %s: %d entries", hostDir, len(ents))
		}
	}},
	{"image-layer-escape", "template layers", func(t *testing.T, s *suite, b string) {
		// Images an attacker serves, whose layers climb out of the
		// directory they are unpacked in.
		reg := s.reg(t)
		var shadow syscall.Stat_t
		syscall.Stat("/etc/shadow", &shadow)
		for _, tc := range hutchtest.HostileImages() {
			ref := reg + "/hostile-" + b + "/" + tc.Name + ":1"
			s.push(t, ref, ocitest.Image(t, ocitest.ImageConfig{}, tc.Layer(t)))
			name := unique("hostile-" + tc.Name)
			_, err := s.client.BuildTemplate(t.Context(), sdk.TemplateBuild{Name: name, FromImage: ref, Steps: []sdk.TemplateStep{{Type: "RUN", Args: []string{"true"}}}})
			var be *sdk.BuildError
			if !errors.As(err, &be) || be.Step != "base" || !strings.Contains(be.Message, tc.Refusal) {
				t.Errorf("build from %s: %v, want it refused at its base step: %s", ref, err, tc.Refusal)
			}
		}
		for _, p := range []string{"/etc/evil", "/evil", filepath.Join(s.templates, "etc", "evil"), filepath.Join(s.templates, "layers", "etc", "evil"), filepath.Join(s.templates, "evil")} {
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("a hostile layer wrote %s", p)
			}
		}
		var now syscall.Stat_t
		if syscall.Stat("/etc/shadow", &now); now.Nlink != shadow.Nlink {
			t.Errorf("/etc/shadow has %d links, had %d", now.Nlink, shadow.Nlink)
		}
	}},
}

// openDir is a directory of the host every user may write, removed when
// the test ends: where a write that escaped would land.
func openDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/var/tmp", "hutch-escape-open-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
