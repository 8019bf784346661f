// Package packaging tests the .deb that scripts/package.sh builds, on a
// throwaway Debian 12: a root made by debootstrap (minbase, systemd and
// the package's Depends; made once from Debian's mirror and cached), into
// which `dpkg -i` installs it, checking its Depends; then the root's own
// systemd boots as PID 1
// of a container (boot.sh) and the test checks what an operator would:
// the unit is enabled and active, a sandbox made through the API survives
// `systemctl restart hutch` and an upgrade to another package, and the
// journal does not hold the API key.
package packaging

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
)

// rootCache is where the Debian 12 root is kept between runs, by recipe:
// making it takes about half a minute with debootstrap's package cache
// (scripts/setup.sh's template builds fill it), extracting it seconds.
const (
	rootCache     = "/var/cache/hutch/pkgtest"
	rootRecipe    = "bookworm-minbase-systemd-deps-v2"
	debootstrapCa = "/var/cache/hutch/debootstrap"
)

func TestDebInstallsAndStartsOnDebian12(t *testing.T) {
	testenv.RequireRoot(t, "the test installs a package into a root and boots its systemd in namespaces")
	for _, tool := range []string{"debootstrap", "unshare", "nsenter", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed (scripts/setup.sh installs what the tests need): %v", tool, err)
		}
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}

	// The package, twice: the second is the upgrade.
	v1 := buildDeb(t, repo, "0.0.1~test1")
	v2 := buildDeb(t, repo, "0.0.1~test2")
	checkDeb(t, v1)

	root := debianRoot(t)
	for _, deb := range []string{v1, v2} {
		copyFile(t, deb, filepath.Join(root, "root", filepath.Base(deb)))
	}
	// dpkg, not apt: the cached root holds what the package depends on
	// (dpkg refuses it otherwise), and a test reaches no mirror.
	run(t, "env", "DEBIAN_FRONTEND=noninteractive", "chroot", root, "dpkg", "-i", "/root/"+filepath.Base(v1))
	// Installed in a chroot: enabled, never started.
	if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/hutch.service")); err != nil {
		t.Fatalf("the unit is not enabled after install: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "var/lib/hutch/api-key")); err == nil {
		t.Fatal("hutch serve ran during the install in a chroot")
	}
	// A small template for the sandbox, imported by the installed hutch.
	img := ocitest.Image(t, ocitest.ImageConfig{}, ocitest.Layer(t, ocitest.BusyboxFiles(t)...))
	ocitest.WriteDockerArchive(t, filepath.Join(root, "root/busybox.tar"), "busybox:test", img)

	c := boot(t, root)
	c.waitRunning(t)
	c.sh(t, "systemd-analyze verify /lib/systemd/system/hutch.service")
	if got := c.sh(t, "systemctl is-enabled hutch; systemctl is-active hutch"); got != "enabled\nactive" {
		t.Fatalf("hutch.service: %q, want enabled and active", got)
	}
	if got := c.sh(t, "hutch version"); !strings.Contains(got, "version:    0.0.1~test1") || !strings.Contains(got, "built:") {
		t.Errorf("hutch version:\n%s", got)
	}
	c.sh(t, "hutch template import bb /root/busybox.tar")
	id := c.sh(t, "hutch sandbox create --template bb --timeout 10m")
	pid := c.sh(t, "hutch sandbox info --json "+id+" >/dev/null && hutch exec "+id+" -- sh -c 'sleep 1000 >/dev/null 2>&1 & echo $!'")
	check := func(when string) {
		t.Helper()
		if got := c.sh(t, "hutch exec "+id+" -- kill -0 "+pid+" && echo alive"); got != "alive" {
			t.Fatalf("%s: the sandbox's process: %q", when, got)
		}
	}
	check("before the restart")

	c.sh(t, "systemctl restart hutch")
	c.sh(t, "systemctl is-active hutch")
	check("after systemctl restart hutch")

	c.sh(t, "DEBIAN_FRONTEND=noninteractive dpkg -i /root/"+filepath.Base(v2))
	if got := c.sh(t, "hutch version"); !strings.Contains(got, "version:    0.0.1~test2") {
		t.Errorf("after the upgrade, hutch version:\n%s", got)
	}
	// postinst restarted the unit: a new main process, the same sandbox.
	if got := c.sh(t, "systemctl is-active hutch"); got != "active" {
		t.Fatalf("after the upgrade: %q", got)
	}
	if got := c.sh(t, "journalctl -u hutch -o cat | grep -c 'msg=serving'"); got != "3" {
		t.Errorf("hutch serve started %s times, want 3 (boot, restart, upgrade)", got)
	}
	check("after the upgrade")

	key := strings.TrimSpace(c.sh(t, "cat /var/lib/hutch/api-key"))
	if journal := c.sh(t, "journalctl -o cat --no-pager"); key == "" || strings.Contains(journal, key) {
		t.Errorf("the API key %q is in the journal (or empty)", key)
	}
	c.sh(t, "hutch sandbox kill "+id)
}

// buildDeb runs scripts/package.sh for version and returns the .deb.
func buildDeb(t *testing.T, repo, version string) string {
	t.Helper()
	dist := t.TempDir()
	cmd := exec.Command("./scripts/package.sh")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "DIST="+dist, "VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/package.sh: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "hutch_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("scripts/package.sh made %v", debs)
	}
	return debs[0]
}

