package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/units"
)

func newRunCmd(g *globals) *cobra.Command {
	var (
		tpl, memory, disk, user, workdir, network, name string
		backend                                         string
		cpus                                            float64
		pids                                            int64
		envs                                            []string
		rm, interactive, tty, detach, noNewPrivs        bool
	)
	cmd := &cobra.Command{
		Annotations: commandRunner(),
		Use:         "run [flags] -- CMD [ARGS...]",
		Short:       "Run a command in a new sandbox (the `docker run` of Hutch)",
		Long: `Run creates a sandbox from a template, runs CMD in it as the template's
default user with standard streams attached, and exits with CMD's exit status
(128+N when signal N killed it). With --rm the sandbox is removed afterwards;
otherwise it stays, exited, until "hutch rm". With -d it keeps running after
hutch exits and its output goes to its log.

Exit statuses of hutch itself: 125 when Hutch could not run the command
(bad flags, unknown template, impossible limits), 126 when CMD cannot be
executed, 127 when CMD is not found, 137 when the sandbox ran out of memory.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mem, err := units.ParseBytes(memory)
			if err != nil {
				return fmt.Errorf("--memory: %w", err)
			}
			diskBytes, err := units.ParseBytes(disk)
			if err != nil {
				return fmt.Errorf("--disk: %w", err)
			}
			switch network {
			case "none", "default":
			default:
				return fmt.Errorf("--network must be none or default, not %q", network)
			}
			if detach && (interactive || tty || rm) {
				return errors.New("--detach cannot be combined with -i, -t or --rm")
			}
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			proc := runtime.Process{Args: args, Env: expandEnv(envs), User: user, Cwd: workdir, Terminal: tty}
			// The template's Env and working directory are defaults, as
			// they are for a sandbox of hutch serve; -e and -w override
			// them. (An unknown template is the runtime's error to report.)
			if t, err := template.Open(g.templates).Get(tpl); err == nil {
				proc.Env = append(slices.Clone(t.Env), proc.Env...)
				if proc.Cwd == "" {
					proc.Cwd = t.DefaultWorkdir
				}
			}
			var restore func()
			if !detach {
				proc.Stdout, proc.Stderr = os.Stdout, os.Stderr
				if interactive {
					proc.Stdin = os.Stdin
				}
			}
			if tty {
				fd := int(os.Stdin.Fd())
				if !term.IsTerminal(fd) {
					return errors.New("-t needs a terminal on standard input")
				}
				if w, h, err := term.GetSize(fd); err == nil {
					proc.ConsoleSize = runtime.ConsoleSize{Rows: uint16(h), Cols: uint16(w)}
				}
				if interactive {
					st, err := term.MakeRaw(fd)
					if err != nil {
						return err
					}
					restore = func() { term.Restore(fd, st) }
					defer restore()
				}
			}
			sbx, err := rt.Create(cmd.Context(), runtime.Spec{
				ID: name, Runtime: backend, Template: tpl, NoNewPrivileges: noNewPrivs, Process: proc,
				Resources: runtime.Resources{MemoryBytes: mem, CPUs: cpus, Pids: pids, DiskBytes: diskBytes},
			})
			if err != nil {
				return startError(err)
			}
			if detach {
				fmt.Println(sbx.ID())
				return nil
			}
			ctx := cmd.Context()
			sigs := make(chan os.Signal, 8)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGWINCH)
			defer signal.Stop(sigs)
			go func() {
				for s := range sigs {
					if s == syscall.SIGWINCH && tty {
						if w, h, err := term.GetSize(int(os.Stdin.Fd())); err == nil {
							sbx.ResizeConsole(ctx, runtime.ConsoleSize{Rows: uint16(h), Cols: uint16(w)})
						}
						continue
					}
					if s != syscall.SIGWINCH {
						sbx.Signal(ctx, s.(syscall.Signal))
					}
				}
			}()
			st, err := sbx.Wait(ctx)
			if err != nil {
				return err
			}
			if restore != nil {
				restore()
			}
			if rm {
				if err := sbx.Delete(ctx); err != nil {
					fmt.Fprintf(os.Stderr, "hutch: remove sandbox: %s\n", errorLine(err))
				}
			}
			if st.OOMKilled {
				fmt.Fprintf(os.Stderr, "hutch: sandbox %s ran out of memory (limit %s): a process was OOM-killed\n", sbx.ID(), memory)
			}
			if st.Error != "" {
				fmt.Fprintf(os.Stderr, "hutch: %s\n", printable.String(st.Error))
			}
			if st.Code != 0 {
				return exitError{code: st.Code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tpl, "template", "base", "template to create the sandbox from")
	f.StringVar(&name, "name", "", "sandbox id (default: random)")
	f.StringVar(&backend, "runtime", g.envOr("HUTCH_RUNTIME", "native"), "runtime backend: native, or gvisor (gVisor's user-space kernel; see docs/runtime.md; env HUTCH_RUNTIME)")
	f.StringVar(&memory, "memory", "512M", "memory limit (K, M, G suffixes; 0 for none)")
	f.Float64Var(&cpus, "cpus", 1, "CPU limit in cores (0 for none)")
	f.Int64Var(&pids, "pids", 512, "limit on processes and threads (0 for none)")
	f.StringVar(&disk, "disk", "0", "size of the writable layer, on a file system of its own (0 for no limit)")
	f.StringVar(&network, "network", "none", "none or default (for now every sandbox has loopback only)")
	f.StringVarP(&user, "user", "u", "", "user name or uid[:gid] (default: the template's user)")
	f.StringArrayVarP(&envs, "env", "e", nil, "set KEY=VALUE (or KEY to copy it from this environment)")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory inside the sandbox (default: the template's, else the user's home)")
	f.BoolVar(&rm, "rm", false, "remove the sandbox when the command exits")
	f.BoolVarP(&interactive, "interactive", "i", false, "attach standard input")
	f.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal")
	f.BoolVarP(&detach, "detach", "d", false, "leave the sandbox running and print its id")
	f.BoolVar(&noNewPrivs, "no-new-privileges", true, "set no_new_privs (false lets sudo work inside)")
	f.SetInterspersed(false)
	return cmd
}

// expandEnv turns a bare KEY into KEY=value from this environment, as docker does.
func expandEnv(envs []string) []string {
	out := make([]string, 0, len(envs))
	for _, e := range envs {
		if !strings.Contains(e, "=") {
			v, ok := os.LookupEnv(e)
			if !ok {
				continue
			}
			e += "=" + v
		}
		out = append(out, e)
	}
	return out
}

// startError gives a failure to start CMD the shell's exit statuses.
func startError(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "exec:") && errors.Is(err, errdefs.ErrNotFound):
		fmt.Fprintf(os.Stderr, "hutch: %s\n", errorLine(err))
		return exitError{code: 127}
	case strings.HasPrefix(msg, "exec"):
		fmt.Fprintf(os.Stderr, "hutch: %s\n", errorLine(err))
		return exitError{code: 126}
	}
	return err
}
