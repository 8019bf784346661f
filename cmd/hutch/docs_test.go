package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestCLIReferenceIsCurrent regenerates the CLI reference and fails when
// docs/cli/ differs: every change to commands or flags must come with it.
func TestCLIReferenceIsCurrent(t *testing.T) {
	const committed = "../../docs/cli"
	dir := t.TempDir()
	if err := genDocs(dir); err != nil {
		t.Fatal(err)
	}
	want := readDocs(t, dir)
	got := readDocs(t, committed)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/cli/ is stale (-generated +committed); run: go run ./cmd/hutch gen-docs docs/cli\n%s", diff)
	}
}

// readDocs returns the markdown files of dir by name.
func readDocs(t *testing.T, dir string) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	out := map[string]string{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(n)] = string(b)
	}
	return out
}

// TestGenDocsIgnoresEnvironment: defaults taken from the environment do
// not leak into the reference.
func TestGenDocsIgnoresEnvironment(t *testing.T) {
	t.Setenv("HUTCH_DATA_DIR", "/from/the/environment")
	t.Setenv("HUTCH_API_KEY", "e2b_secret")
	dir := t.TempDir()
	if err := genDocs(dir); err != nil {
		t.Fatal(err)
	}
	for name, text := range readDocs(t, dir) {
		for _, leak := range []string{"/from/the/environment", "e2b_secret"} {
			if strings.Contains(text, leak) {
				t.Errorf("%s mentions %q", name, leak)
			}
		}
	}
}
