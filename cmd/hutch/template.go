package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/template"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build and list templates"}
	var opts template.BuildOptions
	build := &cobra.Command{
		Use:   "build NAME",
		Short: "Build a template from its recipe (cached: an unchanged recipe does nothing)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Progress = os.Stderr
			t, _, err := template.Open(g.templates).Build(cmd.Context(), args[0], opts)
			if err != nil {
				return err
			}
			fmt.Println(t.Dir)
			return nil
		},
	}
	build.Flags().StringVar(&opts.Mirror, "mirror", "", "Debian mirror URL (default: the host's apt mirror)")
	build.Flags().StringVar(&opts.CacheDir, "cache", g.envOr("HUTCH_CACHE", template.DefaultCacheDir), "download cache directory")
	build.Flags().BoolVar(&opts.Force, "force", false, "rebuild even if the recipe is unchanged")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List built templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ts, err := template.Open(g.templates).List()
			if err != nil {
				return err
			}
			if asJSON {
				type jsonTemplate struct {
					template.Config
					Dir string `json:"dir"`
				}
				out := []jsonTemplate{}
				for _, t := range ts {
					out = append(out, jsonTemplate{t.Config, t.Dir})
				}
				return printJSON(out)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tDEFAULT USER\tRECIPE\tBUILT")
			for _, t := range ts {
				fmt.Fprintf(w, "%s\t%s\t%.12s\t%s\n", t.Name, t.DefaultUser, t.RecipeHash, t.Built.Format("2006-01-02 15:04"))
			}
			return w.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(build, ls)
	return cmd
}
