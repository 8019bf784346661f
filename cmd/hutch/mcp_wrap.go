package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/mcp/wrap"
)

func newMCPWrapCmd(g *globals) *cobra.Command {
	var (
		o            wrap.Options
		envs, files  []string
		grace, renew time.Duration
	)
	cmd := &cobra.Command{
		Annotations: commandRunner(),
		Use:         "wrap [flags] -- CMD [ARGS...]",
		Short:       "Run a stdio MCP server in a fresh sandbox, as a local stdio MCP server",
		Long: `Wrap is a local stdio MCP server whose real server, CMD, runs in a new
sandbox of a hutch serve (local or remote: --api-url, --api-key). MCP
clients start it as they would start CMD:

  {"command": "hutch", "args": ["mcp", "wrap", "--", "npx", "-y", "@modelcontextprotocol/server-memory"]}

It creates the sandbox, uploads the --file paths, starts CMD through the
sandbox daemon's process stream and relays JSON-RPC both ways over that
stream: standard input to CMD's, CMD's standard output to standard output,
CMD's standard error to standard error. No port is opened in the sandbox
and no URL is published; CMD sees only the sandbox (not this machine's
files or environment: pass what it needs with --env and --file).

A single CMD is run by bash as it is, so it may be a shell command line;
several words are quoted, so that bash sees exactly them. --env sets CMD's
environment only. A --file directory's contents go into REMOTE (tar must be
in the template); a file goes to REMOTE, or into it when REMOTE ends in /,
with its permission bits.

The sandbox lives while the client is connected: wrap renews its --timeout
(every third of it) and kills it when the session ends, unless --keep:
- the client closes standard input (or exits): CMD's standard input is
  closed, CMD has --grace to exit, then the sandbox is killed; wrap exits
  with CMD's status (0 when it had to be stopped);
- SIGINT, SIGTERM, SIGHUP: the sandbox is killed; exit 128+N;
- CMD exits first: the sandbox is killed; exit with CMD's status;
- standard output is closed (the client went away): the sandbox is
  killed; exit 141;
- the sandbox is lost (killed, timed out) or cannot be made: exit 125.
Wrap's own messages go to standard error, starting "hutch mcp wrap: ".

CPU, memory and processes are the limits the hutch serve gives every
sandbox: the API that creates sandboxes has no resource fields.`,
		Example: `  hutch mcp wrap -- npx -y @modelcontextprotocol/server-memory
  hutch mcp wrap --no-internet --file ./server.py:/home/user/server.py -- python3 server.py
  hutch mcp wrap -e GITHUB_TOKEN --file ./app:/home/user/app -- 'cd app && node dist/index.js'
  claude mcp add memory -- hutch mcp wrap -- npx -y @modelcontextprotocol/server-memory`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("want CMD: hutch mcp wrap [flags] -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if o.Envs, err = parsePairs("--env", envs, true); err != nil {
				return err
			}
			for _, spec := range files {
				f, err := wrap.ParseFile(spec)
				if err != nil {
					return err
				}
				o.Files = append(o.Files, f)
			}
			if o.Timeout < time.Second {
				return fmt.Errorf("--timeout %v: must be at least 1s", o.Timeout)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			o.Client, o.Command, o.Grace, o.RenewEvery = c, args, grace, renew
			o.Stdin, o.Stdout, o.Stderr = os.Stdin, os.Stdout, os.Stderr
			o.Explain = func(err error) error { return explain(err, c.Config().APIURL) }

			// Signals end the session (and kill the sandbox) through the
			// context's cause. A write to a closed standard output must
			// fail rather than kill hutch with SIGPIPE before it cleans up.
			signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer signal.Stop(sigs)
			ctx, cancel := context.WithCancelCause(context.WithoutCancel(cmd.Context()))
			defer cancel(nil)
			go func() {
				select {
				case sig := <-sigs:
					cancel(wrap.Signaled{Signal: sig.(syscall.Signal)})
				case <-ctx.Done():
				}
			}()
			if code := wrap.Run(ctx, o); code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Template, "template", "base", "template to create the sandbox from")
	f.StringArrayVarP(&envs, "env", "e", nil, "set KEY=VALUE in CMD's environment; KEY alone copies it from here (repeatable)")
	f.StringArrayVar(&files, "file", nil, "upload LOCAL:REMOTE (a file or a directory) before CMD starts (repeatable)")
	f.BoolVar(&o.NoInternet, "no-internet", false, "give the sandbox no route out")
	f.DurationVar(&o.Timeout, "timeout", wrap.DefaultTimeout, "sandbox lifetime, renewed while the client is connected (at most 24h)")
	f.BoolVar(&o.Keep, "keep", false, "keep the sandbox (until its timeout) when the session ends; CMD is stopped")
	f.StringVarP(&o.Cwd, "cwd", "w", "", "CMD's working directory (default: the user's home)")
	f.StringVarP(&o.User, "user", "u", "", "sandbox user to run CMD and own the uploads as (default: the template's user)")
	f.DurationVar(&grace, "grace", wrap.DefaultGrace, "how long CMD may take to exit after its standard input closes")
	f.DurationVar(&renew, "renew-every", 0, "how often to renew the sandbox's timeout (default: a third of --timeout)")
	f.MarkHidden("renew-every")
	f.SetInterspersed(false)
	return cmd
}
