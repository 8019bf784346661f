package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hutch-sandbox/hutch/internal/store"
)

// withStore runs f with the control plane's database open.
func (g *globals) withStore(cmd *cobra.Command, f func(*store.Store) error) error {
	st, err := g.openStore(cmd)
	if err != nil {
		return err
	}
	defer st.Close()
	return f(st)
}

// openStore opens the control plane's database in the data directory.
func (g *globals) openStore(cmd *cobra.Command) (*store.Store, error) {
	if f := cmd.Flags().Lookup("api-url"); f != nil && f.Changed {
		// It would look as if the key went to that server; it goes to
		// this host's data dir (review 31, round 2).
		return nil, fmt.Errorf("%s works on this host's data dir (--data-dir %s), not through a server: --api-url does not apply (a remote server's keys: its console or /api-keys)", cmd.CommandPath(), g.dataDir)
	}
	if err := os.MkdirAll(g.dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	return store.Open(cmd.Context(), filepath.Join(g.dataDir, "hutch.db"))
}

func newKeysCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Manage API keys (e2b_… keys for the E2B SDKs and hutch serve)"}
	var name, role string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an API key and print it (it is shown only once; only its hash is stored)",
		Long: `Create makes an API key and prints it. It is shown only once: only its
hash is stored.

Every key runs sandboxes and sees only its own. A user key (the default)
also sees its own audit trail; an admin key (--role admin) also makes and
revokes keys through the API (/api-keys, the console) and reads every
key's audit trail.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := store.ParseRole(role)
			if err != nil {
				return fmt.Errorf("--role %q: want user or admin", role)
			}
			return g.withStore(cmd, func(st *store.Store) error {
				key, k, err := st.NewKey(cmd.Context(), name, r)
				if err != nil {
					return err
				}
				cliAudit(cmd, st, "key.create", map[string]any{"apiKeyID": k.ID, "role": string(r)})
				fmt.Println(key)
				fmt.Fprintf(os.Stderr, "created key %s (%s…)\n", k.ID, k.Prefix)
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "a name to recognise the key by")
	create.Flags().StringVar(&role, "role", string(store.RoleUser), "user, or admin: may also manage keys and read every key's audit trail")
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List API keys (never their secret part)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var keys []store.Key
			err := g.withStore(cmd, func(st *store.Store) (err error) {
				keys, err = st.ListKeys(cmd.Context())
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				type jsonKey struct {
					ID      string     `json:"id"`
					Name    string     `json:"name"`
					Prefix  string     `json:"prefix"`
					Created time.Time  `json:"created"`
					Revoked *time.Time `json:"revoked"`
					Role    string     `json:"role"`
				}
				out := []jsonKey{}
				for _, k := range keys {
					out = append(out, jsonKey{k.ID, k.Name, store.KeyPrefix + k.Prefix, k.Created, k.Revoked, string(k.Role)})
				}
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tPREFIX\tNAME\tROLE\tCREATED\tREVOKED")
			for _, k := range keys {
				revoked := "-"
				if k.Revoked != nil {
					revoked = k.Revoked.Format("2006-01-02 15:04")
				}
				fmt.Fprintf(w, "%s\t%s%s…\t%s\t%s\t%s\t%s\n", k.ID, store.KeyPrefix, k.Prefix, k.Name, k.Role, k.Created.Format("2006-01-02 15:04"), revoked)
			}
			return w.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	revoke := &cobra.Command{
		Use:   "revoke ID|PREFIX",
		Short: "Revoke an API key: requests with it are refused from then on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withStore(cmd, func(st *store.Store) error {
				if err := st.RevokeKey(cmd.Context(), args[0]); err != nil {
					return err
				}
				cliAudit(cmd, st, "key.revoke", map[string]any{"apiKey": args[0]})
				return nil
			})
		},
	}
	cmd.AddCommand(create, ls, revoke)
	return cmd
}

// cliAudit records in the audit trail what a local command did to the
// store directly (no API call, so no key): the operator's acts on the
// host. A failure to record is said, not fatal: the act is done.
func cliAudit(cmd *cobra.Command, st *store.Store, action string, detail map[string]any) {
	detail["via"] = "hutch " + cmd.Parent().Name() + " " + cmd.Name()
	b, _ := json.Marshal(detail)
	ev := store.Event{Time: time.Now(), Kind: "api", Action: action, Outcome: "ok", Detail: b}
	if err := st.AppendEvents(cmd.Context(), []store.Event{ev}); err != nil {
		fmt.Fprintf(os.Stderr, "warning: not recorded in the audit trail: %v\n", err)
	}
}
