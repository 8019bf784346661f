package wrap

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdtest"
	"github.com/hutch-sandbox/hutch/internal/server/servertest"
	"github.com/hutch-sandbox/hutch/internal/syncbuf"
	"github.com/hutch-sandbox/hutch/sdk"
)

// The test binary is also the envd of the sandboxes it makes.
func TestMain(m *testing.M) { envdtest.Main(m) }

// controlPlane is a real control plane in this process and a client of
// it.
func controlPlane(t *testing.T) *sdk.Client {
	t.Helper()
	cp := servertest.Start(t, 1)
	c, err := sdk.NewClient(sdk.Config{APIURL: cp.URL, APIKey: cp.Keys[0]})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// wrapped lists the sandboxes Run made.
func wrapped(t *testing.T, c *sdk.Client) []sdk.SandboxInfo {
	t.Helper()
	var out []sdk.SandboxInfo
	for info, err := range c.List(sdk.ListOptions{Metadata: map[string]string{MetadataKey: MetadataValue}}).All(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, info)
	}
	return out
}

// runner is a Run in the background with pipes for the client's side.
type runner struct {
	stdin          *io.PipeWriter
	stdout, stderr *syncbuf.Buffer
	code           chan int
}

func start(ctx context.Context, o Options) *runner {
	pr, pw := io.Pipe()
	r := &runner{stdin: pw, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, code: make(chan int, 1)}
	o.Stdin, o.Stdout, o.Stderr = pr, r.stdout, r.stderr
	go func() { r.code <- Run(ctx, o) }()
	return r
}

