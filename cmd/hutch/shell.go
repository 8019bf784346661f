package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hutch-sandbox/hutch/sdk"
)

// defaultPtySize is the terminal size when standard input is no terminal.
func defaultPtySize() sdk.PtySize { return sdk.PtySize{Cols: 80, Rows: 24} }

func newShellCmd(g *globals) *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Annotations: commandRunner(),
		Use:         "shell ID",
		Short:       "Open an interactive shell in a sandbox, on a terminal that follows this one's size",
		Long: `Shell starts bash (bash -i -l) on a terminal made inside the sandbox ID,
puts this terminal in raw mode (every key goes to the sandbox: Ctrl-C
interrupts what runs there, not hutch) and resizes the sandbox's terminal
whenever this one changes size. It exits with the shell's exit status.

Standard input need not be a terminal: then it is sent as typed input,
followed by Ctrl-D until the shell ends, and the terminal is 80x24.

Exit status: the shell's; 125 when Hutch could not start it. SIGTERM or
SIGHUP to hutch (and SIGINT when standard input is no terminal) kill the
shell, and hutch exits 128+N. Shell does not extend the sandbox's lifetime.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			ctx := cmd.Context()
			sbx, err := connect(ctx, c, args[0])
			if err != nil {
				return err
			}
			return runShell(ctx, sbx, user)
		}),
	}
	cmd.Flags().StringVarP(&user, "user", "u", "", "sandbox user to run the shell as (default: the sandbox's default user)")
	return cmd
}

// runShell runs a terminal session in sbx on this process's standard
// streams.
func runShell(ctx context.Context, sbx *sdk.Sandbox, user string) error {
	in := int(os.Stdin.Fd())
	isTerm := term.IsTerminal(in)
	size := defaultPtySize()
	if isTerm {
		size = terminalSize(in)
	}
	// Listen before the shell starts, so no signal is missed.
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	stopSigs := []os.Signal{syscall.SIGTERM, syscall.SIGHUP}
	if !isTerm {
		stopSigs = append(stopSigs, syscall.SIGINT)
	}
	stops := make(chan os.Signal, 1)
	signal.Notify(stops, stopSigs...)
	defer signal.Stop(stops)

	h, err := sbx.Pty.Create(ctx, sdk.PtyOptions{Size: size, User: user, Timeout: sdk.NoTimeout, Output: os.Stdout})
	if err != nil {
		return err
	}
	// Whatever ends this function kills the shell, unless it has ended.
	defer func() {
		select {
		case <-h.Done():
		default:
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			sbx.Pty.Kill(kctx, h.PID)
			cancel()
		}
	}()
	if isTerm {
		st, err := term.MakeRaw(in)
		if err != nil {
			return err
		}
		defer term.Restore(in, st)
	}
	go func() {
		for {
			select {
			case <-winch:
				if isTerm {
					sbx.Pty.Resize(ctx, h.PID, terminalSize(in))
				}
			case <-h.Done():
				return
			}
		}
	}()
	go forwardTerminalInput(ctx, sbx.Pty, h, os.Stdin)

	waited := make(chan error, 1)
	go func() {
		_, err := h.Wait(context.WithoutCancel(ctx))
		waited <- err
	}()
	select {
	case err = <-waited:
	case sig := <-stops:
		return exitError{code: 128 + int(sig.(syscall.Signal))}
	case <-ctx.Done():
		return exitError{code: 128 + int(syscall.SIGTERM)}
	}
	var ce *sdk.CommandExitError
	if errors.As(err, &ce) {
		return exitError{code: ce.CommandResult.ShellStatus()}
	}
	return err
}

// terminalSize is the size of terminal fd, or the default when it has
// none.
func terminalSize(fd int) sdk.PtySize {
	w, h, err := term.GetSize(fd)
	if err != nil || w <= 0 || h <= 0 {
		return defaultPtySize()
	}
	return sdk.PtySize{Cols: uint32(w), Rows: uint32(h)}
}

// forwardTerminalInput types what r yields into terminal handle h; at end
// of file it types Ctrl-D, once a second until the shell ends: a Ctrl-D
// that arrives while bash sets up its line editing is lost. It gives up
// silently when the terminal has ended.
func forwardTerminalInput(ctx context.Context, pty *sdk.Pty, h *sdk.CommandHandle, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if pty.SendInput(ctx, h.PID, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if pty.SendInput(ctx, h.PID, []byte{4}) != nil {
			return
		}
		select {
		case <-h.Done():
			return
		case <-tick.C:
		}
	}
}
