package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/sdk"
)

func newVolumeCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"vol"},
		Short:   "Manage volumes: directories that outlive sandboxes (create, ls, rm, put, get)",
		Long: `A volume is a directory kept by hutch serve, mounted read-write into the
sandboxes that name it at create (hutch sandbox create --volume NAME:/PATH),
several at once; its files keep their owners as the sandboxes see them.
See docs/volumes.md. Failures exit 1.`,
		Example: `  hutch volume create data
  id=$(hutch sandbox create --volume data:/mnt/data)
  hutch exec "$id" -- sh -c 'date > /mnt/data/now'
  hutch volume get data /now -`,
	}
	cmd.AddCommand(newVolumeCreateCmd(g), newVolumeLsCmd(g), newVolumeRmCmd(g), newVolumePutCmd(g), newVolumeGetCmd(g))
	return cmd
}

func newVolumeCreateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "Create a volume and print its id",
		Long:  "Create makes a volume. NAME is 1 to 64 letters, digits, '-' or '_', not used by another of the key's volumes.",
		Args:  cobra.ExactArgs(1),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			v, err := c.CreateVolume(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Println(v.ID)
			return nil
		}),
	}
}

func newVolumeLsCmd(g *globals) *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the key's volumes",
		Args:    cobra.NoArgs,
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			vols, err := c.ListVolumes(cmd.Context())
			if err != nil {
				return err
			}
			switch {
			case asJSON:
				if vols == nil {
					vols = []sdk.VolumeInfo{}
				}
				return printJSON(vols)
			case quiet:
				for _, v := range vols {
					fmt.Println(v.ID)
				}
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME")
			for _, v := range vols {
				fmt.Fprintf(tw, "%s\t%s\n", v.ID, v.Name)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print ids only")
	return cmd
}

// resolveVolume finds a volume by id or name.
func resolveVolume(cmd *cobra.Command, c *sdk.Client, ref string) (*sdk.Volume, error) {
	vols, err := c.ListVolumes(cmd.Context())
	if err != nil {
		return nil, err
	}
	for _, v := range vols {
		if v.ID == ref || v.Name == ref {
			return c.GetVolume(cmd.Context(), v.ID)
		}
	}
	return nil, fmt.Errorf("no volume %q", ref)
}

func newVolumeRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm VOLUME [VOLUME...]",
		Short: "Remove volumes (by id or name) and their files",
		Long:  "Rm removes every volume given and prints the id of each one removed. A volume a sandbox mounts is refused: kill the sandbox first. It exits 1 if any could not be removed.",
		Args:  cobra.MinimumNArgs(1),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			failed := 0
			for _, ref := range args {
				v, err := resolveVolume(cmd, c, ref)
				if err == nil {
					var found bool
					if found, err = c.DestroyVolume(cmd.Context(), v.ID); err == nil && !found {
						err = fmt.Errorf("no volume %q", ref)
					}
				}
				if err != nil {
					fmt.Fprintf(os.Stderr, "hutch: %s\n", errorLine(err))
					failed++
					continue
				}
				fmt.Println(v.ID)
			}
			if failed > 0 {
				return exitError{code: 1}
			}
			return nil
		}),
	}
}

func newVolumePutCmd(g *globals) *cobra.Command {
	var uid, gid, mode int
	cmd := &cobra.Command{
		Use:   "put VOLUME LOCAL_FILE PATH",
		Short: "Write a local file (- for standard input) into a volume",
		Args:  cobra.ExactArgs(3),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			v, err := resolveVolume(cmd, c, args[0])
			if err != nil {
				return err
			}
			var r io.Reader = os.Stdin
			if args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			var o sdk.VolumeWriteOptions
			for _, p := range []struct {
				v   int
				dst **uint32
			}{{uid, &o.UID}, {gid, &o.GID}, {mode, &o.Mode}} {
				if p.v >= 0 {
					u := uint32(p.v)
					*p.dst = &u
				}
			}
			_, err = v.WriteFile(cmd.Context(), args[2], r, o)
			return err
		}),
	}
	cmd.Flags().IntVar(&uid, "uid", -1, "owner of the file, as sandboxes see it (default 0)")
	cmd.Flags().IntVar(&gid, "gid", -1, "group of the file (default 0)")
	cmd.Flags().IntVar(&mode, "mode", -1, "permission bits, e.g. 0644 (default 0644)")
	return cmd
}

func newVolumeGetCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "get VOLUME PATH LOCAL_FILE",
		Short: "Copy a file out of a volume (LOCAL_FILE - for standard output)",
		Args:  cobra.ExactArgs(3),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			v, err := resolveVolume(cmd, c, args[0])
			if err != nil {
				return err
			}
			rc, err := v.ReadFile(cmd.Context(), args[1])
			if err != nil {
				return err
			}
			defer rc.Close()
			var w io.Writer = os.Stdout
			if args[2] != "-" {
				f, err := os.Create(args[2])
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			_, err = io.Copy(w, rc)
			return err
		}),
	}
}

// parseVolumeMounts parses --volume NAME:/PATH flags.
func parseVolumeMounts(flags []string) ([]sdk.VolumeMount, error) {
	var out []sdk.VolumeMount
	for _, f := range flags {
		name, path, ok := strings.Cut(f, ":")
		if !ok || name == "" || !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("--volume %q: want NAME:/PATH", f)
		}
		out = append(out, sdk.VolumeMount{Name: name, Path: path})
	}
	return out, nil
}
