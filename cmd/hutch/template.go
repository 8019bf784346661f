package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/human"
	"github.com/hutch-sandbox/hutch/internal/runtime/backends"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/template/dockerfile"
	"github.com/hutch-sandbox/hutch/sdk"
)

func newTemplateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build, import, list and remove templates"}
	cmd.AddCommand(newTemplateBuildCmd(g), newTemplateImportCmd(g), newTemplateLsCmd(g),
		newTemplateInspectCmd(g), newTemplateRmCmd(g), newTemplateTagCmd(g))
	return cmd
}

func newTemplateBuildCmd(g *globals) *cobra.Command {
	var opts template.BuildOptions
	var dockerfile string
	var buildArgs map[string]string
	var tags []string
	build := &cobra.Command{
		Use:   "build NAME[:TAG] [-f Dockerfile [CONTEXT]]",
		Short: "Build a template: from a Dockerfile through hutch serve, or one of Hutch's own from its recipe",
		Long: `Build a template.

With -f, the Dockerfile is built by the hutch serve at --api-url, through the
same template API E2B's Template SDK uses: every RUN runs in a sandbox, COPY
takes files from CONTEXT (default: the Dockerfile's directory), and each step's
layer is cached. The subset of Dockerfile it takes: FROM (an image, or the name
of a Hutch template), RUN, COPY, ADD of local files, ENV, ARG, WORKDIR, USER,
CMD and ENTRYPOINT (the start command), HEALTHCHECK (the ready command);
LABEL, EXPOSE, VOLUME, MAINTAINER and STOPSIGNAL are ignored with a warning;
anything else is refused with its line number.

Without -f, NAME is one of Hutch's own templates (base, mcp-gateway), built on
this host from its embedded recipe into the template store; an unchanged
recipe does nothing.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dockerfile == "" {
				if len(args) > 1 {
					return fmt.Errorf("a build context is only for -f Dockerfile")
				}
				opts.Progress = os.Stderr
				t, _, err := template.Open(g.templates).Build(cmd.Context(), args[0], opts)
				if err != nil {
					return err
				}
				fmt.Println(t.ID)
				return nil
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			contextDir := filepath.Dir(dockerfile)
			if len(args) > 1 {
				contextDir = args[1]
			}
			return explain(buildDockerfile(cmd.Context(), c, args[0], tags, dockerfile, contextDir, buildArgs), c.Config().APIURL)
		},
	}
	f := build.Flags()
	f.StringVarP(&dockerfile, "file", "f", "", "Dockerfile to build, through hutch serve")
	f.StringToStringVar(&buildArgs, "build-arg", nil, "ARG value, NAME=VALUE (repeatable)")
	f.StringSliceVar(&tags, "tag", nil, "more tags for the build (repeatable)")
	f.StringVar(&opts.Mirror, "mirror", "", "Debian mirror URL for a recipe (default: the host's apt mirror)")
	f.StringVar(&opts.CacheDir, "cache", g.envOr("HUTCH_CACHE", template.DefaultCacheDir), "download cache directory for a recipe")
	f.BoolVar(&opts.Force, "force", false, "rebuild even if nothing changed")
	g.addRemoteFlags(f)
	return build
}

// buildDockerfile builds template ref from a Dockerfile through the
// server, printing the build's log to stderr and the build id to stdout.
func buildDockerfile(ctx context.Context, c *sdk.Client, ref string, tags []string, path, contextDir string, buildArgs map[string]string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	plan, err := dockerfile.Parse(f, buildArgs)
	f.Close()
	if err != nil {
		return err
	}
	for _, w := range plan.Warnings {
		fmt.Fprintln(os.Stderr, "warning:", w)
	}
	out, err := os.MkdirTemp("", "hutch-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(out)
	bundle, err := dockerfile.Pack(contextDir, plan, out)
	if err != nil {
		return err
	}
	b := sdk.TemplateBuild{Name: ref, Tags: tags, StartCmd: plan.StartCmd, ReadyCmd: plan.ReadyCmd, Files: map[string]string{},
		OnLog: func(l sdk.BuildLog) { fmt.Fprintln(os.Stderr, l.Message) }}
	for _, s := range bundle.Steps {
		b.Steps = append(b.Steps, sdk.TemplateStep{Type: s.Type, Args: s.Args, Force: s.Force, FilesHash: s.FilesHash})
	}
	for _, a := range bundle.Archives {
		b.Files[a.Hash] = a.Path
	}
	// FROM names a Hutch template when one has that name, else an image.
	isTemplate := false
	if name, _, err := template.ParseRef(plan.From); err == nil && name != "" {
		if isTemplate, err = c.TemplateExists(ctx, plan.From); err != nil {
			return err
		}
	}
	if isTemplate {
		b.FromTemplate = plan.From
	} else {
		b.FromImage = plan.From
	}
	built, err := c.BuildTemplate(ctx, b)
	if err != nil {
		return err
	}
	fmt.Println(built.BuildID)
	return nil
}

func newTemplateImportCmd(g *globals) *cobra.Command {
	var opts template.ImportOptions
	var user, workdir, startCmd, readyCmd, backend string
	c := &cobra.Command{
		Use:   "import NAME[:TAG] SOURCE",
		Short: "Make a template from an OCI image: a registry reference, a `docker save` archive or an OCI layout directory",
		Long: `Make a template from an OCI image. SOURCE is a registry reference
(docker.io/library/python:3.12, localhost:5000/app:1, ghcr.io/o/i@sha256:...),
the path of an archive ` + "`docker save`" + ` wrote, or an OCI image layout directory.
Registries on loopback are reached over plain HTTP, as Docker does. Layers
the store has already are not fetched again. The image's Env, WorkingDir,
User and Entrypoint/Cmd become the template's defaults. No Docker daemon is
used.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, tag, err := template.ParseRef(args[0])
			if err != nil {
				return err
			}
			opts.Tags = []string{tag}
			opts.Progress = os.Stderr
			if opts.Password == "" {
				opts.Password = os.Getenv("HUTCH_REGISTRY_PASSWORD")
			}
			opts.Config = func(c *template.Config) {
				if user != "" {
					c.DefaultUser = user
				}
				if workdir != "" {
					c.DefaultWorkdir = workdir
				}
				if startCmd != "" {
					c.StartCmd = startCmd
				}
				if readyCmd != "" {
					c.ReadyCmd = readyCmd
				}
				c.Runtime = backend
			}
			if backend != "" && !slices.Contains(backends.Names, backend) {
				return fmt.Errorf("--runtime %q: want one of %v", backend, backends.Names)
			}
			t, err := template.Open(g.templates).Import(cmd.Context(), name, args[1], opts)
			if err != nil {
				return err
			}
			fmt.Println(t.ID)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&opts.Username, "username", "", "registry user name")
	f.StringVar(&opts.Password, "password", "", "registry password (or env HUTCH_REGISTRY_PASSWORD)")
	f.BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP to a registry that is not on loopback")
	f.StringVar(&opts.Platform, "platform", "", "os/arch of a multi-platform image (default: this host's)")
	f.StringVar(&user, "user", "", "default user of the template's sandboxes (default: the image's, or root)")
	f.StringVar(&workdir, "workdir", "", "default working directory (default: the image's, or /)")
	f.StringVar(&startCmd, "start-cmd", "", "command every sandbox starts in the background")
	f.StringVar(&readyCmd, "ready-cmd", "", "command that must succeed before a sandbox is handed out")
	f.StringVar(&backend, "runtime", "", "runtime backend every sandbox of the template runs on: native or gvisor (default: the server's)")
	return c
}

