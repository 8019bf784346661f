package remotecli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// hostileTar is the review's ~/.bash_profile: a tar() function that
// answers every `tar -c -f FILE` with an archive of its own, whose
// entries lie beside the tree asked for.
const hostileTar = `tar() {
  local out="" create=0 prev=""
  for a in "$@"; do [ "$prev" = "-f" ] && out="$a"; [ "$a" = "-c" ] && create=1; prev="$a"; done
  if [ $create = 1 ] && [ -n "$out" ]; then
    mkdir -p /tmp/.e/.ssh; echo 'echo PWNED-by-sandbox' > /tmp/.e/.bashrc; echo 'ssh-ed25519 AAAA attacker' > /tmp/.e/.ssh/authorized_keys
    command tar -c -f "$out" -C /tmp/.e ./.bashrc ./.ssh/authorized_keys; return 0
  fi
  command tar "$@"
}
`

// replacedTar is the same, as the sandbox's root could put it in place
// of /usr/bin/tar itself.
const replacedTar = `#!/bin/sh
out="" create=0 prev=""
for a in "$@"; do [ "$prev" = "-f" ] && out="$a"; [ "$a" = "-c" ] && create=1; prev="$a"; done
if [ $create = 1 ] && [ -n "$out" ]; then
  mkdir -p /tmp/.r/.ssh; echo 'echo PWNED-by-root' > /tmp/.r/.bashrc; echo 'ssh-ed25519 AAAA root-attacker' > /tmp/.r/.ssh/authorized_keys
  exec /usr/bin/tar.real -c -f "$out" -C /tmp/.r ./.bashrc ./.ssh/authorized_keys
fi
exec /usr/bin/tar.real "$@"
`

