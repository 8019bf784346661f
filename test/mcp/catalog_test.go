package mcp

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/hutch-sandbox/hutch/internal/mcp/catalog"
	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestCatalogComplete: every server name the pinned E2B JS SDK's `mcp`
// type (McpServer) accepts is in Hutch's catalog, with the same fields,
// required where the SDK requires them.
func TestCatalogComplete(t *testing.T) {
	e2b := hutchtest.JSPackage(t, hutchtest.E2BJS)
	b, err := os.ReadFile(filepath.Join(e2b, "node_modules", "e2b", "dist", "index.d.ts"))
	if err != nil {
		t.Fatal(err)
	}
	dts := string(b)
	body := regexp.MustCompile(`(?s)\ninterface McpServer \{\n(.*?)\n\}`).FindStringSubmatch(dts)
	if body == nil {
		t.Fatal("the SDK's index.d.ts has no interface McpServer")
	}
	members := regexp.MustCompile(`(?m)^\s+(\w+)\?: (\w+);$`).FindAllStringSubmatch(body[1], -1)
	if len(members) < 200 {
		t.Fatalf("McpServer has %d members: the pattern no longer reads it", len(members))
	}
	c := catalog.Load()
	for _, m := range members {
		name, iface := m[1], m[2]
		e := c.Lookup(name)
		if e == nil {
			t.Errorf("the SDK names MCP server %q (%s); Hutch's catalog lacks it", name, iface)
			continue
		}
		if strings.Contains(dts, "\ninterface "+iface+" {}") {
			if len(e.Fields) > 0 {
				t.Errorf("%s: the SDK takes no fields, the catalog has %d", name, len(e.Fields))
			}
			continue
		}
		fields := regexp.MustCompile(`(?s)\ninterface ` + iface + ` \{\n(.*?)\n\}`).FindStringSubmatch(dts)
		if fields == nil {
			t.Errorf("%s: no interface %s in the SDK", name, iface)
			continue
		}
		var sdk []string
		for _, f := range regexp.MustCompile(`(?m)^  (\w+)(\??): `).FindAllStringSubmatch(fields[1], -1) {
			sdk = append(sdk, f[1])
			cf, ok := e.Fields[f[1]]
			switch {
			case !ok:
				t.Errorf("%s: the SDK's field %q is not in the catalog", name, f[1])
			case cf.Required != (f[2] == ""):
				t.Errorf("%s: field %q required %v in the catalog, %v in the SDK", name, f[1], cf.Required, f[2] == "")
			}
		}
		for f := range e.Fields {
			if !slices.Contains(sdk, f) {
				t.Errorf("%s: the catalog's field %q is not the SDK's", name, f)
			}
		}
	}
}

// TestCatalogImages: catalog servers run from their images, pulled from a
// registry on loopback through --mcp-registry-mirror (catalog.js): the
// official E2B JS SDK creates a sandbox with `mcp: {airtable: …, tavily: …}`,
// whose images the test builds from the reference server-everything; the
// official MCP client lists and calls their prefixed tools through Hutch's
// routing, each server sees its own key and not the other's; a server
// that exits at start is reported in /health and as tool errors while the
// others serve; a missing field, an unknown name and an image the mirror
// lacks fail the create.
func TestCatalogImages(t *testing.T) {
	testenv.RequireRoot(t, "hutch serve runs sandboxes")
	mcpTpl, err := template.Open(testenv.TemplatesDir()).Get("mcp-gateway")
	if err != nil {
		t.Fatalf("the mcp-gateway template is not built (scripts/setup.sh builds it): %v", err)
	}
	reg := ocitest.StartRegistry(t)
	img := everythingImage(t, mcpTpl)
	// The catalog's images of airtable, tavily and stripe, in the mirror
	// (stripe's catalog arguments, --tools=all, make server-everything
	// exit at start).
	for _, name := range []string{"airtable", "tavily", "stripe"} {
		ref, err := catalog.Mirror(catalog.Load().Lookup(name).Image, reg)
		if err != nil {
			t.Fatal(err)
		}
		ocitest.Push(t, ref, img)
	}
	js := hutchtest.JSPackage(t, jsDir)
	b := bin.Path(t)
	f := &fixture{bin: b, srv: hutchtest.StartServe(t, b, "--warm", "0", "--mcp-registry-mirror", reg), js: js, env: hutchtest.CleanEnv()}
	e2b := hutchtest.JSPackage(t, hutchtest.E2BJS)
	f.script(t, f.srv.SDKEnv(), "catalog.mjs", e2b)
}

// everythingImage is an image of the reference server-everything, as the
// mcp-gateway template installs it, with the host's node and the
// libraries it links: its entrypoint runs the server on stdio.
func everythingImage(t *testing.T, tpl *template.Template) v1.Image {
	t.Helper()
	pkg := ""
	for _, l := range tpl.LowerDirs() {
		p := filepath.Join(l, "usr/local/lib/node_modules/@modelcontextprotocol/server-everything")
		if _, err := os.Stat(p); err == nil {
			pkg = p
		}
	}
	if pkg == "" {
		t.Fatal("the mcp-gateway template has no server-everything")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal(err)
	}
	node, _ = filepath.EvalSymlinks(node)
	var files []ocitest.File
	add := func(host, in string) {
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, ocitest.File{Path: in, Mode: 0o755, Content: string(b)})
	}
	add(node, "usr/bin/node")
	out, err := exec.Command("ldd", node).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", node, err)
	}
	for _, m := range regexp.MustCompile(`(/\S+\.so[.\d]*)`).FindAllString(string(out), -1) {
		real, err := filepath.EvalSymlinks(m)
		if err != nil {
			t.Fatal(err)
		}
		add(real, strings.TrimPrefix(m, "/"))
	}
	system := ocitest.Layer(t, append(files, ocitest.File{Path: "tmp/", Mode: fs.ModeDir | 0o777 | fs.ModeSticky})...)
	files = nil
	err = filepath.WalkDir(pkg, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(pkg, p)
		in := filepath.Join("app", rel)
		switch {
		case d.IsDir():
			files = append(files, ocitest.File{Path: in + "/", Mode: fs.ModeDir | 0o755})
		case d.Type()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			files = append(files, ocitest.File{Path: in, Link: target})
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, ocitest.File{Path: in, Mode: 0o644, Content: string(b)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	app := ocitest.Layer(t, files...)
	return ocitest.Image(t, ocitest.ImageConfig{
		Entrypoint: []string{"node", "/app/dist/index.js"}, Cmd: []string{"stdio"},
		Env: []string{"PATH=/usr/bin:/bin", "FROM_IMAGE=yes"}, WorkingDir: "/app",
	}, system, app)
}
