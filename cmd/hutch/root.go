package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// globals are the flags every subcommand shares.
type globals struct {
	dataDir   string
	templates string
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// exitError carries a command's chosen exit status up to main.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func run(ctx context.Context, args []string) int {
	g := &globals{}
	root := &cobra.Command{
		Use:           "hutch",
		Short:         "Isolated sandboxes for AI agents",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.dataDir, "data-dir", envOr("HUTCH_DATA_DIR", native.DefaultDataDir), "state directory (env HUTCH_DATA_DIR)")
	root.PersistentFlags().StringVar(&g.templates, "templates", envOr("HUTCH_TEMPLATES", template.DefaultDir), "template store (env HUTCH_TEMPLATES)")
	root.AddCommand(newRunCmd(g), newPsCmd(g), newRmCmd(g), newTemplateCmd(g), newKeysCmd(g), newServeCmd(g), newEnvdCmd())
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(os.Stderr, "hutch: %v\n", err)
		return 125 // as docker: the error is Hutch's, not the command's
	}
}

func (g *globals) runtime() (*native.Runtime, error) {
	return native.New(native.Options{DataDir: g.dataDir, Templates: template.Open(g.templates)})
}
