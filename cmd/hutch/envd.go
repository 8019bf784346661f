package main

import (
	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/envd"
)

// newEnvdCmd is the sandbox's daemon. Hutch starts it inside sandboxes; it
// is not for people to run. Its flags are envd.Main's (the same in
// hutch-sandbox), so cobra leaves them alone.
func newEnvdCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "envd [--control-fd N] [--api-fd N] [--listen ADDR] [--user NAME]",
		Short:              "Run the in-sandbox daemon (started by Hutch inside sandboxes)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return envd.Main(cmd.Context(), args, cmd.ErrOrStderr())
		},
	}
}
