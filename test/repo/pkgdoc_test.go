// Package repo tests the repository itself rather than a program: what
// every package must have, and what only tests may import.
package repo

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEveryPackageHasADocComment: a newcomer reads a package's doc comment
// first; every package of the module has one, in one of its files.
func TestEveryPackageHasADocComment(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{} // directory → has a doc comment
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "gen") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		documented[dir] = documented[dir] || f.Doc != nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for dir, ok := range documented {
		if !ok {
			rel, _ := filepath.Rel(root, dir)
			missing = append(missing, rel)
		}
	}
	slices.Sort(missing)
	for _, dir := range missing {
		t.Errorf("package %s has no doc comment (// Package ... before its package clause)", dir)
	}
	if len(documented) < 20 {
		t.Errorf("found only %d packages under %s", len(documented), root)
	}
}