// templateUsers returns, by template build id, the sandboxes of this data
// dir that use it.
func templateUsers(ctx context.Context, g *globals) map[string][]string {
	out := map[string][]string{}
	rt, err := g.runtime()
	if err != nil {
		return out
	}
	sts, err := rt.List(ctx)
	if err != nil {
		return out
	}
	for _, st := range sts {
		if st.TemplateID != "" {
			out[st.TemplateID] = append(out[st.TemplateID], st.ID)
		}
	}
	return out
}

func newTemplateLsCmd(g *globals) *cobra.Command {
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List templates: tags, layers, disk use (own and shared) and sandboxes using each",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s := template.Open(g.templates)
			ts, err := s.List()
			if err != nil {
				return err
			}
			usage, err := s.Usage()
			if err != nil {
				return err
			}
			users := templateUsers(cmd.Context(), g)
			if asJSON {
				type jsonTemplate struct {
					template.Config
					ID        string   `json:"id"`
					Tags      []string `json:"tags"`
					Layers    []string `json:"layers"`
					OwnBytes  int64    `json:"ownBytes"`
					Shared    int64    `json:"sharedBytes"`
					Sandboxes []string `json:"sandboxes"`
				}
				out := []jsonTemplate{}
				for _, t := range ts {
					u := usage[t.Name]
					out = append(out, jsonTemplate{t.Config, t.ID, t.Tags, t.Layers, u.Own, u.Shared, orNone(users[t.ID])})
				}
				return printJSON(out)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tTAGS\tBUILD\tLAYERS\tOWN\tSHARED\tSANDBOXES\tBUILT\tSOURCE")
			for _, t := range ts {
				u := usage[t.Name]
				fmt.Fprintf(w, "%s\t%s\t%.8s\t%d\t%s\t%s\t%d\t%s\t%s\n", t.Name, strings.Join(t.Tags, ","), t.ID, len(t.Layers),
					human.Bytes(u.Own), human.Bytes(u.Shared), len(users[t.ID]), t.Built.Local().Format("2006-01-02 15:04"), t.Source)
			}
			return w.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return ls
}

func orNone(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func newTemplateInspectCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME[:TAG]|BUILD",
		Short: "Show a template build: its config, layers with their sizes, and the sandboxes using it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s := template.Open(g.templates)
			t, err := s.Get(args[0])
			if err != nil {
				return err
			}
			type layer struct {
				template.Layer
				Dir string `json:"dir"`
			}
			out := struct {
				*template.Template
				Tags      []string `json:"tags"`
				Layers    []layer  `json:"layers"`
				Sandboxes []string `json:"sandboxes"`
			}{Template: t, Tags: orNone(t.Tags), Sandboxes: orNone(templateUsers(cmd.Context(), g)[t.ID])}
			dirs := t.LowerDirs()
			for i, id := range t.Layers {
				l, err := s.Layer(id)
				if err != nil {
					return err
				}
				out.Layers = append(out.Layers, layer{*l, dirs[i]})
			}
			return printJSON(out)
		},
	}
}

func newTemplateRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME[:TAG]|BUILD...",
		Short: "Remove templates (a name with all its tags, one tag, or one build); frees the layers nothing else holds",
		Long: `Remove templates: NAME removes the name with every tag and build,
NAME:TAG one tag (and its build, if no other tag points at it), BUILD one
build. A template a sandbox uses is not removed. Layers no remaining
template uses are deleted, but for those the build cache holds, which stay
up to a day (as Docker's build cache does) so that a rebuild need not run
their steps again.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s := template.Open(g.templates)
			users := templateUsers(cmd.Context(), g)
			for _, ref := range args {
				if err := s.Remove(ref, func(id string) []string { return users[id] }); err != nil {
					return err
				}
				fmt.Println(ref)
			}
			return nil
		},
	}
}

func newTemplateTagCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "tag NAME[:TAG]|BUILD TAG...",
		Short: "Point more tags of a template's name at one of its builds",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := template.Open(g.templates).Tag(args[0], args[1:]...)
			if err != nil {
				return err
			}
			fmt.Printf("%s: %s\n", t.ID, strings.Join(t.Tags, ", "))
			return nil
		},
	}
}