// checkDeb checks what dpkg says of the package: its fields, conffiles,
// checksum and static binaries.
func checkDeb(t *testing.T, deb string) {
	t.Helper()
	sums, err := os.ReadFile(filepath.Join(filepath.Dir(deb), "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if want := hex.EncodeToString(sum[:]) + "  " + filepath.Base(deb) + "\n"; string(sums) != want {
		t.Errorf("SHA256SUMS:\n%s\nwant\n%s", sums, want)
	}
	if got := run(t, "dpkg-deb", "-f", deb, "Package", "Architecture"); !strings.Contains(got, "Package: hutch") {
		t.Errorf("control fields:\n%s", got)
	}
	if got := run(t, "dpkg-deb", "-I", deb, "conffiles"); strings.TrimSpace(got) != "/etc/default/hutch" {
		t.Errorf("conffiles: %q", got)
	}
	dir := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, dir)
	for _, bin := range []string{"usr/bin/hutch", "usr/bin/hutch-sandbox"} {
		f, err := elf.Open(filepath.Join(dir, bin))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", bin)
			}
		}
		f.Close()
	}
	if _, err := os.Stat(filepath.Join(dir, "lib/systemd/system/hutch.service")); err != nil {
		t.Error(err)
	}
}

// debianRoot returns a fresh copy of the cached Debian 12 root, made first
// when the cache has none.
func debianRoot(t *testing.T) string {
	t.Helper()
	archive := filepath.Join(rootCache, rootRecipe+".tar")
	if _, err := os.Stat(archive); err != nil {
		tmp := filepath.Join(rootCache, rootRecipe+".new")
		os.RemoveAll(tmp)
		if err := os.MkdirAll(debootstrapCa, 0o755); err != nil {
			t.Fatal(err)
		}
		// With what the package depends on (packaging/mkdeb), so that
		// installing it needs no mirror.
		run(t, "debootstrap", "--variant=minbase", "--cache-dir="+debootstrapCa,
			"--include=systemd,systemd-sysv,debootstrap,e2fsprogs,mount,util-linux,ca-certificates", "bookworm", tmp)
		run(t, "tar", "-C", tmp, "--numeric-owner", "-cf", archive+".new", ".")
		if err := os.Rename(archive+".new", archive); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(tmp)
	}
	root := t.TempDir()
	run(t, "tar", "-C", root, "--numeric-owner", "-xpf", archive)
	return root
}

// container is a booted root: its systemd's pid on the host.
type container struct{ pid int }

// boot starts root's systemd in namespaces of its own (boot.sh) and stops
// it, every process in it and its cgroups at cleanup.
func boot(t *testing.T, root string) *container {
	t.Helper()
	cg := "hutch-pkgtest-" + strconv.Itoa(os.Getpid())
	var out bytes.Buffer
	cmd := exec.Command("./boot.sh", root, cg)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		// unshare --fork waits for its child, the container's PID 1:
		// killing that ends every process of the pid namespace.
		if c, err := findInit(cmd.Process.Pid); err == nil {
			syscall.Kill(c, syscall.SIGKILL)
		}
		cmd.Process.Kill()
		<-done
		removeCgroups(t, cg)
		if t.Failed() {
			t.Logf("boot.sh:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pid, err := findInit(cmd.Process.Pid); err == nil {
			c := &container{pid: pid}
			if strings.HasSuffix(readlink("/proc/"+strconv.Itoa(pid)+"/exe"), "/systemd") {
				return c
			}
		}
		select {
		case <-done:
			t.Fatalf("boot.sh ended: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no systemd after 30 s: %s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// findInit returns the pid of the container's PID 1: the child of
// unshare, boot.sh's process (exec'd into it).
func findInit(unsharePid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", unsharePid, unsharePid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("no child yet")
	}
	return strconv.Atoi(f[0])
}

func readlink(p string) string {
	s, _ := os.Readlink(p)
	return s
}

// removeCgroups removes the test's cgroup from every hierarchy, deepest
// first, waiting for its killed processes to leave.
func removeCgroups(t *testing.T, cg string) {
	var dirs []string
	tops, _ := filepath.Glob("/sys/fs/cgroup/*/" + cg)
	if _, err := os.Stat("/sys/fs/cgroup/" + cg); err == nil {
		tops = append(tops, "/sys/fs/cgroup/"+cg)
	}
	for _, top := range tops {
		filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		var err error
		for try := 0; try < 100; try++ {
			if err = os.Remove(dirs[i]); err == nil || os.IsNotExist(err) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !os.IsNotExist(err) {
			t.Errorf("remove cgroup: %v", err)
		}
	}
}

// sh runs a shell command in the container, as root logged in to it
// would, and returns its output, trimmed; failing the test if it fails.
func (c *container) sh(t *testing.T, script string) string {
	t.Helper()
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(c.pid), "-a", "-r", "-w",
		"/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"/bin/sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in the container: %s: %v\n%s\n%s", script, err, out, c.journal())
	}
	return strings.TrimSpace(string(out))
}

// journal is hutch.service's status and journal, for failures.
func (c *container) journal() string {
	out, _ := exec.Command("nsenter", "-t", strconv.Itoa(c.pid), "-a", "-r", "-w",
		"/bin/sh", "-c", "systemctl status --no-pager hutch; journalctl --no-pager -u hutch | tail -50").CombinedOutput()
	return string(out)
}

// waitRunning waits for the container's systemd to finish booting.
func (c *container) waitRunning(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _ := exec.Command("nsenter", "-t", strconv.Itoa(c.pid), "-a", "-r", "-w",
			"/bin/systemctl", "is-system-running").Output()
		switch s := strings.TrimSpace(string(out)); s {
		case "running":
			return
		case "degraded":
			failed, _ := exec.Command("nsenter", "-t", strconv.Itoa(c.pid), "-a", "-r", "-w",
				"/bin/systemctl", "--failed", "--no-pager").Output()
			t.Logf("the container booted degraded:\n%s", failed)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container did not boot in 2 minutes: %s\n%s", out, c.journal())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// run runs a command on the host and returns its output, failing the test
// if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
