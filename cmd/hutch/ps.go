package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/internal/runtime"
)

func newPsCmd(g *globals) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List sandboxes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			list, err := rt.List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []runtime.Status{}
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			if quiet {
				for _, s := range list {
					fmt.Println(s.ID)
				}
				return nil
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTEMPLATE\tSTATUS\tPID\tCREATED\tCOMMAND")
			for _, s := range list {
				status := string(s.State)
				if s.Exit != nil {
					status = fmt.Sprintf("exited (%d)", s.Exit.Code)
					if s.Exit.OOMKilled {
						status += " oom"
					}
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s ago\t%s\n", s.ID, printable.String(s.Template), status, s.Pid,
					time.Since(s.Created).Round(time.Second), printable.String(strings.Join(s.Command, " ")))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only ids")
	return cmd
}

func newRmCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm ID [ID...]",
		Short: "Remove sandboxes, killing them if they run",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, err := g.runtime()
			if err != nil {
				return err
			}
			failed := 0
			for _, id := range args {
				sbx, err := rt.Load(cmd.Context(), id)
				if err == nil {
					err = sbx.Delete(cmd.Context())
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "hutch: %s\n", errorLine(err))
					failed++
					continue
				}
				fmt.Println(id)
			}
			if failed > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	}
	return cmd
}
