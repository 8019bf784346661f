package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// TestCommands: foreground and background commands, their options,
// output, stdin, timeouts, cancellation, kill, connect and disconnect.
func TestCommands(t *testing.T) {
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{Envs: map[string]string{"SBX_DEFAULT": "from create"}})
	ctx := t.Context()

	t.Run("run", func(t *testing.T) {
		for _, tc := range []struct {
			name       string
			cmd        string
			opts       *sdk.RunOptions
			wantStdout string
			wantStderr string
		}{
			{name: "stdout and stderr", cmd: "echo hello; echo oops >&2", wantStdout: "hello\n", wantStderr: "oops\n"},
			{name: "default user, home and cwd", cmd: `id -un; id -u; echo "$HOME"; pwd`, wantStdout: "user\n1000\n/home/user\n/home/user\n"},
			{name: "user root", cmd: `whoami; id -u; echo "$HOME"; pwd`, opts: &sdk.RunOptions{User: "root"}, wantStdout: "root\n0\n/root\n/root\n"},
			{name: "user user", cmd: "whoami", opts: &sdk.RunOptions{User: "user"}, wantStdout: "user\n"},
			{name: "envs", cmd: `echo "$FOO/$BAR/$SBX_DEFAULT"`, opts: &sdk.RunOptions{Envs: map[string]string{"FOO": "foo value", "BAR": "b=r"}}, wantStdout: "foo value/b=r/from create\n"},
			{name: "cwd", cmd: "pwd", opts: &sdk.RunOptions{Cwd: "/tmp"}, wantStdout: "/tmp\n"},
			{name: "relative cwd", cmd: "mkdir -p sub && cd sub && pwd", opts: &sdk.RunOptions{Cwd: "."}, wantStdout: "/home/user/sub\n"},
			{name: "bash -l -c", cmd: `echo "$0"; shopt -q login_shell && echo login`, wantStdout: "/bin/bash\nlogin\n"},
			{name: "no stdin", cmd: "cat; echo end", wantStdout: "end\n"},
			{name: "unicode and binary-safe text", cmd: `printf 'wörld\t\x01\n'`, wantStdout: "wörld\t\x01\n"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := sbx.Commands.Run(ctx, tc.cmd, tc.opts)
				must(t, err, "Run")
				if res.ExitCode != 0 || res.Stdout != tc.wantStdout || res.Stderr != tc.wantStderr || res.Error != "" {
					t.Errorf("Run(%q) = exit %d, stdout %q, stderr %q, error %q; want 0, %q, %q, \"\"",
						tc.cmd, res.ExitCode, res.Stdout, res.Stderr, res.Error, tc.wantStdout, tc.wantStderr)
				}
			})
		}
	})

	t.Run("run errors", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			opts *sdk.RunOptions
			want error
		}{
			{name: "missing cwd", opts: &sdk.RunOptions{Cwd: "/no/such/dir"}, want: sdk.ErrInvalidArgument},
			{name: "unknown user", opts: &sdk.RunOptions{User: "nosuchuser"}, want: sdk.ErrAuthentication},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := sbx.Commands.Run(ctx, "echo ran", tc.opts)
				is(t, err, tc.want, "Run")
				if res != nil {
					t.Errorf("Run returned a result %+v with its error", res)
				}
			})
		}
	})

	t.Run("non-zero exit is a CommandExitError", func(t *testing.T) {
		res, err := sbx.Commands.Run(ctx, "echo partial; echo bad >&2; exit 3", nil)
		var ee *sdk.CommandExitError
		if !errors.As(err, &ee) {
			t.Fatalf("Run: error %v (%T), want a *sdk.CommandExitError", err, err)
		}
		if ee.ExitCode != 3 || ee.Stdout != "partial\n" || ee.Stderr != "bad\n" {
			t.Errorf("CommandExitError: exit %d, stdout %q, stderr %q", ee.ExitCode, ee.Stdout, ee.Stderr)
		}
		if !strings.Contains(ee.Error(), "3") {
			t.Errorf("CommandExitError message %q does not name the exit code", ee.Error())
		}
		// The result comes with the error.
		if res == nil || res.ExitCode != 3 || res.Stdout != "partial\n" {
			t.Errorf("result with the error: %+v", res)
		}
	})

	t.Run("timeout kills the command", func(t *testing.T) {
		marker := unique("timeout")
		_, err := sbx.Commands.Run(ctx, "sleep 30; : "+marker, &sdk.RunOptions{Timeout: 1500 * time.Millisecond})
		is(t, err, sdk.ErrTimeout, "Run past its Timeout")
		// The sandbox kills it at the deadline.
		waitFor(t, 10*time.Second, func() string { return "the timed-out process to leave Commands.List" },
			func() bool { return !processRunning(t, sbx, marker) })
	})

	t.Run("cancelling ctx ends Run and kills the command", func(t *testing.T) {
		marker := unique("cancel")
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		errc := make(chan error, 1)
		go func() {
			// The command says when it runs: then the test cancels.
			_, err := sbx.Commands.Run(cctx, "echo started; sleep 600; : "+marker, &sdk.RunOptions{
				OnStdout: func(string) { cancel() },
			})
			errc <- err
		}()
		select {
		case err := <-errc:
			is(t, err, context.Canceled, "Run after ctx was cancelled")
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return after its context was cancelled (the command sleeps 600 s)")
		}
		waitFor(t, 10*time.Second, func() string { return "the cancelled command to leave Commands.List" },
			func() bool { return !processRunning(t, sbx, marker) })
	})

	t.Run("output callbacks and writers", func(t *testing.T) {
		const n = 40
		var wantOut, wantErr strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&wantOut, "out%d\n", i)
			fmt.Fprintf(&wantErr, "err%d\n", i)
		}
		cmd := fmt.Sprintf(`for i in $(seq 1 %d); do echo out$i; echo err$i >&2; [ $((i %% 10)) = 0 ] && sleep 0.05; done; true`, n)

		// Callbacks: every chunk, in order; the result keeps the output.
		var out, errs text
		res, err := sbx.Commands.Run(ctx, cmd, &sdk.RunOptions{OnStdout: out.add, OnStderr: errs.add})
		must(t, err, "Run with callbacks")
		if out.String() != wantOut.String() || errs.String() != wantErr.String() {
			t.Errorf("callbacks got stdout %q, stderr %q", out.String(), errs.String())
		}
		if res.Stdout != wantOut.String() || res.Stderr != wantErr.String() {
			t.Errorf("result with callbacks: stdout %q, stderr %q", res.Stdout, res.Stderr)
		}

		// Writers get the output instead of the result; callbacks too.
		var wout, werr bytes.Buffer
		var out2 text
		res, err = sbx.Commands.Run(ctx, cmd, &sdk.RunOptions{Stdout: &wout, Stderr: &werr, OnStdout: out2.add})
		must(t, err, "Run with writers")
		if wout.String() != wantOut.String() || werr.String() != wantErr.String() {
			t.Errorf("writers got stdout %q, stderr %q", wout.String(), werr.String())
		}
		if out2.String() != wantOut.String() {
			t.Errorf("callback beside a writer got %q", out2.String())
		}
		if res.Stdout != "" || res.Stderr != "" {
			t.Errorf("result kept output that went to writers: stdout %q, stderr %q", res.Stdout, res.Stderr)
		}
	})

	t.Run("large output arrives whole", func(t *testing.T) {
		const size = 5_000_000
		var want strings.Builder
		for i := 1; want.Len() < size; i++ {
			fmt.Fprintf(&want, "%d\n", i)
		}
		res := run(t, sbx, fmt.Sprintf("seq 1 2000000 | head -c %d", size), nil)
		if len(res.Stdout) != size {
			t.Fatalf("stdout has %d bytes, want %d", len(res.Stdout), size)
		}
		if res.Stdout != want.String()[:size] {
			i := 0
			for i < size && res.Stdout[i] == want.String()[i] {
				i++
			}
			t.Errorf("stdout differs from seq's output at byte %d", i)
		}
	})

	t.Run("background: Start, List with tag, Wait", func(t *testing.T) {
		marker := unique("bg")
		tag := unique("tag")
		// The command waits for a line on stdin: it surely runs while it
		// is listed.
		h, err := sbx.Commands.Start(ctx, "read line; echo done $line; : "+marker, &sdk.RunOptions{Tag: tag, Stdin: true, Timeout: sdk.NoTimeout})
		must(t, err, "Start")
		if h.PID == 0 {
			t.Fatal("Start returned pid 0")
		}
		procs, err := sbx.Commands.List(ctx)
		must(t, err, "Commands.List")
		var found *sdk.ProcessInfo
		for i := range procs {
			if procs[i].PID == h.PID {
				found = &procs[i]
			}
		}
		if found == nil {
			t.Fatalf("pid %d not in Commands.List: %+v", h.PID, procs)
		}
		if found.Tag != tag || found.Cmd != "/bin/bash" || !strings.Contains(strings.Join(found.Args, " "), marker) {
			t.Errorf("listed process: tag %q cmd %q args %q; want tag %q, /bin/bash, args with %s", found.Tag, found.Cmd, found.Args, tag, marker)
		}
		must(t, h.SendStdin(ctx, []byte("now\n")), "SendStdin")
		res, err := h.Wait(ctx)
		must(t, err, "Wait")
		if res.ExitCode != 0 || res.Stdout != "done now\n" {
			t.Errorf("Wait: exit %d, stdout %q", res.ExitCode, res.Stdout)
		}
		if h.Stdout() != "done now\n" {
			t.Errorf("handle Stdout() = %q", h.Stdout())
		}
		select {
		case <-h.Done():
		default:
			t.Error("Done is open after Wait returned")
		}
		waitFor(t, 10*time.Second, func() string { return "the finished process to leave Commands.List" },
			func() bool { return !pidListed(t, sbx, h.PID) })
	})

	t.Run("background: a Start outlives its ctx", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		h, err := sbx.Commands.Start(sctx, "sleep 0.3; echo still here", nil)
		must(t, err, "Start")
		cancel()
		res, err := h.Wait(ctx)
		must(t, err, "Wait after the Start ctx was cancelled")
		if res.Stdout != "still here\n" {
			t.Errorf("stdout %q", res.Stdout)
		}
	})

	t.Run("background: deadlines of Wait and Connect leave the process running", func(t *testing.T) {
		marker := unique("deadline")
		h, err := sbx.Commands.Start(ctx, "sleep 300; : "+marker, nil)
		must(t, err, "Start")
		t.Cleanup(func() { sbx.Commands.Kill(context.Background(), h.PID) })
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = h.Wait(wctx)
		cancel()
		is(t, err, context.DeadlineExceeded, "Wait past its ctx's deadline")
		is(t, err, sdk.ErrTimeout, "Wait past its ctx's deadline")
		// A Connect's Timeout ends the following, not the process.
		h2, err := sbx.Commands.Connect(ctx, h.PID, &sdk.ProcessConnectOptions{Timeout: 500 * time.Millisecond})
		must(t, err, "Connect")
		_, err = h2.Wait(ctx)
		is(t, err, sdk.ErrTimeout, "Wait on a Connect past its Timeout")
		if !processRunning(t, sbx, marker) {
			t.Fatal("the process is gone after the deadlines of Wait and Connect")
		}
		must(t, h.Kill(ctx), "Kill")
		var ee *sdk.CommandExitError
		if _, err := h.Wait(ctx); !errors.As(err, &ee) || ee.ExitCode != -1 {
			t.Errorf("Wait after Kill: %v", err)
		}
	})

	t.Run("stdin: SendStdin and CloseStdin into cat", func(t *testing.T) {
		h, err := sbx.Commands.Start(ctx, "cat", &sdk.RunOptions{Stdin: true})
		must(t, err, "Start")
		must(t, h.SendStdin(ctx, []byte("hello\n")), "handle SendStdin")
		must(t, sbx.Commands.SendStdin(ctx, h.PID, []byte{'w', 0, 0xff, '\n'}), "Commands.SendStdin")
		must(t, sbx.Commands.CloseStdin(ctx, h.PID), "CloseStdin")
		res, err := h.Wait(ctx)
		must(t, err, "Wait")
		if res.Stdout != "hello\nw\x00\xff\n" {
			t.Errorf("cat echoed %q", res.Stdout)
		}
	})

	t.Run("stdin: lines arrive as they are sent", func(t *testing.T) {
		var out text
		h, err := sbx.Commands.Start(ctx, `read a; echo "got $a"; read b; echo "got $b"`, &sdk.RunOptions{Stdin: true, OnStdout: out.add})
		must(t, err, "Start")
		must(t, h.SendStdin(ctx, []byte("one\n")), "SendStdin")
		waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("the first echo (got %q)", out.String()) },
			func() bool { return strings.Contains(out.String(), "got one") })
		must(t, h.SendStdin(ctx, []byte("two\n")), "SendStdin")
		res, err := h.Wait(ctx)
		must(t, err, "Wait")
		if res.Stdout != "got one\ngot two\n" {
			t.Errorf("stdout %q", res.Stdout)
		}
	})

	t.Run("kill a background command", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			kill func(*sdk.CommandHandle) error
		}{
			{"Commands.Kill", func(h *sdk.CommandHandle) error { return sbx.Commands.Kill(ctx, h.PID) }},
			{"CommandHandle.Kill", func(h *sdk.CommandHandle) error { return h.Kill(ctx) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h, err := sbx.Commands.Start(ctx, "echo before; sleep 300", nil)
				must(t, err, "Start")
				waitFor(t, 10*time.Second, func() string { return "the command's first output" },
					func() bool { return h.Stdout() == "before\n" })
				must(t, tc.kill(h), "kill")
				res, err := h.Wait(ctx)
				var ee *sdk.CommandExitError
				if !errors.As(err, &ee) {
					t.Fatalf("Wait after kill: error %v (%T), want a *sdk.CommandExitError", err, err)
				}
				if ee.ExitCode != -1 || res == nil || res.ExitCode != -1 || res.Stdout != "before\n" {
					t.Errorf("Wait after kill: exit code %d, result %+v; want -1 and the output so far", ee.ExitCode, res)
				}
				if !strings.Contains(ee.Error(), "kill") {
					t.Errorf("CommandExitError %q does not say the command was killed", ee.Error())
				}
				if pidListed(t, sbx, h.PID) {
					t.Error("the killed process is still listed")
				}
				// Nothing is left to kill.
				is(t, sbx.Commands.Kill(ctx, h.PID), sdk.ErrNotFound, "second Kill")
			})
		}
		is(t, sbx.Commands.Kill(ctx, 999999), sdk.ErrNotFound, "Kill of an unknown pid")
		is(t, sbx.Commands.Terminate(ctx, 999999), sdk.ErrNotFound, "Terminate of an unknown pid")
		is(t, sbx.Commands.SendStdin(ctx, 999999, []byte("x")), sdk.ErrNotFound, "SendStdin to an unknown pid")
	})

	t.Run("terminate a background command", func(t *testing.T) {
		h, err := sbx.Commands.Start(ctx, `trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.1; done`, nil)
		must(t, err, "Start")
		waitFor(t, 10*time.Second, func() string { return "the trap to be set" }, func() bool { return h.Stdout() == "ready\n" })
		must(t, h.Terminate(ctx), "Terminate")
		res, err := h.Wait(ctx)
		var ee *sdk.CommandExitError
		if !errors.As(err, &ee) || ee.ExitCode != 7 || res.Stdout != "ready\ngot TERM\n" {
			t.Errorf("Wait after Terminate: %v, result %+v; want exit 7 from the trap", err, res)
		}
	})

	t.Run("disconnect, then connect", func(t *testing.T) {
		var first text
		h, err := sbx.Commands.Start(ctx, "for i in $(seq 1 10); do echo tick$i; sleep 0.3; done", &sdk.RunOptions{OnStdout: first.add})
		must(t, err, "Start")
		waitFor(t, 10*time.Second, func() string { return "the first tick" }, func() bool { return strings.Contains(first.String(), "tick1\n") })
		h.Disconnect()
		select {
		case <-h.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done is still open after Disconnect")
		}
		if _, err := h.Wait(ctx); err == nil {
			t.Error("Wait on a disconnected handle returned no error")
		}
		seenBefore := first.String()
		// Disconnecting did not kill the command.
		if !pidListed(t, sbx, h.PID) {
			t.Fatal("the process is gone after Disconnect")
		}

		var second text
		h2, err := sbx.Commands.Connect(ctx, h.PID, &sdk.ProcessConnectOptions{OnStdout: second.add})
		must(t, err, "Connect")
		if h2.PID != h.PID {
			t.Errorf("Connect: pid %d, want %d", h2.PID, h.PID)
		}
		res, err := h2.Wait(ctx)
		must(t, err, "Wait on the connected handle")
		if res.ExitCode != 0 || !strings.HasSuffix(second.String(), "tick10\n") || !strings.HasSuffix(res.Stdout, "tick10\n") {
			t.Errorf("connected handle: exit %d, callback got %q, result %q; want the later ticks", res.ExitCode, second.String(), res.Stdout)
		}
		if strings.Contains(second.String(), "tick1\n") {
			t.Errorf("Connect replayed output from before it: %q", second.String())
		}
		if first.String() != seenBefore || strings.Contains(first.String(), "tick10") {
			t.Errorf("the disconnected handle still got output: %q", first.String())
		}
	})

	t.Run("connect to an unknown pid", func(t *testing.T) {
		_, err := sbx.Commands.Connect(ctx, 999999, nil)
		is(t, err, sdk.ErrNotFound, "Connect to an unknown pid")
	})
}

