package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/version"
)

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of this hutch",
		Long: `Version prints what this binary knows of its own build: the version the
package gave it (else Go's module version), the commit it was built from
and whether the work tree had changes, the commit's time, the build date
(packages only), setup.sh's hash of the source when no commit was recorded,
and the Go toolchain and platform.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			info := version.Get()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			_, err := fmt.Fprintln(out, strings.Join(info.Lines(), "\n"))
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
