package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/internal/cluster"
	"github.com/hutch-sandbox/hutch/sdk"
)

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Make a cluster's certificates and look at its nodes (docs/cluster.md)",
	}
	var caDir string
	ca := &cobra.Command{
		Use:   "ca",
		Short: "Make the cluster's CA, once: every node's certificate is signed by it",
		Long: `ca writes DIR/ca.pem and DIR/ca-key.pem (0600). Keep the key off the nodes:
only "hutch cluster issue" needs it. It refuses to replace an existing CA.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cluster.MakeCA(caDir, time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster CA in %s; issue each node's bundle with: hutch cluster issue --ca-dir %s --name NODE --host ADDRESS --out DIR\n", caDir, caDir)
			return nil
		},
	}
	ca.Flags().StringVar(&caDir, "dir", "", "directory for the CA (made 0700)")
	ca.MarkFlagRequired("dir")

	var (
		name, out string
		hosts     []string
	)
	issue := &cobra.Command{
		Use:   "issue",
		Short: "Issue a node's certificate bundle (ca.pem, node.pem, node-key.pem) from the cluster CA",
		Long: `issue writes OUT/ca.pem, OUT/node.pem and OUT/node-key.pem (0600) for node NAME,
valid for NAME and each --host (every IP address or DNS name other nodes and etcd
members reach the node by). Copy OUT to the node as DATA_DIR/cluster, the
default of hutch serve's --cluster-ca, --cluster-cert and --cluster-key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cluster.Issue(caDir, name, hosts, out, time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s's bundle in %s (for %s)\n", name, out, strings.Join(append([]string{name}, hosts...), ", "))
			return nil
		},
	}
	issue.Flags().StringVar(&caDir, "ca-dir", "", "the CA's directory (hutch cluster ca --dir)")
	issue.Flags().StringVar(&name, "name", "", "the node's name (hutch serve --node-name)")
	issue.Flags().StringSliceVar(&hosts, "host", nil, "an IP address or DNS name the node is reached by (repeatable)")
	issue.Flags().StringVar(&out, "out", "", "directory for the bundle (made 0700)")
	for _, f := range []string{"ca-dir", "name", "out"} {
		issue.MarkFlagRequired(f)
	}

	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's nodes: their load, templates and leases",
		Args:  cobra.NoArgs,
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			nodes, err := c.ClusterNodes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(nodes)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NODE\tURL\tLEASE\tRUNNING\tCREATING\tWARM\tCPU\tMEMORY\tTEMPLATES\tUP")
			for _, n := range nodes {
				name := printable.String(n.Name)
				if n.Self {
					name += " *"
				}
				lease := "?"
				if n.LeaseSeconds >= 0 {
					lease = fmt.Sprintf("%ds", n.LeaseSeconds)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%.0f%% of %d\t%d/%d MiB\t%d\t%s\n", name, printable.String(n.URL), lease,
					n.Running, n.Creating, n.Warm, 100*n.CPULoad, n.CPUs, n.MemoryUsedMB, n.MemoryMB, len(n.Templates),
					time.Since(n.Started).Round(time.Second))
			}
			if err := w.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d nodes (* answered)\n", len(nodes))
			return nil
		}),
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	g.addRemoteFlags(status.Flags())
	cmd.AddCommand(ca, issue, status)
	return cmd
}
