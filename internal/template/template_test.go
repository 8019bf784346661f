package template

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

func TestMirrorIn(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"deb822", "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n", "http://mirror.example/debian"},
		{"deb822 security only", "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n", ""},
		{"one-line", "# comment\ndeb http://mirror.example/debian bookworm main\n", "http://mirror.example/debian"},
		{"one-line with options", "deb [arch=amd64 signed-by=/k.gpg] http://m.example/d bookworm main\n", "http://m.example/d"},
		{"other suite", "deb http://m.example/d bullseye main\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "sources")
			os.WriteFile(p, []byte(tc.content), 0o644)
			if got := mirrorIn(p); got != tc.want {
				t.Errorf("mirrorIn = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStoreGetList(t *testing.T) {
	s := Open(t.TempDir())
	if _, err := s.Get("base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get of an unbuilt template = %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"", "../etc", "a/b", "Base", ".hidden"} {
		if _, err := s.Get(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Get(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	dir := filepath.Join(s.Dir(), "mini")
	os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755)
	os.WriteFile(filepath.Join(dir, "template.json"), []byte(`{"defaultUser":"user","recipeHash":"abc"}`), 0o644)
	tpl, err := s.Get("mini")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Name != "mini" || tpl.DefaultUser != "user" || tpl.RootFS != filepath.Join(dir, "rootfs") {
		t.Errorf("Get = %+v", tpl)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Name != "mini" {
		t.Errorf("List = %v, %v; want [mini]", list, err)
	}
}

func TestBuildUnknownRecipe(t *testing.T) {
	_, _, err := Open(t.TempDir()).Build(t.Context(), "no-such-recipe", BuildOptions{})
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Build of an unknown recipe = %v, want ErrNotFound", err)
	}
}

func TestBuildHash(t *testing.T) {
	base := &recipe{name: "base", script: []byte("#!/bin/sh\ndebootstrap\n"), defaultUser: "user", defaultWorkdir: "/home/user"}
	// A template built from nothing hashes as it always has: its recipe,
	// default user and workdir, whatever else is passed.
	legacy := sha256.Sum256([]byte("#!/bin/sh\ndebootstrap\n\x00user\x00/home/user"))
	if got := buildHash(base, &Config{RecipeHash: "x"}, "y"); got != hex.EncodeToString(legacy[:]) {
		t.Errorf("base hash = %s, want the recipe-only hash %x", got, legacy)
	}

	gw := &recipe{name: "mcp-gateway", script: []byte("#!/bin/sh\nnpm install\n"), defaultUser: "user", defaultWorkdir: "/home/user", from: "base", hutch: "/usr/local/bin/mcp-gateway"}
	built := time.Date(2026, 11, 22, 20, 12, 50, 215501188, time.UTC)
	from := &Config{Name: "base", RecipeHash: "8249fd00", Built: built}
	ref := buildHash(gw, from, "binsum")
	tests := []struct {
		name    string
		edit    func(r *recipe, from *Config, sum *string)
		rebuild bool
	}{
		{"nothing changed", func(*recipe, *Config, *string) {}, false},
		{"same base build, time in another zone", func(_ *recipe, f *Config, _ *string) { f.Built = built.In(time.FixedZone("x", 3600)) }, false},
		{"recipe changed", func(r *recipe, _ *Config, _ *string) { r.script = append(r.script, '#') }, true},
		{"default user changed", func(r *recipe, _ *Config, _ *string) { r.defaultUser = "root" }, true},
		{"base recipe changed", func(_ *recipe, f *Config, _ *string) { f.RecipeHash = "0000" }, true},
		{"base rebuilt from the same recipe", func(_ *recipe, f *Config, _ *string) { f.Built = built.Add(time.Nanosecond) }, true},
		{"base missing", func(_ *recipe, f *Config, _ *string) { *f = Config{} }, true},
		{"hutch binary changed", func(_ *recipe, _ *Config, s *string) { *s = "othersum" }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, f, sum := *gw, *from, "binsum"
			r.script = append([]byte(nil), gw.script...)
			tc.edit(&r, &f, &sum)
			got := buildHash(&r, &f, sum)
			if (got != ref) != tc.rebuild {
				t.Errorf("hash changed = %v, want %v", got != ref, tc.rebuild)
			}
		})
	}
}

func TestRecipes(t *testing.T) {
	for _, name := range []string{"base", "mcp-gateway"} {
		r, err := lookupRecipe(name)
		if err != nil {
			t.Fatal(err)
		}
		if r.defaultUser != "user" || r.defaultWorkdir != "/home/user" {
			t.Errorf("%s: default user %q, workdir %q; want user, /home/user", name, r.defaultUser, r.defaultWorkdir)
		}
	}
	if r, _ := lookupRecipe("mcp-gateway"); r.from != "base" || r.hutch != "/usr/local/bin/mcp-gateway" {
		t.Errorf("mcp-gateway: from %q, hutch %q; want base, /usr/local/bin/mcp-gateway", r.from, r.hutch)
	}
	if r, _ := lookupRecipe("base"); r.from != "" || r.hutch != "" {
		t.Errorf("base: from %q, hutch %q; want neither", r.from, r.hutch)
	}
	_, err := lookupRecipe("nope")
	if err == nil || !strings.Contains(err.Error(), "base, mcp-gateway") {
		t.Errorf("unknown recipe error = %v, want it to list base, mcp-gateway", err)
	}
}

// TestBuildDerived runs Build's decisions for mcp-gateway against a store
// of fake templates, with the recipes replaced by a stub that records them.
func TestBuildDerived(t *testing.T) {
	store := Open(t.TempDir())
	hutch := filepath.Join(t.TempDir(), "hutch")
	os.WriteFile(hutch, []byte("hutch v1"), 0o755)
	var ran []string
	orig := runRecipe
	t.Cleanup(func() { runRecipe = orig })
	runRecipe = func(cmd *exec.Cmd) error {
		env := map[string]string{}
		for _, kv := range cmd.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(filepath.Dir(env["ROOTFS"])), "."), "-build-")
		ran = append(ran, name)
		if !filepath.IsAbs(env["TEMPLATES"]) || env["CACHE"] == "" || env["MIRROR"] == "" {
			t.Errorf("%s: recipe env TEMPLATES=%q CACHE=%q MIRROR=%q", name, env["TEMPLATES"], env["CACHE"], env["MIRROR"])
		}
		if name == "mcp-gateway" {
			want, _ := os.ReadFile(hutch)
			if got, err := os.ReadFile(env["HUTCH_BINARY"]); err != nil || !bytes.Equal(got, want) {
				t.Errorf("HUTCH_BINARY %q = %q, %v; want a copy of %s", env["HUTCH_BINARY"], got, err, hutch)
			}
			if _, err := os.Stat(filepath.Join(env["TEMPLATES"], "base", "rootfs")); err != nil {
				t.Errorf("mcp-gateway built before base: %v", err)
			}
		}
		if err := os.MkdirAll(filepath.Join(env["ROOTFS"], "usr/local/bin"), 0o755); err != nil {
			return err
		}
		if name == "mcp-gateway" {
			return exec.Command("cp", env["HUTCH_BINARY"], filepath.Join(env["ROOTFS"], "usr/local/bin/mcp-gateway")).Run()
		}
		return nil
	}
	opts := BuildOptions{Mirror: "http://mirror.invalid/debian", CacheDir: t.TempDir(), Hutch: hutch}
	edit := func(name string, f func(*Config)) func() {
		return func() {
			tpl, err := store.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			f(&tpl.Config)
			b, _ := json.Marshal(tpl.Config)
			os.WriteFile(filepath.Join(tpl.Dir, "template.json"), b, 0o644)
		}
	}
	steps := []struct {
		name  string
		setup func()
		force bool
		want  []string // recipes run, in order
	}{
		{"base missing: built first", nil, false, []string{"base", "mcp-gateway"}},
		{"nothing changed", nil, false, nil},
		{"hutch binary changed", func() { os.WriteFile(hutch, []byte("hutch v2"), 0o755) }, false, []string{"mcp-gateway"}},
		{"nothing changed again", nil, false, nil},
		{"base rebuilt", func() {
			if _, _, err := store.Build(t.Context(), "base", BuildOptions{Mirror: opts.Mirror, CacheDir: opts.CacheDir, Force: true}); err != nil {
				t.Fatal(err)
			}
			ran = nil
		}, false, []string{"mcp-gateway"}},
		{"base recipe changed", edit("base", func(c *Config) { c.RecipeHash = "old" }), false, []string{"base", "mcp-gateway"}},
		{"mcp-gateway recipe changed", edit("mcp-gateway", func(c *Config) { c.RecipeHash = "old" }), false, []string{"mcp-gateway"}},
		{"its copy of hutch changed in place", func() {
			tpl, _ := store.Get("mcp-gateway")
			os.WriteFile(filepath.Join(tpl.RootFS, "usr/local/bin/mcp-gateway"), []byte("patched"), 0o755)
		}, false, []string{"mcp-gateway"}},
		{"forced: base is not", nil, true, []string{"mcp-gateway"}},
		{"nothing changed at last", nil, false, nil},
	}
	for _, st := range steps {
		ran = nil
		if st.setup != nil {
			st.setup()
		}
		o := opts
		o.Force = st.force
		var log bytes.Buffer
		o.Progress = &log
		tpl, built, err := store.Build(t.Context(), "mcp-gateway", o)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !slices.Equal(ran, st.want) || built != (len(st.want) > 0) {
			t.Errorf("%s: ran %v, built %v; want %v", st.name, ran, built, st.want)
		}
		if st.want == nil && !strings.Contains(log.String(), "template mcp-gateway is up to date") {
			t.Errorf("%s: log %q does not say up to date", st.name, log.String())
		}
		base, _ := store.Get("base")
		sum := sha256.Sum256(must(os.ReadFile(hutch)))
		if tpl.DefaultUser != "user" || tpl.HutchSHA256 != hex.EncodeToString(sum[:]) ||
			tpl.From == nil || tpl.From.Name != "base" || tpl.From.RecipeHash != base.RecipeHash || !tpl.From.Built.Equal(base.Built) {
			t.Errorf("%s: mcp-gateway config %+v (from %+v), base %+v", st.name, tpl.Config, tpl.From, base.Config)
		}
		if ents, _ := os.ReadDir(tpl.Dir); len(ents) != 2 {
			t.Errorf("%s: %s holds %v, want rootfs and template.json only", st.name, tpl.Dir, ents)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// mcpServers are the npm packages of the mcp-gateway template and how each
// is started over stdio.
var mcpServers = []struct{ pkg, cmd string }{
	{"server-filesystem", "mcp-server-filesystem /tmp"},
	{"server-memory", "mcp-server-memory"},
	{"server-everything", "mcp-server-everything stdio"},
	{"server-sequential-thinking", "mcp-server-sequential-thinking"},
}

// TestMCPGatewayTemplate checks the mcp-gateway template that
// `hutch template build mcp-gateway` made in the store (HUTCH_TEMPLATES or
// the default; scripts/setup.sh builds it): built from this tree's recipe
// on the store's base, carrying the hutch binary (HUTCH_BINARY, else
// /usr/local/bin/hutch) byte for byte, and its four MCP servers answering
// initialize without a network in a read-only view of the root.
func TestMCPGatewayTemplate(t *testing.T) {
	testenv.RequireRoot(t, "the template is root-owned and the servers run in a chroot")
	dir := testenv.TemplatesDir()
	store := Open(dir)
	tpl, err := store.Get("mcp-gateway")
	if errors.Is(err, errdefs.ErrNotFound) {
		t.Skipf("mcp-gateway is not built in %s (scripts/setup.sh builds it)", dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	base, err := store.Get("base")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := lookupRecipe("mcp-gateway")
	if want := buildHash(r, &base.Config, tpl.HutchSHA256); tpl.RecipeHash != want {
		t.Errorf("mcp-gateway is out of date (recorded hash %.12s, this tree's recipe on the store's base gives %.12s, from %+v): run hutch template build mcp-gateway", tpl.RecipeHash, want, tpl.From)
	}
	if tpl.DefaultUser != "user" || tpl.DefaultWorkdir != "/home/user" {
		t.Errorf("default user %q, workdir %q; want user, /home/user", tpl.DefaultUser, tpl.DefaultWorkdir)
	}

	root := tpl.RootFS
	gw := filepath.Join(root, "usr/local/bin/mcp-gateway")
	if got := fileSHA256(t, gw); got != tpl.HutchSHA256 {
		t.Errorf("%s has sha256 %s, template.json records %s", gw, got, tpl.HutchSHA256)
	}
	hutch := os.Getenv("HUTCH_BINARY")
	if hutch == "" {
		hutch = "/usr/local/bin/hutch"
	}
	if _, err := os.Stat(hutch); err != nil {
		t.Logf("no hutch binary at %s to compare with: %v", hutch, err)
	} else if got, want := fileSHA256(t, gw), fileSHA256(t, hutch); got != want {
		t.Errorf("%s (sha256 %.12s) is not %s (sha256 %.12s): rebuild with that binary (hutch template build mcp-gateway) or set HUTCH_BINARY", gw, got, hutch, want)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{"usr/local/bin/mcp-gateway", 0o755}, {"etc/mcp-gateway", os.ModeDir | 0o755}} {
		fi, err := os.Lstat(filepath.Join(root, f.path))
		if err != nil {
			t.Error(err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != f.mode || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("/%s: mode %v, owner %d:%d; want %v, 0:0", f.path, fi.Mode(), st.Uid, st.Gid, f.mode)
		}
	}

	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hutch-test","version":"1"}}}`
	view := t.TempDir()
	for _, s := range mcpServers {
		t.Run(s.pkg, func(t *testing.T) {
			var pkg struct{ Version string }
			b, err := os.ReadFile(filepath.Join(root, "usr/local/lib/node_modules/@modelcontextprotocol", s.pkg, "package.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &pkg); err != nil || pkg.Version != "2026.8.31" {
				t.Errorf("@modelcontextprotocol/%s version %q (%v), want 2026.8.31", s.pkg, pkg.Version, err)
			}
			// The store's tree must not be written: mount it read-only in a
			// mount namespace of its own, without a network.
			cmd := exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sh", "-euc", `
				mount --bind "$ROOT" "$VIEW"
				mount -o remount,bind,ro "$VIEW"
				mount -t proc proc "$VIEW/proc"
				mount --rbind /dev "$VIEW/dev"
				mount -t tmpfs tmpfs "$VIEW/tmp"
				echo "$INIT" | chroot "$VIEW" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root timeout 20 $SERVER | head -n 1`)
			cmd.Env = append(os.Environ(), "ROOT="+root, "VIEW="+view, "INIT="+init, "SERVER="+s.cmd)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var resp struct {
				ID     int `json:"id"`
				Result struct {
					ProtocolVersion string `json:"protocolVersion"`
					ServerInfo      struct{ Name string }
				}
			}
			if err != nil || json.Unmarshal(out, &resp) != nil || resp.ID != 1 || resp.Result.ProtocolVersion == "" {
				t.Fatalf("%s: initialize answered %q (%v; stderr %q)", s.cmd, out, err, stderr.String())
			}
			t.Logf("%s: %s, protocol %s", s.cmd, resp.Result.ServerInfo.Name, resp.Result.ProtocolVersion)
		})
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestRemoveRetired(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	for _, d := range []string{".tpl-old-1/rootfs", ".tpl-old-2/rootfs", ".other-old-3/rootfs", "tpl/rootfs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A retired tree a mount refers to stays: bind one into a private
	// mount namespace of a process that outlives the check.
	if os.Geteuid() == 0 {
		held := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
			"mount --bind "+filepath.Join(dir, ".tpl-old-2", "rootfs")+" "+filepath.Join(dir, ".tpl-old-2", "rootfs")+" && echo ready && sleep 30")
		out, _ := held.StdoutPipe()
		if err := held.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { held.Process.Kill(); held.Wait() }()
		buf := make([]byte, 6)
		if _, err := io.ReadFull(out, buf); err != nil {
			t.Fatal(err)
		}
	}
	n := s.removeRetired("tpl")
	_, err1 := os.Stat(filepath.Join(dir, ".tpl-old-1"))
	_, err2 := os.Stat(filepath.Join(dir, ".tpl-old-2"))
	_, errOther := os.Stat(filepath.Join(dir, ".other-old-3"))
	_, errCur := os.Stat(filepath.Join(dir, "tpl"))
	if !os.IsNotExist(err1) || errOther != nil || errCur != nil {
		t.Errorf("removed %d: old-1 %v, other %v, current %v", n, err1, errOther, errCur)
	}
	if os.Geteuid() == 0 && (err2 != nil || n != 1) {
		t.Errorf("a mounted retired tree was removed (%v), or %d removed", err2, n)
	}
}

// TestStale: a template built from another recipe than the binary's (the
// base template before it had python and pip, say) is stale, and so is one
// built on another build of its base; the hutch binary it carries is not
// compared.
func TestStale(t *testing.T) {
	base, _ := lookupRecipe("base")
	gw, _ := lookupRecipe("mcp-gateway")
	baseBuilt := time.Date(2026, 11, 26, 9, 3, 53, 0, time.UTC)
	baseNow := Config{RecipeHash: buildHash(base, nil, ""), Built: baseBuilt}
	gwOn := func(b Config, sum string) Config {
		return Config{RecipeHash: buildHash(gw, &Config{RecipeHash: b.RecipeHash, Built: b.Built}, sum), HutchSHA256: sum}
	}
	tests := []struct {
		name      string
		templates map[string]Config
		ask       string
		want      bool
	}{
		{"base from this recipe", map[string]Config{"base": baseNow}, "base", false},
		{"base from an older recipe", map[string]Config{"base": {RecipeHash: "d824edb490f8", Built: baseBuilt}}, "base", true},
		{"mcp-gateway on this base", map[string]Config{"base": baseNow, "mcp-gateway": gwOn(baseNow, "sum1")}, "mcp-gateway", false},
		{"mcp-gateway on an earlier build of base", map[string]Config{
			"base": baseNow, "mcp-gateway": gwOn(Config{RecipeHash: baseNow.RecipeHash, Built: baseBuilt.Add(-time.Hour)}, "sum1"),
		}, "mcp-gateway", true},
		{"mcp-gateway whose base is gone", map[string]Config{"mcp-gateway": gwOn(baseNow, "sum1")}, "mcp-gateway", true},
		{"a template no recipe makes", map[string]Config{"mine": {RecipeHash: "x"}}, "mine", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Open(t.TempDir())
			for name, cfg := range tc.templates {
				os.MkdirAll(filepath.Join(s.Dir(), name, "rootfs"), 0o755)
				b, _ := json.Marshal(cfg)
				os.WriteFile(filepath.Join(s.Dir(), name, "template.json"), b, 0o644)
			}
			got, err := s.Stale(tc.ask)
			if err != nil || got != tc.want {
				t.Errorf("Stale(%s) = %v, %v; want %v", tc.ask, got, err, tc.want)
			}
		})
	}
	if _, err := Open(t.TempDir()).Stale("base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Stale of an unbuilt template = %v, want ErrNotFound", err)
	}
}
