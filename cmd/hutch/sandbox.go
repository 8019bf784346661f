package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/cli/human"
	"github.com/hutch-sandbox/hutch/internal/cli/printable"
	"github.com/hutch-sandbox/hutch/sdk"
)

func newSandboxCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sbx"},
		Short:   "Manage the sandboxes of a hutch serve (create, ls, info, kill, timeout, pause, resume, metrics)",
		Long: `The sandbox commands manage sandboxes through the API of a hutch serve,
local or remote (see --api-url and --api-key). Their failures exit 1.`,
		Example: `  id=$(hutch sandbox create --metadata owner=ci --timeout 30m)
  hutch sandbox ls --metadata owner=ci
  hutch exec "$id" -- python3 -c 'print(6*7)'
  hutch sandbox kill "$id"`,
	}
	cmd.AddCommand(newSandboxCreateCmd(g), newSandboxLsCmd(g), newSandboxInfoCmd(g), newSandboxKillCmd(g),
		newSandboxTimeoutCmd(g), newSandboxPauseCmd(g), newSandboxResumeCmd(g), newSandboxMetricsCmd(g),
		newSandboxSnapshotCmd(g), newSandboxForkCmd(g))
	return cmd
}

func newSandboxCreateCmd(g *globals) *cobra.Command {
	var (
		opts       sdk.CreateOptions
		metadata   []string
		envs       []string
		noInternet bool
		asJSON     bool
		volumes    []string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Args:  cobra.NoArgs,
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			var err error
			if opts.Metadata, err = parsePairs("--metadata", metadata, false); err != nil {
				return err
			}
			if opts.Envs, err = parsePairs("--env", envs, true); err != nil {
				return err
			}
			if opts.Timeout < time.Second {
				return fmt.Errorf("--timeout %v: must be at least 1s", opts.Timeout)
			}
			if noInternet {
				opts.AllowInternetAccess = new(false)
			}
			if opts.Volumes, err = parseVolumeMounts(volumes); err != nil {
				return err
			}
			sbx, err := c.Create(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Println(sbx.ID)
				return nil
			}
			info, err := c.GetInfo(cmd.Context(), sbx.ID)
			if err != nil {
				return fmt.Errorf("sandbox %s was created, but describing it failed: %w", sbx.ID, err)
			}
			return printJSON(info)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&opts.Template, "template", "base", "template to create the sandbox from")
	f.StringVar(&opts.Runtime, "runtime", "", "runtime backend: native or gvisor (default: the template's, else the server's; docs/runtime.md)")
	f.DurationVar(&opts.Timeout, "timeout", 5*time.Minute, "lifetime, after which the sandbox is killed (at most 24h; change it with hutch sandbox timeout)")
	f.StringArrayVar(&metadata, "metadata", nil, "KEY=VALUE kept with the sandbox, for filtering (repeatable)")
	f.StringArrayVarP(&envs, "env", "e", nil, "KEY=VALUE in the environment of every command in the sandbox; KEY alone copies it from here (repeatable)")
	f.BoolVar(&noInternet, "no-internet", false, "give the sandbox no route out")
	f.StringArrayVar(&volumes, "volume", nil, "NAME:/PATH mounts the volume NAME at /PATH (repeatable; see hutch volume)")
	f.BoolVar(&asJSON, "json", false, "print the sandbox's description as JSON instead of its id")
	return cmd
}

// parsePairs parses KEY=VALUE flags into a map. With fromEnv, a bare KEY
// takes its value from this environment (and is left out if unset), as
// docker's -e does.
func parsePairs(flag string, pairs []string, fromEnv bool) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, p)
		}
		if !ok {
			if !fromEnv {
				return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, p)
			}
			if v, ok = os.LookupEnv(k); !ok {
				continue
			}
		}
		out[k] = v
	}
	return out, nil
}

func newSandboxLsCmd(g *globals) *cobra.Command {
	var (
		metadata      []string
		states        []string
		asJSON, quiet bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List sandboxes, newest first",
		Args:    cobra.NoArgs,
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			md, err := parsePairs("--metadata", metadata, false)
			if err != nil {
				return err
			}
			for _, s := range states {
				if s != sdk.StateRunning && s != sdk.StatePaused {
					return fmt.Errorf("--state %q: want running or paused", s)
				}
			}
			list := []sdk.SandboxInfo{}
			for info, err := range c.List(sdk.ListOptions{Metadata: md, States: states}).All(cmd.Context()) {
				if err != nil {
					return err
				}
				list = append(list, info)
			}
			switch {
			case asJSON:
				return printJSON(list)
			case quiet:
				for _, s := range list {
					fmt.Println(s.SandboxID)
				}
				return nil
			}
			now := time.Now()
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTEMPLATE\tSTATE\tSTARTED\tENDS\tCPUS\tMEMORY\tMETADATA")
			for _, s := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s ago\tin %s\t%d\t%s\t%s\n", printable.String(s.SandboxID), templateName(s), printable.String(s.State),
					human.Duration(now.Sub(s.StartedAt)), human.Duration(s.EndAt.Sub(now)),
					s.CPUCount, human.Bytes(int64(s.MemoryMB)<<20), formatPairs(s.Metadata))
			}
			return w.Flush()
		}),
	}
	f := cmd.Flags()
	f.StringArrayVar(&metadata, "metadata", nil, "keep sandboxes with this KEY=VALUE in their metadata (repeatable: all must match)")
	f.StringSliceVar(&states, "state", nil, "keep sandboxes in these states: running, paused (default: all)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only ids")
	return cmd
}

