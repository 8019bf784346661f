package remotecli

import (
	"testing"
)

func testExec(t *testing.T, f *fixture, id string) {
	for _, tc := range []struct {
		name       string
		stdin      string
		args       []string // after "exec"
		env        []string // added to the CLI's environment
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "stdout and stderr apart", args: []string{id, "--", "sh", "-c", "echo out; echo err >&2"}, wantStdout: "out\n", wantStderr: "err\n"},
		{name: "exit status passed through", args: []string{id, "--", "sh", "-c", "echo partial; exit 7"}, wantCode: 7, wantStdout: "partial\n"},
		// bash -l runs ~/.bash_logout on exit: it must not turn 4 into 1.
		{name: "exit status under set -e", args: []string{id, "--", "set -e; echo partial; exit 4"}, wantCode: 4, wantStdout: "partial\n"},
		{name: "one argument is a command line", args: []string{id, "--", `echo "$HOME" && whoami | tr a-z A-Z`}, wantStdout: "/home/user\nUSER\n"},
		{name: "several arguments are quoted", args: []string{id, "--", "printf", "%s|", "a b", "it's", "$HOME", ""}, wantStdout: "a b|it's|$HOME||"},
		{name: "without --", args: []string{id, "echo", "no dashes"}, wantStdout: "no dashes\n"},
		{name: "-e", args: []string{"-e", "FOO=foo bar", "-e", "FROM_HERE", "-e", "UNSET_HERE", id, "--", `echo "$FOO/$FROM_HERE/${UNSET_HERE-unset}"`}, env: []string{"FROM_HERE=copied"}, wantStdout: "foo bar/copied/unset\n"},
		{name: "-w", args: []string{"-w", "/etc", id, "--", "pwd"}, wantStdout: "/etc\n"},
		{name: "-u root", args: []string{"-u", "root", id, "--", "id -un; echo $HOME"}, wantStdout: "root\n/root\n"},
		{name: "-i forwards stdin", stdin: "hello\nworld\n", args: []string{"-i", id, "--", "tr", "a-z", "A-Z"}, wantStdout: "HELLO\nWORLD\n"},
		{name: "-i empty stdin", args: []string{"-i", id, "--", "cat; echo end"}, wantStdout: "end\n"},
		{name: "no -i: no stdin", stdin: "ignored\n", args: []string{id, "--", "cat; echo end"}, wantStdout: "end\n"},
		{name: "killed by a signal", args: []string{id, "--", "echo before; kill -9 $$"}, wantCode: 137, wantStdout: "before\n"},
		{name: "command not found", args: []string{id, "--", "no-such-command-here"}, wantCode: 127, wantStderr: "/bin/bash: line 1: no-such-command-here: command not found\n"},
		{name: "--timeout", args: []string{"--timeout", "1s", id, "--", "sleep 30"}, wantCode: 124, wantStderr: "hutch: the command ran past --timeout 1s and was killed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append(append([]string{}, f.env...), tc.env...)
			r := f.hutchEnv(t, env, tc.stdin, append(append(f.flags(), "exec"), tc.args...)...)
			if r.Code != tc.wantCode || r.Stdout != tc.wantStdout || r.Stderr != tc.wantStderr {
				t.Errorf("got %s\nwant exit %d, stdout %q, stderr %q", r, tc.wantCode, tc.wantStdout, tc.wantStderr)
			}
		})
	}
	t.Run("unknown sandbox", func(t *testing.T) {
		r := f.hutch(t, "", "exec", "nosuchsandbox", "--", "true")
		wantFailure(t, r, 125, "sandbox nosuchsandbox not found")
		if r.Stderr != "hutch: sandbox nosuchsandbox not found\n" {
			t.Errorf("stderr %q", r.Stderr)
		}
	})
	t.Run("unknown user", func(t *testing.T) {
		wantFailure(t, f.hutch(t, "", "exec", "-u", "nosuchuser", id, "--", "true"), 125, "nosuchuser")
	})
	t.Run("no command", func(t *testing.T) {
		wantFailure(t, f.hutch(t, "", "exec", id, "--"), 125, "want ID and CMD")
	})
}