// TestPty: interactive terminals.
func TestPty(t *testing.T) {
	e := startServer(t)
	sbx := e.sandbox(t, sdk.CreateOptions{})
	ctx := t.Context()

	t.Run("input, output, resize, kill", func(t *testing.T) {
		var out text
		h, err := sbx.Pty.Create(ctx, sdk.PtyOptions{Size: sdk.PtySize{Cols: 80, Rows: 24}, OnData: func(b []byte) { out.add(string(b)) }})
		must(t, err, "Pty.Create")
		t.Cleanup(func() { sbx.Pty.Kill(context.Background(), h.PID) })
		if !pidListed(t, sbx, h.PID) {
			t.Error("the terminal is not in Commands.List")
		}
		// $((…)) makes the markers appear only in the command's output,
		// not in the terminal's echo of the input.
		must(t, sbx.Pty.SendInput(ctx, h.PID, []byte(`stty size; echo "T=$TERM"; id -un; echo "A$((40+2))"`+"\n")), "SendInput")
		waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("A42 (got %q)", out.String()) },
			func() bool { return strings.Contains(out.String(), "A42") })
		for _, want := range []string{"24 80\r\n", "T=xterm-256color\r\n", "\r\nuser\r\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("terminal output lacks %q: %q", want, out.String())
			}
		}

		must(t, sbx.Pty.Resize(ctx, h.PID, sdk.PtySize{Cols: 100, Rows: 30}), "Resize")
		must(t, sbx.Pty.SendInput(ctx, h.PID, []byte(`stty size; echo "B$((40+3))"`+"\n")), "SendInput")
		waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("B43 (got %q)", out.String()) },
			func() bool { return strings.Contains(out.String(), "B43") })
		if !strings.Contains(out.String(), "30 100\r\n") {
			t.Errorf("stty size after Resize(100x30): %q", out.String())
		}

		must(t, sbx.Pty.Kill(ctx, h.PID), "Pty.Kill")
		_, err = h.Wait(ctx)
		var ee *sdk.CommandExitError
		if !errors.As(err, &ee) || ee.ExitCode != -1 {
			t.Errorf("Wait after Pty.Kill: %v, want a *sdk.CommandExitError with exit code -1", err)
		}
		is(t, sbx.Pty.Kill(ctx, h.PID), sdk.ErrNotFound, "second Pty.Kill")
		is(t, sbx.Pty.Kill(ctx, 999999), sdk.ErrNotFound, "Pty.Kill of an unknown pid")
	})

	t.Run("exit ends the terminal with its code", func(t *testing.T) {
		var out bytes.Buffer
		h, err := sbx.Pty.Create(ctx, sdk.PtyOptions{User: "root", Cwd: "/tmp", Output: &out, Envs: map[string]string{"MARK": "pty"}})
		must(t, err, "Pty.Create")
		t.Cleanup(func() { sbx.Pty.Kill(context.Background(), h.PID) })
		must(t, sbx.Pty.SendInput(ctx, h.PID, []byte(`echo "W=$(pwd) U=$(id -u) M=$MARK"; exit 0`+"\n")), "SendInput")
		res, err := h.Wait(ctx)
		must(t, err, "Wait")
		if res.ExitCode != 0 {
			t.Errorf("exit code %d", res.ExitCode)
		}
		// Wait returns after the last output (the writer is done).
		if !strings.Contains(out.String(), "W=/tmp U=0 M=pty\r\n") {
			t.Errorf("terminal output %q", out.String())
		}
	})

	t.Run("exit code of the shell", func(t *testing.T) {
		h, err := sbx.Pty.Create(ctx, sdk.PtyOptions{})
		must(t, err, "Pty.Create")
		t.Cleanup(func() { sbx.Pty.Kill(context.Background(), h.PID) })
		must(t, sbx.Pty.SendInput(ctx, h.PID, []byte("exit 5\n")), "SendInput")
		_, err = h.Wait(ctx)
		var ee *sdk.CommandExitError
		if !errors.As(err, &ee) || ee.ExitCode != 5 {
			t.Errorf("Wait after exit 5: %v", err)
		}
	})
}
