package remotecli

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/creack/pty"
	"github.com/google/go-cmp/cmp"
)

// treeLines describes a tree as sorted lines "path|d|mode",
// "path|f|mode|md5" and "path|l|target", the way remoteTree does.
func treeLines(t *testing.T, dir string) []string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			lines = append(lines, rel+"|l|"+target)
		case fi.IsDir():
			lines = append(lines, fmt.Sprintf("%s|d|%o", rel, fi.Mode().Perm()))
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			lines = append(lines, fmt.Sprintf("%s|f|%o|%x", rel, fi.Mode().Perm(), md5.Sum(b)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return lines
}

// remoteTree is treeLines of a directory in the sandbox, from inside.
func (f *fixture) remoteTree(t *testing.T, id, dir string) []string {
	t.Helper()
	script := `cd "$1" && find . -mindepth 1 | while IFS= read -r p; do p=${p#./}
	if [ -L "$p" ]; then echo "$p|l|$(readlink "$p")"
	elif [ -d "$p" ]; then echo "$p|d|$(stat -c %a "$p")"
	else echo "$p|f|$(stat -c %a "$p")|$(md5sum <"$p" | cut -d" " -f1)"; fi; done`
	out := f.ok(t, "exec", id, "--", "bash", "-c", script, "tree", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	slices.Sort(lines)
	return lines
}

// makeTree builds the tree cp copies: a script, a private file, a nested
// directory, relative, absolute and dangling symlinks, an empty directory
// and a name with a space.
func makeTree(t *testing.T, dir string) {
	t.Helper()
	data := make([]byte, 100<<10)
	rand.Read(data)
	for _, step := range []error{
		os.MkdirAll(filepath.Join(dir, "nested", "deeper"), 0o755),
		os.Mkdir(filepath.Join(dir, "empty"), 0o750),
		os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755),
		os.WriteFile(filepath.Join(dir, "secret"), []byte("s3cret\n"), 0o600),
		os.WriteFile(filepath.Join(dir, "with space.txt"), []byte("spaced\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "nested", "deeper", "data.bin"), data, 0o640),
		os.Symlink("nested/deeper/data.bin", filepath.Join(dir, "link")),
		os.Symlink("/etc/hostname", filepath.Join(dir, "nested", "abs")),
		os.Symlink("no-such-target", filepath.Join(dir, "dangling")),
		os.Chmod(filepath.Join(dir, "nested", "deeper"), 0o700),
		os.Chmod(filepath.Join(dir, "empty"), 0o750),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
}

func testCp(t *testing.T, f *fixture, id string) {
	local := t.TempDir()
	tree := filepath.Join(local, "tree")
	makeTree(t, tree)
	want := treeLines(t, tree)
	const base = "/tmp/cptest"
	f.ok(t, "exec", id, "--", "mkdir -p "+base+"/existing")
	mustEqual := func(t *testing.T, what string, got []string) {
		t.Helper()
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s differs from the source tree (-want +got):\n%s", what, diff)
		}
	}
	cp := func(t *testing.T, args ...string) {
		t.Helper()
		r := f.hutch(t, "", append([]string{"cp"}, args...)...)
		if r.Code != 0 || r.Stdout != "" || r.Stderr != "" {
			t.Fatalf("cp %s: %s", strings.Join(args, " "), r)
		}
	}

	t.Run("directory tree up and back", func(t *testing.T) {
		cp(t, tree, id+":"+base) // into an existing directory
		mustEqual(t, "the sandbox's copy", f.remoteTree(t, id, base+"/tree"))
		back := filepath.Join(local, "back")
		cp(t, id+":"+base+"/tree", back) // to a new name
		mustEqual(t, "the copy back", treeLines(t, back))
	})

	t.Run("directory to a new name", func(t *testing.T) {
		cp(t, tree, id+":"+base+"/renamed")
		mustEqual(t, "the renamed copy", f.remoteTree(t, id, base+"/renamed"))
		into := filepath.Join(local, "into")
		os.Mkdir(into, 0o755)
		cp(t, id+":"+base+"/renamed", into) // into an existing directory
		mustEqual(t, "the copy into a directory", treeLines(t, filepath.Join(into, "renamed")))
	})

	t.Run("contents with /.", func(t *testing.T) {
		cp(t, tree+"/.", id+":"+base+"/existing")
		mustEqual(t, "the contents copied into an existing directory", f.remoteTree(t, id, base+"/existing"))
		cp(t, tree+"/.", id+":"+base+"/fresh")
		mustEqual(t, "the contents copied to a new directory", f.remoteTree(t, id, base+"/fresh"))
		got := filepath.Join(local, "contents")
		os.Mkdir(got, 0o700)
		cp(t, id+":"+base+"/fresh/.", got)
		mustEqual(t, "the contents copied back", treeLines(t, got))
	})

	t.Run("relative sandbox paths are in the home directory", func(t *testing.T) {
		cp(t, tree, id+":reltree")
		mustEqual(t, "~/reltree", f.remoteTree(t, id, "/home/user/reltree"))
	})

	file := filepath.Join(local, "f.txt")
	os.WriteFile(file, []byte("file content\n"), 0o640)
	statRemote := func(t *testing.T, p string, args ...string) string {
		t.Helper()
		return f.ok(t, append(append([]string{"exec"}, args...), id, "--", "bash", "-c", `stat -c '%U %a' "$1" && cat "$1"`, "stat", p)...)
	}

	t.Run("file into a directory and to a new name", func(t *testing.T) {
		cp(t, file, id+":"+base+"/")
		if got := statRemote(t, base+"/f.txt"); got != "user 640\nfile content\n" {
			t.Errorf("copied into %s/: %q", base, got)
		}
		cp(t, file, id+":"+base+"/g.txt")
		if got := statRemote(t, base+"/g.txt"); got != "user 640\nfile content\n" {
			t.Errorf("copied to g.txt: %q", got)
		}
		// Overwriting a file takes the source's mode too.
		os.Chmod(file, 0o755)
		cp(t, file, id+":"+base+"/g.txt")
		if got := statRemote(t, base+"/g.txt"); got != "user 755\nfile content\n" {
			t.Errorf("overwritten g.txt: %q", got)
		}
		os.Chmod(file, 0o640)
	})

	t.Run("file down", func(t *testing.T) {
		dl := filepath.Join(local, "dl.txt")
		cp(t, id+":"+base+"/g.txt", dl)
		checkFile(t, dl, "file content\n", 0o755)
		dir := filepath.Join(local, "dldir")
		os.Mkdir(dir, 0o755)
		cp(t, id+":"+base+"/f.txt", dir)
		checkFile(t, filepath.Join(dir, "f.txt"), "file content\n", 0o640)
		os.WriteFile(dl, []byte("old"), 0o600)
		cp(t, id+":"+base+"/f.txt", dl) // overwrite
		checkFile(t, dl, "file content\n", 0o640)
	})

	t.Run("a symlink is copied as a link", func(t *testing.T) {
		cp(t, filepath.Join(tree, "link"), id+":"+base+"/onelink")
		if got := f.ok(t, "exec", id, "--", "readlink "+base+"/onelink"); got != "nested/deeper/data.bin\n" {
			t.Errorf("the sandbox's link points to %q", got)
		}
		cp(t, id+":"+base+"/onelink", filepath.Join(local, "onelink"))
		if got, err := os.Readlink(filepath.Join(local, "onelink")); err != nil || got != "nested/deeper/data.bin" {
			t.Errorf("the link copied back: %q, %v", got, err)
		}
	})

	t.Run("-u root", func(t *testing.T) {
		cp(t, "-u", "root", file, id+":/root/rootfile")
		if got := statRemote(t, "/root/rootfile", "-u", "root"); got != "root 640\nfile content\n" {
			t.Errorf("copied as root: %q", got)
		}
	})

	t.Run("large file, no progress bar without a terminal", func(t *testing.T) {
		big := filepath.Join(local, "big.bin")
		data := make([]byte, 3<<20)
		rand.Read(data)
		os.WriteFile(big, data, 0o600)
		cp(t, big, id+":"+base+"/big.bin") // cp fails on any stderr output
		cp(t, id+":"+base+"/big.bin", filepath.Join(local, "big2.bin"))
		got, _ := os.ReadFile(filepath.Join(local, "big2.bin"))
		if !bytes.Equal(got, data) {
			t.Errorf("3 MiB round trip: got %d bytes, not the same", len(got))
		}
	})

	t.Run("progress bar on a terminal", func(t *testing.T) {
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ptmx.Close()
		var bar bytes.Buffer
		done := make(chan struct{})
		go func() { io.Copy(&bar, ptmx); close(done) }()
		for _, args := range [][]string{
			{filepath.Join(local, "big.bin"), id + ":" + base + "/big3.bin"},
			{id + ":" + base + "/big3.bin", filepath.Join(local, "big3.bin")},
			{file, id + ":" + base + "/small.txt"}, // too small for a bar
		} {
			cmd := exec.Command(f.bin, append(append(f.flags(), "cp"), args...)...)
			cmd.Env, cmd.Stderr = f.env, tty
			if out, err := cmd.Output(); err != nil || len(out) > 0 {
				t.Fatalf("cp %v: %v, stdout %q", args, err, out)
			}
		}
		tty.Close()
		<-done
		text := bar.String()
		for _, want := range []string{"→ " + id + ":" + base + "/big3.bin", "← " + id + ":" + base + "/big3.bin", "3.0 MiB / 3.0 MiB  100%", "/s"} {
			if !strings.Contains(text, want) {
				t.Errorf("the terminal lacks %q:\n%q", want, text)
			}
		}
		if strings.Contains(text, "small.txt") || strings.Count(text, "100%") < 2 {
			t.Errorf("a bar for the small file, or not one per transfer:\n%q", text)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"missing parent in the sandbox", []string{tree, id + ":/nonexistent/x"}, "destination directory " + id + ":/nonexistent does not exist"},
			{"missing file in the sandbox", []string{id + ":" + base + "/nope", local}, id + ":" + base + "/nope: no such file or directory"},
			{"missing local source", []string{filepath.Join(local, "nope"), id + ":" + base}, "no such file or directory"},
			{"missing local parent", []string{id + ":" + base + "/f.txt", filepath.Join(local, "no", "dir")}, "does not exist"},
			{"directory onto a file", []string{tree, id + ":" + base + "/f.txt"}, "cannot copy directory"},
			{"file to a missing directory", []string{file, id + ":" + base + "/newdir/"}, "destination directory " + id + ":" + base + "/newdir/ does not exist"},
			{"both local", []string{file, filepath.Join(local, "x")}, "exactly one of SRC and DST"},
			{"both remote", []string{id + ":a", id + ":b"}, "exactly one of SRC and DST"},
			{"unknown sandbox", []string{file, "nosuchsandbox:/tmp"}, "sandbox nosuchsandbox not found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantFailure(t, f.hutch(t, "", append([]string{"cp"}, tc.args...)...), 1, tc.want)
			})
		}
	})
}

func checkFile(t *testing.T, p, content string, mode fs.FileMode) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if string(b) != content || fi.Mode().Perm() != mode {
		t.Errorf("%s: %q, mode %o; want %q, %o", p, b, fi.Mode().Perm(), content, mode)
	}
}
