package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newGenDocsCmd writes the CLI reference (docs/cli/) from the commands
// themselves; docs_test.go fails when the committed one is stale.
func newGenDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write the CLI reference as markdown, one file per command (go run ./cmd/hutch gen-docs docs/cli)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return genDocs(args[0])
		},
	}
}

// genDocs replaces the reference in dir with one generated from a command
// tree built without any environment, so that no local default (a data
// dir, a key) ends up in it.
func genDocs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "hutch*.md"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	root := newRootCmd(func(string) string { return "" })
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	// No "Auto generated on DATE" line: the output must not change
	// unless the commands do.
	var noDate func(*cobra.Command)
	noDate = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			noDate(sub)
		}
	}
	noDate(root)
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("generate docs: %w", err)
	}
	return nil
}