func (r *runner) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case code := <-r.code:
		t.Logf("exit %d; stderr:\n%s", code, r.stderr.String())
		return code
	case <-time.After(d):
		t.Fatalf("Run did not return within %v; stderr:\n%s", d, r.stderr.String())
	}
	return 0
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// cat relays bytes both ways unchanged and in order, whatever their
// shape (a megabyte without newlines, lines), and the session ends with
// the input: exit 0, no message, the sandbox killed. While it runs, the
// sandbox carries wrap's metadata.
func TestRunRelaysBytes(t *testing.T) {
	c := controlPlane(t)
	r := start(context.Background(), Options{Client: c, Command: []string{"cat"}, NoInternet: true})
	var want bytes.Buffer
	blob := make([]byte, 1<<20)
	rand.Read(blob)
	chunks := [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"), []byte(hex.EncodeToString(blob)), []byte("\n"), []byte(`{"id":2}` + "\n")}
	for _, ch := range chunks {
		want.Write(ch)
		if _, err := r.stdin.Write(ch); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the echo", func() bool { return r.stdout.String() == want.String() })
	list := wrapped(t, c)
	if len(list) != 1 || list[0].Metadata[CommandKey] != "cat" {
		t.Fatalf("sandboxes during the session: %+v", list)
	}
	info, err := c.GetInfo(context.Background(), list[0].SandboxID)
	if err != nil || info.AllowInternetAccess == nil || *info.AllowInternetAccess {
		t.Errorf("NoInternet: the sandbox allows internet access (%v): %+v", err, info)
	}
	r.stdin.Close()
	if code := r.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	if s := r.stderr.String(); s != "" {
		t.Errorf("stderr %q, want nothing", s)
	}
	if left := wrapped(t, c); len(left) != 0 {
		t.Errorf("sandboxes after the session: %+v", left)
	}
}

// Files and directories are uploaded with their permission bits (and a
// directory's symlinks), owned by the server's user; Envs, Cwd and User
// apply to the server; the server's stderr is passed on.
func TestRunFilesAndOptions(t *testing.T) {
	c := controlPlane(t)
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	tool := write("tool.sh", "#!/bin/sh\necho tool ran\n", 0o755)
	note := write("note.txt", "a note\n", 0o644)
	write("tree/a/b.txt", "deep\n", 0o600)
	os.Symlink("a/b.txt", filepath.Join(dir, "tree", "link"))
	for _, user := range []string{"", "root"} {
		t.Run("user="+user, func(t *testing.T) {
			home := "/home/user"
			if user == "root" {
				home = "/root"
			}
			// (No set -e: bash -l then exits 1 instead of the status
			// given to exit, after running ~/.bash_logout.)
			script := `ls -l --time-style=+ bin/tool.sh | cut -d' ' -f1,3
bin/tool.sh
cat notes/note.txt
stat -c '%a %U' tree/a/b.txt
readlink tree/link; cat tree/link
echo "GREETING=$GREETING"
echo "to stderr" >&2
exit 4`
			r := start(context.Background(), Options{Client: c, Command: []string{"pwd && cd " + home + " && " + script}, User: user, Cwd: "/tmp",
				Envs:  map[string]string{"GREETING": "hello"},
				Files: []File{{Local: tool, Remote: "bin/tool.sh"}, {Local: note, Remote: home + "/notes/"}, {Local: filepath.Join(dir, "tree"), Remote: "tree"}}})
			code := r.wait(t, 20*time.Second)
			owner := "user"
			if user == "root" {
				owner = "root"
			}
			want := "/tmp\n-rwxr-xr-x " + owner + "\ntool ran\na note\n600 " + owner + "\na/b.txt\ndeep\nGREETING=hello\n"
			if code != 4 || r.stdout.String() != want {
				t.Errorf("exit %d, stdout:\n%s\nwant exit 4 and:\n%s", code, r.stdout.String(), want)
			}
			if s := r.stderr.String(); !strings.HasPrefix(s, "to stderr\n") || !strings.Contains(s, Prefix+"the server exited with status 4 while the client was connected: killing sandbox ") {
				t.Errorf("stderr %q", s)
			}
		})
	}
	if left := wrapped(t, c); len(left) != 0 {
		t.Errorf("sandboxes after the sessions: %+v", left)
	}
}

// A server that does not exit when its input ends is stopped after the
// grace; with Keep the sandbox stays, without the server.
func TestRunKeep(t *testing.T) {
	c := controlPlane(t)
	r := start(context.Background(), Options{Client: c, Command: []string{"sleep", "600"}, Keep: true, Grace: 200 * time.Millisecond})
	r.stdin.Close()
	if code := r.wait(t, 10*time.Second); code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	if s := r.stderr.String(); !strings.Contains(s, "did not exit within 200ms of the end of its input: keeping sandbox ") {
		t.Errorf("stderr %q", s)
	}
	list := wrapped(t, c)
	if len(list) != 1 {
		t.Fatalf("sandboxes after the session with Keep: %+v", list)
	}
	sbx, err := c.Connect(context.Background(), list[0].SandboxID, sdk.ConnectOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Kill(context.Background())
	waitFor(t, "the server stopped", func() bool {
		procs, err := sbx.Commands.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.Tag == ProcessTag {
				return false
			}
		}
		return true
	})
}

// A signal ends the session with 128+N and kills the sandbox.
func TestRunSignal(t *testing.T) {
	c := controlPlane(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	r := start(ctx, Options{Client: c, Command: []string{"cat"}})
	r.stdin.Write([]byte("x\n"))
	waitFor(t, "the echo", func() bool { return r.stdout.String() == "x\n" })
	cancel(Signaled{Signal: syscall.SIGTERM})
	if code := r.wait(t, 10*time.Second); code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
	if s := r.stderr.String(); !strings.Contains(s, Prefix+"got SIGTERM: killing sandbox ") {
		t.Errorf("stderr %q", s)
	}
	if left := wrapped(t, c); len(left) != 0 {
		t.Errorf("sandboxes after the signal: %+v", left)
	}
}

// The sandbox killed or timed out under the session: exit 125 with a
// clear line. While the session lasts, its lifetime is renewed.
func TestRunSandboxLost(t *testing.T) {
	c := controlPlane(t)
	t.Run("killed", func(t *testing.T) {
		r := start(context.Background(), Options{Client: c, Command: []string{"cat"}})
		r.stdin.Write([]byte("x\n"))
		waitFor(t, "the echo", func() bool { return r.stdout.String() == "x\n" })
		list := wrapped(t, c)
		if len(list) != 1 {
			t.Fatalf("sandboxes: %+v", list)
		}
		if err := c.Kill(context.Background(), list[0].SandboxID); err != nil {
			t.Fatal(err)
		}
		if code := r.wait(t, 10*time.Second); code != ExitFailure {
			t.Errorf("exit %d, want %d", code, ExitFailure)
		}
		if s := r.stderr.String(); !strings.Contains(s, Prefix+"lost the server: sandbox "+list[0].SandboxID+" is gone (killed, or its timeout passed)\n") {
			t.Errorf("stderr %q", s)
		}
	})
	t.Run("timed out", func(t *testing.T) {
		begin := time.Now()
		r := start(context.Background(), Options{Client: c, Command: []string{"cat"}, Timeout: 2 * time.Second, RenewEvery: time.Hour})
		if code := r.wait(t, 15*time.Second); code != ExitFailure {
			t.Errorf("exit %d, want %d", code, ExitFailure)
		}
		if s := r.stderr.String(); !strings.Contains(s, "is gone (killed, or its timeout passed)") {
			t.Errorf("stderr %q", s)
		}
		t.Logf("the session of a sandbox with a 2s timeout, not renewed, ended after %v", time.Since(begin).Round(time.Millisecond))
	})
	t.Run("renewed", func(t *testing.T) {
		r := start(context.Background(), Options{Client: c, Command: []string{"cat"}, Timeout: 2 * time.Second, RenewEvery: 500 * time.Millisecond})
		time.Sleep(4 * time.Second)
		r.stdin.Write([]byte("still there\n"))
		waitFor(t, "the echo after 4s", func() bool { return r.stdout.String() == "still there\n" })
		r.stdin.Close()
		if code := r.wait(t, 10*time.Second); code != 0 {
			t.Errorf("exit %d, want 0", code)
		}
	})
	if left := wrapped(t, c); len(left) != 0 {
		t.Errorf("sandboxes left: %+v", left)
	}
}

// Failures before the server runs: exit 125, a line saying what, nothing
// left behind.
func TestRunSetupFailures(t *testing.T) {
	c := controlPlane(t)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"unknown template", Options{Template: "no-such-template"}, Prefix + "cannot create a sandbox from template no-such-template: "},
		{"missing file", Options{Files: []File{{Local: "/no/such/file", Remote: "x"}}}, Prefix + "--file /no/such/file:x: "},
		{"impossible destination", Options{Files: []File{{Local: "/etc/hostname", Remote: "/etc/hostname/x"}}}, "/etc/hostname/x"},
		{"command not found", Options{Command: []string{"no-such-command"}}, "exited with status 127"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Client = c
			if o.Command == nil {
				o.Command = []string{"cat"}
			}
			r := start(context.Background(), o)
			code := r.wait(t, 10*time.Second)
			if tc.name == "command not found" {
				if code != 127 {
					t.Errorf("exit %d, want 127", code)
				}
			} else if code != ExitFailure {
				t.Errorf("exit %d, want %d", code, ExitFailure)
			}
			if s := r.stderr.String(); !strings.Contains(s, tc.want) {
				t.Errorf("stderr %q, want %q in it", s, tc.want)
			}
			if r.stdout.String() != "" {
				t.Errorf("stdout %q", r.stdout.String())
			}
			if left := wrapped(t, c); len(left) != 0 {
				t.Errorf("sandboxes left: %+v", left)
			}
		})
	}
}
