package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/sdk"
)

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: `List and delete snapshots ("hutch sandbox snapshot" takes one)`,
	}
	cmd.AddCommand(newSnapshotLsCmd(g), newSnapshotRmCmd(g))
	return cmd
}

func newSnapshotLsCmd(g *globals) *cobra.Command {
	var (
		opts   sdk.ListSnapshotsOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List snapshots, newest first",
		Args:  cobra.NoArgs,
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			all := []sdk.SnapshotInfo{}
			for {
				page, next, err := c.ListSnapshots(cmd.Context(), opts)
				if err != nil {
					return err
				}
				all = append(all, page...)
				if next == "" {
					break
				}
				opts.NextToken = next
			}
			if asJSON {
				return printJSON(all)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SNAPSHOT\tNAMES")
			for _, s := range all {
				fmt.Fprintf(w, "%s\t%s\n", s.ID, strings.Join(s.Names, ","))
			}
			return w.Flush()
		}),
	}
	cmd.Flags().StringVar(&opts.SandboxID, "sandbox", "", "only the snapshots of this sandbox")
	cmd.Flags().StringVar(&opts.Name, "name", "", "only the snapshots of this name")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSnapshotRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Delete snapshots (sandboxes made from them keep their files)",
		Args:  cobra.MinimumNArgs(1),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			var failed []string
			for _, id := range args {
				ok, err := c.DeleteSnapshot(cmd.Context(), id)
				switch {
				case err != nil:
					fmt.Fprintf(os.Stderr, "hutch: %s: %v\n", id, err)
					failed = append(failed, id)
				case !ok:
					fmt.Fprintf(os.Stderr, "hutch: no snapshot %s\n", id)
					failed = append(failed, id)
				default:
					fmt.Println(id)
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("not deleted: %s", strings.Join(failed, " "))
			}
			return nil
		}),
	}
}