// formatPairs renders metadata as sorted k=v pairs, "-" when empty,
// printable: clients set metadata.
func formatPairs(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return printable.String(strings.Join(keys, ","))
}

func newSandboxInfoCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "info ID",
		Short:             "Describe a sandbox",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			info, err := c.GetInfo(cmd.Context(), args[0])
			if err != nil {
				return notFound(args[0], err)
			}
			if asJSON {
				return printJSON(info)
			}
			now := time.Now()
			internet := "allowed"
			if info.AllowInternetAccess != nil && !*info.AllowInternetAccess {
				internet = "none"
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "ID:\t%s\n", printable.String(info.SandboxID))
			if name := templateName(*info); name != printable.String(info.TemplateID) {
				fmt.Fprintf(w, "Template:\t%s (%s)\n", name, printable.String(info.TemplateID))
			} else {
				fmt.Fprintf(w, "Template:\t%s\n", name)
			}
			fmt.Fprintf(w, "State:\t%s\n", printable.String(info.State))
			fmt.Fprintf(w, "Started:\t%s (%s ago)\n", info.StartedAt.Local().Format(time.RFC3339), human.Duration(now.Sub(info.StartedAt)))
			fmt.Fprintf(w, "Ends:\t%s (in %s)\n", info.EndAt.Local().Format(time.RFC3339), human.Duration(info.EndAt.Sub(now)))
			fmt.Fprintf(w, "CPUs:\t%d\n", info.CPUCount)
			fmt.Fprintf(w, "Memory:\t%s\n", human.Bytes(int64(info.MemoryMB)<<20))
			if info.DiskSizeMB > 0 {
				fmt.Fprintf(w, "Disk:\t%s\n", human.Bytes(int64(info.DiskSizeMB)<<20))
			}
			fmt.Fprintf(w, "Internet:\t%s\n", internet)
			if n := info.Network; n != nil && (len(n.AllowOut) > 0 || len(n.DenyOut) > 0) {
				fmt.Fprintf(w, "Allow out:\t%s\n", printable.String(strings.Join(n.AllowOut, ",")))
				fmt.Fprintf(w, "Deny out:\t%s\n", printable.String(strings.Join(n.DenyOut, ",")))
			}
			fmt.Fprintf(w, "Envd:\t%s\n", printable.String(info.EnvdVersion))
			fmt.Fprintf(w, "Metadata:\t%s\n", formatPairs(info.Metadata))
			return w.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSandboxKillCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "kill ID [ID...]",
		Aliases:           []string{"rm"},
		Short:             "Kill sandboxes and remove everything they had",
		Long:              "Kill kills every sandbox given and prints the id of each one killed. It exits 1 if any could not be killed, with one line on standard error for each.",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, true),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			failed := 0
			for _, id := range args {
				if err := c.Kill(cmd.Context(), id); err != nil {
					fmt.Fprintf(os.Stderr, "hutch: %s\n", errorLine(explain(notFound(id, err), c.Config().APIURL)))
					failed++
					continue
				}
				fmt.Println(id)
			}
			if failed > 0 {
				return exitError{code: 1}
			}
			return nil
		}),
	}
}

func newSandboxTimeoutCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "timeout ID DURATION",
		Short:             "Set how long a sandbox has left to live, from now (e.g. 10m, 2h, or seconds)",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			d, err := parseTimeout(args[1])
			if err != nil {
				return err
			}
			return notFound(args[0], c.SetTimeout(cmd.Context(), args[0], d))
		}),
	}
}

// parseTimeout reads a Go duration ("10m", "1h30m") or a number of
// seconds, at least one second.
func parseTimeout(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.ParseUint(s, 10, 31)
		if nerr != nil {
			return 0, fmt.Errorf("duration %q: want e.g. 10m, 1h30m or a number of seconds", s)
		}
		d = time.Duration(n) * time.Second
	}
	if d < time.Second {
		return 0, fmt.Errorf("duration %q: must be at least 1s", s)
	}
	return d, nil
}

func newSandboxMetricsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "metrics ID",
		Short:             "Show a sandbox's resource use: CPU, memory and disk samples, oldest first",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			ms, err := c.GetMetrics(cmd.Context(), args[0], sdk.MetricsOptions{})
			if err != nil {
				return notFound(args[0], err)
			}
			if asJSON {
				if ms == nil {
					ms = []sdk.Metric{}
				}
				return printJSON(ms)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(w, "TIME\tCPU\tMEMORY USED / TOTAL\tDISK USED / TOTAL\t")
			for _, m := range ms {
				fmt.Fprintf(w, "%s\t%.1f%% of %d\t%s / %s\t%s / %s\t\n", m.Timestamp.Local().Format("15:04:05"), m.CPUUsedPct, m.CPUCount,
					human.Bytes(m.MemUsed), human.Bytes(m.MemTotal), human.Bytes(m.DiskUsed), human.Bytes(m.DiskTotal))
			}
			return w.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSandboxPauseCmd(g *globals) *cobra.Command {
	var filesystem bool
	cmd := &cobra.Command{
		Use:   "pause ID",
		Short: "Pause a sandbox until it is resumed: frozen in place, or with --filesystem its files only",
		Long: `Pause freezes every process of the sandbox in place: its memory, files,
tokens and metadata are kept, and it has no expiry while paused. With
--filesystem only its files are kept (in the template store): every process
stops, its memory and its slot under the server's caps are freed, and a
resume boots it again on its files. "hutch sandbox resume" (or the SDKs'
connect) resumes it. Pausing a paused sandbox says so and exits 0.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			paused, err := c.Pause(cmd.Context(), args[0], sdk.PauseOptions{Filesystem: filesystem})
			if err != nil {
				return notFound(args[0], err)
			}
			if !paused {
				fmt.Fprintf(os.Stderr, "hutch: sandbox %s is already paused\n", args[0])
			}
			fmt.Println(args[0])
			return nil
		}),
	}
	cmd.Flags().BoolVar(&filesystem, "filesystem", false, "keep only the files: stop every process and free its memory (E2B's keepMemory false)")
	return cmd
}

func newSandboxSnapshotCmd(g *globals) *cobra.Command {
	var (
		opts   sdk.SnapshotOptions
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox's files as a template; print the snapshot's id",
		Long: `Snapshot freezes the sandbox while its files are captured, then lets it run
on. The snapshot is a template: "hutch sandbox create --template <id or name>"
makes sandboxes from it, "hutch snapshot ls" lists and "hutch snapshot rm"
deletes snapshots.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			snap, err := c.CreateSnapshot(cmd.Context(), args[0], opts)
			if err != nil {
				return notFound(args[0], err)
			}
			if asJSON {
				return printJSON(snap)
			}
			fmt.Println(snap.ID)
			return nil
		}),
	}
	cmd.Flags().StringVar(&opts.Name, "name", "", "the snapshot's template name (default: snapshot-<random>)")
	cmd.Flags().DurationVar(&opts.TTL, "ttl", 0, "remove the snapshot this long after it is taken (default: the server's --snapshot-ttl)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSandboxForkCmd(g *globals) *cobra.Command {
	var (
		opts    sdk.ForkOptions
		timeout string
	)
	cmd := &cobra.Command{
		Use:   "fork ID",
		Short: "Make new sandboxes from a sandbox's files; print their ids",
		Long: `Fork freezes the sandbox while its files are captured (once), then lets it
run on with its id and expiry untouched, and makes --count sandboxes from
them, each with its own id and tokens, and prints their ids. When some
could not be made it says why the first failed, and exits 1.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			if opts.Count < 1 || opts.Count > 100 {
				return fmt.Errorf("--count %d: from 1 to 100", opts.Count)
			}
			var err error
			if opts.Timeout, err = parseTimeout(timeout); err != nil {
				return err
			}
			forks, err := c.Fork(cmd.Context(), args[0], opts)
			if err != nil {
				return notFound(args[0], err)
			}
			var failed []error
			for _, f := range forks {
				if f.Err != nil {
					failed = append(failed, f.Err)
					continue
				}
				fmt.Println(f.Sandbox.ID)
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d of %d forks failed, the first: %w", len(failed), len(forks), failed[0])
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&opts.Count, "count", 1, "how many forks (1-100)")
	cmd.Flags().StringVar(&timeout, "timeout", "5m", "how long each fork lives (e.g. 10m, 2h, or seconds)")
	return cmd
}

func newSandboxResumeCmd(g *globals) *cobra.Command {
	var (
		timeout string
		reboot  bool
	)
	cmd := &cobra.Command{
		Use:               "resume ID",
		Short:             "Resume a paused sandbox (a running one just lives on)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeSandboxIDs(g, false),
		RunE: g.remote(func(cmd *cobra.Command, args []string, c *sdk.Client) error {
			d, err := parseTimeout(timeout)
			if err != nil {
				return err
			}
			if _, err := c.Connect(cmd.Context(), args[0], sdk.ConnectOptions{Timeout: d, Reboot: reboot}); err != nil {
				return notFound(args[0], err)
			}
			fmt.Println(args[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&timeout, "timeout", "5m", "how long it lives once resumed (e.g. 10m, 2h, or seconds)")
	cmd.Flags().BoolVar(&reboot, "reboot", false, "boot it again on its files, even if it kept its memory (E2B's onResume 'reboot')")
	return cmd
}
