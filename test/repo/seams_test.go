package repo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

const mod = "github.com/hutch-sandbox/hutch/"

// TestImportDirection: dependencies point one way, cmd → server (protocol
// adapters) → sandbox (the model) → runtime (backends), and each seam of
// docs/design.md holds. Each row is a package and what it must never link,
// directly or not.
func TestImportDirection(t *testing.T) {
	daemon := []string{"internal/envd"} // and everything below it
	for _, c := range []struct {
		pkg, why string
		never    []string
		direct   bool // only the package's own imports
	}{
		{"internal/sandbox", "the lifecycle talks to envd through envdapi", daemon, false},
		{"internal/server", "the edge talks to envd through envdapi", daemon, false},
		{"internal/e2bapi", "the E2B adapter's types", daemon, false},
		{"sdk", "programs that import the SDK", daemon, false},
		{"internal/envdapi", "envd's contract", daemon, false},
		{"internal/server", "the manager is the only door to state", []string{"internal/store"}, true},
		{"internal/sandbox", "the core speaks Hutch, not a protocol", []string{"internal/e2bapi", "internal/server"}, false},
		{"internal/cluster", "the cluster speaks Hutch, not a protocol", []string{"internal/e2bapi", "internal/server"}, false},
		{"internal/sandbox", "the model knows no cluster", []string{"internal/cluster"}, false},
		{"internal/store", "the core speaks Hutch, not a protocol", []string{"internal/e2bapi", "internal/server", "internal/sandbox"}, false},
		{"internal/runtime", "backends know no lifecycle", []string{"internal/sandbox", "internal/server", "internal/e2bapi", "internal/store"}, false},
		{"internal/runtime/native", "backends know no lifecycle", []string{"internal/sandbox", "internal/server", "internal/e2bapi", "internal/store"}, false},
		{"internal/network", "the network knows no lifecycle", []string{"internal/sandbox", "internal/server", "internal/e2bapi", "internal/store"}, false},
		// The manager, the edge and the builder all count through it: it
		// names what they count, and reads what exists through a function
		// it is given (metrics.Census), never by importing them.
		// What the trail records is decided by the adapters; the trail
		// itself knows no protocol.
		{"internal/audit", "the audit trail speaks Hutch, not a protocol", []string{"internal/e2bapi", "internal/server", "internal/sandbox"}, false},
		{"internal/metrics", "metrics are a leaf", []string{"internal/sandbox", "internal/server", "internal/builder", "internal/serve", "internal/store", "internal/runtime", "internal/template", "internal/cluster"}, false},
	} {
		args := []string{"list", "-deps", mod + c.pkg}
		if c.direct {
			args = []string{"list", "-f", `{{join .Imports "\n"}}`, mod + c.pkg}
		}
		out, err := exec.Command("go", args...).Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, n := range c.never {
				if dep == mod+n || strings.HasPrefix(dep, mod+n+"/") {
					t.Errorf("%s links %s (%s)", c.pkg, dep, c.why)
				}
			}
		}
	}
}

// TestE2BFieldNamesStayInTheAdapter: a second protocol adapter must be
// addable without touching the core, so no JSON field name of E2B's API
// (the json tags of internal/e2bapi) appears as a string or a struct tag in
// the core's code: the model, its store, the runtimes, the network.
func TestE2BFieldNamesStayInTheAdapter(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	eachGoFile(t, filepath.Join(root, "internal/e2bapi"), func(f *ast.File, _ string) {
		ast.Inspect(f, func(n ast.Node) bool {
			field, ok := n.(*ast.Field)
			if !ok || field.Tag == nil {
				return true
			}
			tag, _ := strconv.Unquote(field.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
			// Only names of E2B's own coining (camelCase or snake_case):
			// "name", "path" or "code" are everyone's words.
			if strings.IndexFunc(name, unicode.IsUpper) > 0 || strings.Contains(name, "_") {
				names[name] = true
			}
			return true
		})
	})
	if !names["allowOut"] || !names["maskRequestHost"] || !names["envdAccessToken"] {
		t.Fatalf("found too few of E2B's field names in internal/e2bapi to check: %v", names)
	}
	for _, dir := range []string{"internal/sandbox", "internal/store", "internal/runtime", "internal/network", "internal/template", "internal/cluster"} {
		eachGoFile(t, filepath.Join(root, dir), func(f *ast.File, path string) {
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				// A tag `json:"allowOut"` or a literal "allowOut"; a
				// migration's SQL naming an old column layout is neither.
				if v := reflect.StructTag(s).Get("json"); v != "" {
					s, _, _ = strings.Cut(v, ",")
				}
				if names[s] && !ownFormat[filepath.Base(path)+" "+s] {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s names E2B's field %q: keep it in internal/e2bapi or internal/server", rel, s)
				}
				return true
			})
		})
	}
}

// ownFormat are Hutch's own file formats whose field happens to share a
// name with one of E2B's API, by file and name.
var ownFormat = map[string]bool{
	"store.go diskSizeMB": true, // internal/template: a template's meta.json, written by `hutch template build`
}

// eachGoFile parses every non-test Go file under dir.
func eachGoFile(t *testing.T, dir string, f func(*ast.File, string)) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		f(file, path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
