package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/shell"
	"github.com/hutch-sandbox/hutch/sdk"
)

func newExecCmd(g *globals) *cobra.Command {
	var (
		user, workdir string
		envs          []string
		interactive   bool
		timeout       time.Duration
	)
	cmd := &cobra.Command{
		Annotations: commandRunner(),
		Use:         "exec [flags] ID [--] CMD [ARGS...]",
		Short:       "Run a command in a running sandbox of a hutch serve",
		Long: `Exec runs CMD in the sandbox ID with bash (bash -l -c), streams its output
and exits with its exit status. A single CMD is passed to bash as it is, so
it may be a shell command line; several words are quoted, so that bash sees
exactly them.

Exit status: CMD's own; 128+N when signal N killed it (137 for SIGKILL);
124 when it ran past --timeout (as timeout(1)); 125 when Hutch could not
run it (unknown sandbox, unreachable server, bad
flags). SIGINT, SIGTERM and SIGHUP stop CMD with SIGTERM, a second one with
SIGKILL. Exec does not extend the sandbox's lifetime.`,
		Example: `  hutch exec ID -- ls -la /tmp
  hutch exec ID -- 'echo $HOME && ls | wc -l'
  hutch exec -u root -w /etc -e DEBUG=1 ID -- cat hostname
  tar -c . | hutch exec -i ID -- tar -x -C /tmp/src`,
		Args: func(cmd *cobra.Command, args []string) error {
			if _, argv := splitExecArgs(args); len(argv) == 0 {
				return errors.New("want ID and CMD: hutch exec ID -- CMD [ARGS...]")
			}
			return nil
		},
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			id, argv := splitExecArgs(args)
			env, err := parsePairs("--env", envs, true)
			if err != nil {
				return err
			}
			limit := timeout
			if limit <= 0 {
				limit = sdk.NoTimeout
			}
			command := argv[0]
			if len(argv) > 1 {
				command = shell.Join(argv)
			}
			ctx := cmd.Context()
			sbx, err := connect(ctx, c, id)
			if err != nil {
				return err
			}
			h, err := sbx.Commands.Start(ctx, command, &sdk.RunOptions{
				Envs: env, Cwd: workdir, User: user, Timeout: limit, Stdin: interactive,
				Stdout: os.Stdout, Stderr: os.Stderr,
			})
			if err != nil {
				return err
			}
			stop := stopOnSignals(sbx.Commands, h.PID)
			defer stop()
			if interactive {
				go forwardStdin(ctx, h, os.Stdin)
			}
			// Only the command's end (or the stream's failure) ends the
			// wait: signals stop the command, which then ends.
			_, err = h.Wait(context.WithoutCancel(ctx))
			var ce *sdk.CommandExitError
			switch {
			case errors.As(err, &ce):
				return exitError{code: ce.CommandResult.ShellStatus()}
			case timeout > 0 && errors.Is(err, sdk.ErrTimeout):
				// The sandbox kills a command at its deadline.
				fmt.Fprintf(os.Stderr, "hutch: the command ran past --timeout %v and was killed\n", timeout)
				return exitError{code: 124}
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&user, "user", "u", "", "sandbox user to run as (default: the sandbox's default user)")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory (default: the user's home)")
	f.StringArrayVarP(&envs, "env", "e", nil, "set KEY=VALUE (KEY alone copies it from here; repeatable)")
	f.BoolVarP(&interactive, "interactive", "i", false, "forward standard input to the command (then end of file)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (default: no limit)")
	f.SetInterspersed(false)
	return cmd
}

// splitExecArgs splits exec's arguments into the sandbox id and the
// command, dropping the "--" between them.
func splitExecArgs(args []string) (id string, argv []string) {
	if len(args) == 0 {
		return "", nil
	}
	id, argv = args[0], args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	return id, argv
}

// forwardStdin sends r to the command's standard input, and closes it at
// end of file. It gives up silently when the command has ended.
func forwardStdin(ctx context.Context, h *sdk.CommandHandle, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if h.SendStdin(ctx, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			h.CloseStdin(ctx)
			return
		}
	}
}

// stopOnSignals stops process pid when hutch gets SIGINT, SIGTERM or
// SIGHUP: with SIGTERM first, SIGKILL from the second signal on. The
// returned function stops listening.
func stopOnSignals(cmds *sdk.Commands, pid uint32) (stop func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for n := 0; ; n++ {
			select {
			case <-sigs:
			case <-done:
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if n == 0 {
				cmds.Terminate(ctx, pid)
			} else {
				cmds.Kill(ctx, pid)
			}
			cancel()
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}