// fakeHome makes a local directory with the files a copy out of a
// sandbox must not touch: .bashrc and .ssh/authorized_keys.
func fakeHome(t *testing.T) string {
	t.Helper()
	home := filepath.Join(t.TempDir(), "fakehome")
	for _, step := range []error{
		os.MkdirAll(filepath.Join(home, ".ssh"), 0o700),
		os.WriteFile(filepath.Join(home, ".bashrc"), []byte("# mine\n"), 0o644),
		os.WriteFile(filepath.Join(home, ".ssh", "authorized_keys"), []byte("ssh-ed25519 AAAA mine\n"), 0o600),
		os.Chmod(home, 0o755),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	return home
}

// testCpUntrusted copies out of a sandbox whose user, then whose root,
// tampers with the tar that cp runs there (review finding: a tar()
// function in ~/.bash_profile made `hutch cp ID:DIR HOSTDIR/` overwrite
// HOSTDIR/.bashrc and HOSTDIR/.ssh/authorized_keys), and a directory's
// contents whose mode the destination must not take.
func testCpUntrusted(t *testing.T, f *fixture, id string) {
	f.ok(t, "exec", id, "--", "rm -rf ~/results && mkdir -p ~/results/sub && echo real >~/results/report.txt && echo deep >~/results/sub/x")
	want := f.remoteTree(t, id, "/home/user/results")
	cp := func(t *testing.T, args ...string) {
		t.Helper()
		r := f.hutch(t, "", append([]string{"cp"}, args...)...)
		if r.Code != 0 || r.Stdout != "" || r.Stderr != "" {
			t.Fatalf("cp %s: %s", strings.Join(args, " "), r)
		}
	}

	t.Run("a tar function in the user's profile", func(t *testing.T) {
		profile := filepath.Join(t.TempDir(), "bash_profile")
		if err := os.WriteFile(profile, []byte(hostileTar), 0o644); err != nil {
			t.Fatal(err)
		}
		cp(t, profile, id+":/home/user/.bash_profile") // as the default user
		t.Cleanup(func() { f.hutch(t, "", "exec", id, "--", "rm", "-f", "/home/user/.bash_profile") })
		// The function is there for a login shell: tar through one lists
		// the sandbox's own entries.
		if got := f.ok(t, "exec", id, "--", "tar -c -f /tmp/probe.tar -C /home/user ./results && command tar -t -f /tmp/probe.tar"); got != "./.bashrc\n./.ssh/authorized_keys\n" {
			t.Fatalf("the profile's tar() archived %q; want its own entries", got)
		}

		home := fakeHome(t)
		before := treeLines(t, home)
		for _, tc := range []struct{ dst, tree string }{
			{home + "/", "results"},                     // into HOSTDIR, under its name
			{filepath.Join(home, "renamed"), "renamed"}, // to a new name
		} {
			r := f.hutch(t, "", "cp", id+":/home/user/results", tc.dst)
			if r.Code != 0 || r.Stdout != "" || r.Stderr != "" {
				t.Errorf("cp %s:/home/user/results %s: %s", id, tc.dst, r)
			}
			var outside []string
			for _, l := range treeLines(t, home) {
				if !strings.HasPrefix(l, "results/") && !strings.HasPrefix(l, "results|") && !strings.HasPrefix(l, "renamed/") && !strings.HasPrefix(l, "renamed|") {
					outside = append(outside, l)
				}
			}
			if diff := cmp.Diff(before, outside); diff != "" {
				t.Errorf("cp to %s: outside the copied trees, HOSTDIR changed (-before +after):\n%s", tc.dst, diff)
			}
			if diff := cmp.Diff(want, treeLines(t, filepath.Join(home, tc.tree))); diff != "" {
				t.Errorf("HOSTDIR/%s is not the sandbox's results (-want +got):\n%s", tc.tree, diff)
			}
		}
	})

	t.Run("a tar replaced by the sandbox's root", func(t *testing.T) {
		script := filepath.Join(t.TempDir(), "tar")
		if err := os.WriteFile(script, []byte(replacedTar), 0o755); err != nil {
			t.Fatal(err)
		}
		f.ok(t, "exec", "-u", "root", id, "--", "mv /usr/bin/tar /usr/bin/tar.real")
		t.Cleanup(func() { f.hutch(t, "", "exec", "-u", "root", id, "--", "mv -f /usr/bin/tar.real /usr/bin/tar") })
		cp(t, "-u", "root", script, id+":/usr/bin/tar")

		home := fakeHome(t)
		before := treeLines(t, home)
		for _, dst := range []string{home + "/", filepath.Join(home, "renamed")} {
			r := f.hutch(t, "", "cp", id+":/home/user/results", dst)
			wantFailure(t, r, 1, `entry "./.bashrc": refused: outside "results"`)
			if !strings.Contains(r.Stderr, id+":/home/user/results") {
				t.Errorf("stderr %q does not name the copy's source", r.Stderr)
			}
		}
		if diff := cmp.Diff(before, treeLines(t, home)); diff != "" {
			t.Errorf("HOSTDIR changed (-before +after):\n%s", diff)
		}
	})

	// Review finding C2: with /usr/bin/du replaced by `yes AAAA...`, cp
	// kept du's output in memory, 6.2 GB after 24 s. Now it keeps 64 KiB,
	// kills du and copies without du's answer; a tar that floods fails
	// the copy.
	t.Run("programs that print without end", func(t *testing.T) {
		flood := "#!/bin/sh\nexec yes " + strings.Repeat("A", 1000) + "\n"
		for _, prog := range []string{"/usr/bin/du", "/usr/bin/tar"} {
			f.ok(t, "exec", "-u", "root", id, "--", "cp -p "+prog+" "+prog+".real && printf '"+flood+"' >"+prog)
			dst := filepath.Join(t.TempDir(), "out")
			r := func() result {
				defer f.hutch(t, "", "exec", "-u", "root", id, "--", "mv -f "+prog+".real "+prog)
				return f.hutchBounded(t, 128<<20, "cp", id+":/home/user/results", dst)
			}()
			switch prog {
			case "/usr/bin/du":
				if r.Code != 0 {
					t.Errorf("cp with a flooding du: %s", r)
				} else if diff := cmp.Diff(want, treeLines(t, dst)); diff != "" {
					t.Errorf("cp with a flooding du copied (-want +got):\n%s", diff)
				}
			case "/usr/bin/tar":
				wantFailure(t, r, 1, "a command printed more than 64.0 KiB")
				if _, err := os.Lstat(dst); err == nil {
					t.Errorf("a failed copy left %s", dst)
				}
			}
		}
	})

	// Review finding C4: the free space check took the sandbox's word
	// for a copy's size (a 2-byte file swapped with a 400 MB one), then
	// wrote whatever came, to ENOSPC. What the sandbox reported now binds
	// what it may send.
	t.Run("the size the sandbox reported binds it", func(t *testing.T) {
		f.ok(t, "exec", id, "--", "rm -rf ~/big && mkdir ~/big && head -c 5000000 /dev/urandom >~/big/blob")
		// replaceDu puts script in place of the sandbox's du.
		replaceDu := func(script string) {
			local := filepath.Join(t.TempDir(), "du")
			if err := os.WriteFile(local, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			f.ok(t, "exec", "-u", "root", id, "--", "cp -p /usr/bin/du /usr/bin/du.real")
			f.ok(t, "cp", "-u", "root", local, id+":/usr/bin/du")
		}
		// A du that says 2 bytes: the check passes, the stream does not.
		replaceDu("#!/bin/sh\nfor a; do :; done\nprintf '2\\t%s\\n' \"$a\"\n")
		r := func() result {
			defer f.hutch(t, "", "exec", "-u", "root", id, "--", "mv -f /usr/bin/du.real /usr/bin/du")
			if got := f.ok(t, "exec", id, "--", "/usr/bin/du -s -b -- ~/big"); got != "2\t/home/user/big\n" {
				t.Fatalf("the lying du says %q", got)
			}
			return f.hutch(t, "", "cp", id+":/home/user/big", t.TempDir()+"/")
		}()
		wantFailure(t, r, 1, id+":/home/user/big: the sandbox sent more than the 2 bytes it reported")

		// A file whose size is 0 and which reads 1.5 MB: the command line
		// of a process in /proc.
		pid := strings.TrimSpace(f.ok(t, "exec", id, "--", `A=$(head -c 100000 /dev/zero | tr '\0' a); set --; for i in $(seq 15); do set -- "$@" "$A"; done; nohup bash -c 'sleep 600; :' _ "$@" >/dev/null 2>&1 & echo $!`))
		t.Cleanup(func() { f.hutch(t, "", "exec", id, "--", "kill "+pid) })
		// Until its exec is done the process's command line is its
		// parent's, or reads empty (a race seen under load): wait for the
		// long one.
		for deadline := time.Now().Add(10 * time.Second); ; {
			n, _ := strconv.Atoi(strings.TrimSpace(f.ok(t, "exec", id, "--", "wc -c < /proc/"+pid+"/cmdline")))
			if n >= 1500000 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/proc/%s/cmdline is %d bytes after 10 s, want the 1.5 MB of its arguments", pid, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		dst := t.TempDir()
		r = f.hutch(t, "", "cp", id+":/proc/"+pid+"/cmdline", dst+"/")
		wantFailure(t, r, 1, id+":/proc/"+pid+"/cmdline: the sandbox sent more than the 0 bytes it reported")
		if left, _ := os.ReadDir(dst); len(left) > 0 {
			t.Errorf("a refused copy left %v", left)
		}
		// --ignore-free-space copies without the check, as before.
		if r := f.hutch(t, "", "cp", "--ignore-free-space", id+":/proc/"+pid+"/cmdline", dst+"/cmdline"); r.Code != 0 {
			t.Errorf("cp --ignore-free-space: %s", r)
		} else if fi, err := os.Stat(dst + "/cmdline"); err != nil || fi.Size() < 1500000 {
			t.Errorf("cp --ignore-free-space copied %v, %v", fi, err)
		}

		// A du that cannot tell: the archive's size is checked in its
		// place, here against a 4 MiB file system.
		small := t.TempDir()
		if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=4m"); err != nil {
			t.Fatalf("mount a small tmpfs: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(small, syscall.MNT_DETACH) })
		replaceDu("#!/bin/sh\nexit 1\n")
		r = func() result {
			defer f.hutch(t, "", "exec", "-u", "root", id, "--", "mv -f /usr/bin/du.real /usr/bin/du")
			return f.hutch(t, "", "cp", id+":/home/user/big", small+"/")
		}()
		wantFailure(t, r, 1, "the archive of "+id+":/home/user/big is 4.8 MiB, more than the 4.0 MiB free in "+small)
		if left, _ := os.ReadDir(small); len(left) > 0 {
			t.Errorf("a refused copy left %v", left)
		}

		// Empty directories, whatever du says: a block and an inode each
		// on the host, 512 bytes each in the archive (review 4: 150 000 of
		// them took 618 MB and 150 001 inodes for a reported 1 byte).
		few := t.TempDir()
		if err := syscall.Mount("tmpfs", few, "tmpfs", 0, "size=64m,nr_inodes=1000"); err != nil {
			t.Fatalf("mount a tmpfs of 1000 inodes: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(few, syscall.MNT_DETACH) })
		f.ok(t, "exec", id, "--", "rm -rf ~/dirs && mkdir ~/dirs && cd ~/dirs && seq 3000 | xargs mkdir")
		replaceDu("#!/bin/sh\nfor a; do :; done\nprintf '1\\t%s\\n' \"$a\"\n")
		r = func() result {
			defer f.hutch(t, "", "exec", "-u", "root", id, "--", "mv -f /usr/bin/du.real /usr/bin/du")
			return f.hutch(t, "", "cp", id+":/home/user/dirs", few+"/")
		}()
		if r.Code != 1 || !strings.Contains(r.Stderr, "files and directories it has inodes for") {
			t.Errorf("3000 directories into 1000 inodes: %s", r)
		}
		if left, _ := os.ReadDir(few); len(left) > 0 {
			t.Errorf("a refused copy left %v", left)
		}
	})

	t.Run("a directory's contents keep the destination's mode", func(t *testing.T) {
		f.ok(t, "exec", id, "--", "rm -rf /tmp/outdir && mkdir /tmp/outdir && echo out >/tmp/outdir/f && chmod 1777 /tmp/outdir && touch -d 2001-09-09T01:46:40Z /tmp/outdir")
		dst := filepath.Join(t.TempDir(), "cpdest")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		cp(t, id+":/tmp/outdir/.", dst)
		fi, err := os.Stat(dst)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o755 {
			t.Errorf("cpdest is now %v, want 0755 kept", fi.Mode())
		}
		if fi.ModTime().Equal(time.Unix(1e9, 0)) {
			t.Errorf("cpdest took the sandbox directory's time")
		}
		checkFile(t, filepath.Join(dst, "f"), "out\n", 0o644)

		// Onto a missing destination, the copy is a new directory: it
		// takes the source's mode.
		fresh := filepath.Join(filepath.Dir(dst), "fresh")
		cp(t, id+":/tmp/outdir/.", fresh)
		if fi, err := os.Stat(fresh); err != nil || fi.Mode()&(os.ModePerm|os.ModeSticky) != 0o777|os.ModeSticky {
			t.Errorf("fresh: %v, %v; want a copy of outdir, mode 1777", fi.Mode(), err)
		}
		checkFile(t, filepath.Join(fresh, "f"), "out\n", 0o644)
	})
}
