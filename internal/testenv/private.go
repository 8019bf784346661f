package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// sharedTemplates are the templates PrivateTemplates carries over: base,
// which sandboxes start from, and Hutch's own mcp-gateway, which a server
// would otherwise build.
var sharedTemplates = []string{"base", "mcp-gateway"}

// PrivateTemplates returns a template store of the test's own that holds
// the base and mcp-gateway templates of TemplatesDir: their name and
// build records copied, their layers hard links to the machine's files
// (no byte is copied; a layer's files are never changed in place, only
// read or removed). A test whose server writes to its store — snapshots,
// pauses and forks capture layers, the template API records builds, tags
// and removals, and it may do any of these at random, as a fuzzer does —
// runs on one, so the machine's store, which other tests and servers
// share, stays as it was. The store is removed when the test ends; it
// must be on the file system of TemplatesDir.
func PrivateTemplates(t testing.TB) string {
	t.Helper()
	src, dst := TemplatesDir(), filepath.Join(t.TempDir(), "templates")
	for _, d := range []string{"names", "builds", "layers"} {
		if err := os.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(rel string) []byte {
		b, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatalf("private template store: %v", err)
		}
		if err := os.WriteFile(filepath.Join(dst, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	layers := map[string]bool{}
	for _, name := range sharedTemplates {
		var n struct{ Tags map[string]string }
		if err := json.Unmarshal(copyFile(filepath.Join("names", name+".json")), &n); err != nil {
			t.Fatalf("private template store: names/%s.json: %v", name, err)
		}
		for _, id := range n.Tags {
			var b struct{ Layers []string }
			if err := json.Unmarshal(copyFile(filepath.Join("builds", id+".json")), &b); err != nil {
				t.Fatalf("private template store: builds/%s.json: %v", id, err)
			}
			for _, l := range b.Layers {
				layers[l] = true
			}
		}
	}
	for l := range layers {
		if out, err := exec.Command("cp", "-a", "--link", filepath.Join(src, "layers", l), filepath.Join(dst, "layers", l)).CombinedOutput(); err != nil {
			t.Fatalf("private template store: hard-linking layer %s: %v\n%s", l, err, out)
		}
	}
	// Sandboxes' uids must traverse to their layers.
	os.Chmod(filepath.Dir(dst), 0o711)
	os.Chmod(filepath.Dir(filepath.Dir(dst)), 0o711)
	return dst
}
