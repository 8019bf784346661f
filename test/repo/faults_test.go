package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/fault"
)

// TestFaultPointsAreListed: every fault point of the code is named by a
// constant of package fault (no call of a point with a string of its own,
// which test/faults' loop over fault.Steps would miss), and every
// constant in fault.Steps has a point in the code (none listed that no
// code reaches, which the loop would test for nothing).
func TestFaultPointsAreListed(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{} // constant name → step
	used := map[string]bool{}     // steps with a point
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "test") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if filepath.Dir(rel) == "internal/fault" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "fault" {
					byName[n.Sel.Name] = ""
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "At" && sel.Sel.Name != "step") || len(n.Args) != 1 {
					return true
				}
				if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					t.Errorf("%s: a fault point named by the string %s, not a constant of package fault", fset.Position(n.Pos()), lit.Value)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The constants' values, from the package's own source.
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "internal/fault/fault.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, s := range g.Specs {
				for i, n := range s.(*ast.ValueSpec).Names {
					if _, ok := byName[n.Name]; ok {
						used[strings.Trim(s.(*ast.ValueSpec).Values[i].(*ast.BasicLit).Value, `"`)] = true
					}
				}
			}
		}
	}
	for _, s := range fault.Steps {
		if !used[s] {
			t.Errorf("fault point %q is in fault.Steps, and no code outside package fault names it", s)
		}
	}
	if !slices.Contains(fault.Steps, fault.CreateStarted) {
		t.Error("fault.Steps lacks create.started")
	}
}
