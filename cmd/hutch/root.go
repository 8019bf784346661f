package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/backends"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// globals are the flags every subcommand shares.
type globals struct {
	dataDir   string
	templates string
	// apiURL and apiKey reach a remote `hutch serve`; see remoteConfig.
	apiURL string
	apiKey string
	// getenv reads the environment the flags' defaults come from.
	getenv func(string) string
}

// envOr returns the environment variable key, or def when it is empty.
func (g *globals) envOr(key, def string) string {
	if v := g.getenv(key); v != "" {
		return v
	}
	return def
}

// exitError carries a command's chosen exit status up to main.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// failureCodeKey is the annotation that sets the exit status of a
// command's failures (and its subcommands'); without it, 1.
const failureCodeKey = "hutch.failure-code"

// commandRunner returns the annotations of a command that runs a command
// in a sandbox and exits with its status: Hutch's own failures then exit
// 125, as docker run and docker exec do, so that they cannot be taken for
// the command's.
func commandRunner() map[string]string { return map[string]string{failureCodeKey: "125"} }

func run(ctx context.Context, args []string) int {
	root := newRootCmd(os.Getenv)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(os.Stderr, "hutch: %s\n", errorLine(err))
		return failureCode(cmd)
	}
}

// newRootCmd builds the command tree; getenv supplies the environment the
// flags' defaults come from.
func newRootCmd(getenv func(string) string) *cobra.Command {
	g := &globals{getenv: getenv}
	root := &cobra.Command{
		Use:           "hutch",
		Short:         "Isolated sandboxes for AI agents",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.dataDir, "data-dir", g.envOr("HUTCH_DATA_DIR", native.DefaultDataDir), "state directory (env HUTCH_DATA_DIR)")
	root.PersistentFlags().StringVar(&g.templates, "templates", g.envOr("HUTCH_TEMPLATES", template.DefaultDir), "template store (env HUTCH_TEMPLATES)")
	g.addRemoteFlags(root.PersistentFlags())
	root.AddCommand(newRunCmd(g), newPsCmd(g), newRmCmd(g), newTemplateCmd(g), newKeysCmd(g), newServeCmd(g), newEnvdCmd())
	root.AddCommand(newSandboxCmd(g), newSnapshotCmd(g), newExecCmd(g), newShellCmd(g), newCpCmd(g), newLogsCmd(g), newEventsCmd(g), newMCPCmd(g), newVolumeCmd(g), newClusterCmd(g), newVersionCmd(), newGenDocsCmd())
	return root
}

// errorLine is err's text as the CLI prints it: one line, whatever the
// text, and printable, since it may quote a sandbox (a command's standard
// error, a path it resolved, its daemon's messages).
func errorLine(err error) string {
	return printable.String(strings.Join(strings.Fields(err.Error()), " "))
}

// failureCode is the exit status of a failure of cmd: its failureCodeKey
// annotation or its nearest parent's, else 1.
func failureCode(cmd *cobra.Command) int {
	for c := cmd; c != nil; c = c.Parent() {
		if s, ok := c.Annotations[failureCodeKey]; ok {
			if n, err := strconv.Atoi(s); err == nil {
				return n
			}
		}
	}
	return 1
}

// runtime opens every backend of the data dir: the CLI sees and removes
// sandboxes whichever runs them, and runs new ones on native unless told.
func (g *globals) runtime() (*runtime.Set, error) {
	set, _, err := backends.Open(backends.Options{DataDir: g.dataDir, Templates: template.Open(g.templates), SandboxBinary: sandboxBinary(nil)})
	return set, err
}

// sandboxBinary is the hutch-sandbox beside this binary, or "" (sandboxes
// run hutch itself) when there is none or it is of another build, which
// logger, when there is one, is told.
func sandboxBinary(logger *slog.Logger) string {
	path, err := native.FindSandboxBinary()
	if logger != nil {
		if err != nil {
			logger.Info("sandboxes run hutch itself", "reason", err)
		} else {
			logger.Info("sandboxes run "+native.SandboxBinaryName, "path", path)
		}
	}
	return path
}
