package remotecli

import (
	"context"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/hutch-sandbox/hutch/internal/syncbuf"
)

// terminal collects what a pseudo-terminal prints.
type terminal struct{ syncbuf.Buffer }

// waitFor waits until the output after offset from contains want, and
// returns the offset just past it.
func (o *terminal) waitFor(t *testing.T, from int, want string, timeout time.Duration) (int, bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if i := strings.Index(o.String()[from:], want); i >= 0 {
			return from + i + len(want), true
		}
	}
	return from, false
}

// testShell runs `hutch shell` on a real terminal: its size reaches the
// sandbox, and follows a resize; keys reach the shell; the shell's exit
// status is hutch's.
func testShell(t *testing.T, f *fixture, id string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, append(f.flags(), "shell", id)...)
	cmd.Env = f.env
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	out := &terminal{}
	go io.Copy(out, ptmx)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nterminal so far:\n%q", append(args, out.String())...)
	}

	// The prompt shows the shell is reading.
	at, ok := out.waitFor(t, 0, "user@", 20*time.Second)
	if !ok {
		fail("no prompt")
	}
	ptmx.WriteString("stty size\n")
	if at, ok = out.waitFor(t, at, "30 100", 10*time.Second); !ok {
		fail("stty size inside does not say 30 100")
	}

	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	// The resize travels apart from the keys: ask until it has arrived.
	resized := false
	for i := 0; i < 20 && !resized; i++ {
		ptmx.WriteString("stty size\n")
		at, resized = out.waitFor(t, at, "40 120", 500*time.Millisecond)
	}
	if !resized {
		fail("after the resize, stty size inside does not say 40 120")
	}

	// Ctrl-C goes to the sandbox's foreground job, not to hutch.
	ptmx.WriteString("sleep 100\n")
	time.Sleep(300 * time.Millisecond)
	ptmx.Write([]byte{3})
	ptmx.WriteString("echo after-$((40+2))\n")
	if at, ok = out.waitFor(t, at, "after-42", 10*time.Second); !ok {
		fail("Ctrl-C did not interrupt sleep, or the shell is gone")
	}

	ptmx.WriteString("exit 3\n")
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		fail("hutch shell ended with %v, want exit status 3", err)
	}
}
