package main

import (
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/envd"
	"github.com/hutch-sandbox/hutch/internal/envdapi"
)

// newEnvdCmd is the sandbox's daemon. Hutch starts it inside sandboxes; it
// is not for people to run.
func newEnvdCmd() *cobra.Command {
	var (
		controlFD, apiFD int
		listen           string
		user             string
	)
	cmd := &cobra.Command{
		Use:    "envd",
		Short:  "Run the in-sandbox daemon (started by Hutch inside sandboxes)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			logger := envd.NewLogger(os.Stderr)
			return envd.Run(cmd.Context(), envd.Options{DefaultUser: user, Logger: logger}, controlFD, apiFD, listen)
		},
	}
	cmd.Flags().IntVar(&controlFD, "control-fd", 3, "descriptor of the host's listening control socket (POST /init, tunnels)")
	cmd.Flags().IntVar(&apiFD, "api-fd", -1, "descriptor of the host's listening API socket (-1: none)")
	cmd.Flags().StringVar(&listen, "listen", "0.0.0.0:"+strconv.Itoa(envdapi.Port), "TCP address inside the sandbox (empty: none)")
	cmd.Flags().StringVar(&user, "user", "user", "default user of requests that name none")
	return cmd
}
