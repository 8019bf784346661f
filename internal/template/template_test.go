package template

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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
	if list, err := s.List(); err != nil || len(list) != 0 {
		t.Errorf("List of an empty store = %v, %v; want nothing", list, err)
	}
	for _, bad := range []string{"", "../etc", "a/b", "Base", ".hidden", "mini:", "mini:../x"} {
		if _, err := s.Get(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Get(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	committed := commit(t, s, "mini", nil, Config{DefaultUser: "user", RecipeHash: "abc"}, files{"etc/hostname": "mini\n"})
	layer := committed.Layers[0]
	tpl, err := s.Get("mini")
	if err != nil {
		t.Fatal(err)
	}
	wantDirs := []string{filepath.Join(s.Dir(), "layers", layer, "rootfs")}
	if tpl.Name != "mini" || tpl.DefaultUser != "user" || tpl.RecipeHash != "abc" || !slices.Equal(tpl.LowerDirs(), wantDirs) || tpl.Ref() != "mini" {
		t.Errorf("Get = %+v (ref %s, lower dirs %v); want mini, user, abc, %v", tpl, tpl.Ref(), tpl.LowerDirs(), wantDirs)
	}
	if b, err := os.ReadFile(filepath.Join(tpl.LowerDirs()[0], "etc/hostname")); err != nil || string(b) != "mini\n" {
		t.Errorf("the layer's etc/hostname = %q, %v; want mini", b, err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Name != "mini" || list[0].ID != tpl.ID {
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
	// Its files come with it, and the start and ready commands.
	r, _ := lookupRecipe("code-interpreter-v1")
	if r.from != "base" || len(r.files["server.py"]) == 0 || len(r.files["requirements.txt"]) == 0 || r.start == "" || r.ready == "" {
		t.Errorf("code-interpreter-v1: from %q, files %d, start %q, ready %q; want base, server.py and requirements.txt, both commands", r.from, len(r.files), r.start, r.ready)
	}
	if cfg := recipeConfig(r, r.name, "h", ""); cfg.StartCmd != r.start || cfg.ReadyCmd != r.ready {
		t.Errorf("code-interpreter-v1's config: start %q ready %q", cfg.StartCmd, cfg.ReadyCmd)
	}
	if base, _ := lookupRecipe("base"); buildHash(r, nil, "") == buildHash(&recipe{name: r.name, script: r.script, defaultUser: r.defaultUser, defaultWorkdir: r.defaultWorkdir, from: r.from, start: r.start, ready: r.ready}, nil, "") || len(base.files) != 0 {
		t.Errorf("code-interpreter-v1's files are not in its build hash, or base has files")
	}
	_, err := lookupRecipe("nope")
	if err == nil || !strings.Contains(err.Error(), "base, code-interpreter-v1, mcp-gateway") {
		t.Errorf("unknown recipe error = %v, want it to list base, code-interpreter-v1, mcp-gateway", err)
	}
}

// TestBuildDerived runs Build's decisions for mcp-gateway against a store
// of fake templates, with the recipes replaced by a stub that records
// them: base's recipe fills an empty directory, mcp-gateway's changes an
// overlay of base's layers, and what it changed becomes its own layer on
// top of base's.
func TestBuildDerived(t *testing.T) {
	testenv.RequireRoot(t, "mcp-gateway's recipe runs on an overlay mount")
	store := Open(t.TempDir())
	hutch := filepath.Join(t.TempDir(), "hutch")
	os.WriteFile(hutch, []byte("hutch v1"), 0o755)
	scripts := map[string]string{}
	for _, name := range []string{"base", "mcp-gateway"} {
		scripts[string(must(lookupRecipe(name)).script)] = name
	}
	var ran []string
	baseBuilds := 0
	orig := runRecipe
	t.Cleanup(func() { runRecipe = orig })
	// runRecipe runs where the recipe would: for mcp-gateway, on the
	// thread whose mount namespace holds the overlay.
	runRecipe = func(cmd *exec.Cmd) error {
		env := map[string]string{}
		for _, kv := range cmd.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		name := scripts[string(must(os.ReadFile(cmd.Args[len(cmd.Args)-1])))]
		ran = append(ran, name)
		rootfs := env["ROOTFS"]
		if _, ok := env["TEMPLATES"]; ok || !filepath.IsAbs(rootfs) || env["CACHE"] == "" || env["MIRROR"] == "" {
			t.Errorf("%s: recipe env TEMPLATES=%q ROOTFS=%q CACHE=%q MIRROR=%q; want no TEMPLATES", name, env["TEMPLATES"], rootfs, env["CACHE"], env["MIRROR"])
		}
		switch name {
		case "base":
			// debootstrap makes the directory itself.
			if _, err := os.Stat(rootfs); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("base: ROOTFS %s exists before the recipe runs (%v)", rootfs, err)
			}
			baseBuilds++
			if err := os.MkdirAll(filepath.Join(rootfs, "usr/local/bin"), 0o755); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(rootfs, "etc/base-build"), []byte(strconv.Itoa(baseBuilds)), 0o644)
		case "mcp-gateway":
			want, _ := os.ReadFile(hutch)
			if got, err := os.ReadFile(env["HUTCH_BINARY"]); err != nil || !bytes.Equal(got, want) {
				t.Errorf("HUTCH_BINARY %q = %q, %v; want a copy of %s", env["HUTCH_BINARY"], got, err, hutch)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(rootfs, &st); err != nil || st.Type != unix.OVERLAYFS_SUPER_MAGIC {
				t.Errorf("mcp-gateway: ROOTFS %s is not an overlay (statfs type %#x, %v)", rootfs, st.Type, err)
			}
			// The overlay shows the base build of now.
			if got, err := os.ReadFile(filepath.Join(rootfs, "etc/base-build")); err != nil || string(got) != strconv.Itoa(baseBuilds) {
				t.Errorf("mcp-gateway: ROOTFS/etc/base-build = %q, %v; want base build %d", got, err, baseBuilds)
			}
			// A file of base's that the recipe deletes (as it does
			// resolv.conf) is a whiteout in its layer.
			os.Remove(filepath.Join(rootfs, "etc/base-build"))
			// What the recipe's own processes see: the same mount
			// namespace.
			if out, err := exec.Command("cat", filepath.Join(env["HUTCH_BINARY"])).Output(); err != nil || !bytes.Equal(out, want) {
				t.Errorf("a process the recipe starts reads HUTCH_BINARY as %q, %v", out, err)
			}
			return exec.Command("cp", env["HUTCH_BINARY"], filepath.Join(rootfs, "usr/local/bin/mcp-gateway")).Run()
		}
		t.Errorf("an unknown recipe ran: %v", cmd.Args)
		return nil
	}
	opts := BuildOptions{Mirror: "http://mirror.invalid/debian", CacheDir: t.TempDir(), Hutch: hutch}
	// edit rewrites the build a name points at, as a build by another
	// recipe would have written it.
	edit := func(name string, f func(*Config)) func() {
		return func() {
			tpl, err := store.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			f(&tpl.Config)
			if err := writeJSON(store.buildPath(tpl.ID), tpl); err != nil {
				t.Fatal(err)
			}
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
			dirs := tpl.LowerDirs()
			os.WriteFile(filepath.Join(dirs[len(dirs)-1], "usr/local/bin/mcp-gateway"), []byte("patched"), 0o755)
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
			t.Fatalf("%s: %v (log %q)", st.name, err, log.String())
		}
		if !slices.Equal(ran, st.want) || built != (len(st.want) > 0) {
			t.Errorf("%s: ran %v, built %v; want %v", st.name, ran, built, st.want)
		}
		if st.want == nil && !strings.Contains(log.String(), "template mcp-gateway is up to date") {
			t.Errorf("%s: log %q does not say up to date", st.name, log.String())
		}
		base, err := store.Get("base")
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		sum := sha256.Sum256(must(os.ReadFile(hutch)))
		if tpl.DefaultUser != "user" || tpl.HutchSHA256 != hex.EncodeToString(sum[:]) ||
			tpl.From == nil || tpl.From.Name != "base" || tpl.From.RecipeHash != base.RecipeHash || !tpl.From.Built.Equal(base.Built) {
			t.Errorf("%s: mcp-gateway config %+v (from %+v), base %+v", st.name, tpl.Config, tpl.From, base.Config)
		}
		// mcp-gateway is base's layers and one of its own, which holds
		// only what its recipe changed.
		if len(base.Layers) != 1 || len(tpl.Layers) != 2 || tpl.Layers[0] != base.Layers[0] {
			t.Fatalf("%s: mcp-gateway's layers %v, base's %v; want base's and one more", st.name, tpl.Layers, base.Layers)
		}
		own := tpl.LowerDirs()[1]
		if got, err := os.ReadFile(filepath.Join(own, "usr/local/bin/mcp-gateway")); err != nil || !bytes.Equal(got, must(os.ReadFile(hutch))) {
			t.Errorf("%s: mcp-gateway's layer holds usr/local/bin/mcp-gateway = %q, %v; want the hutch binary", st.name, got, err)
		}
		if fi, err := os.Lstat(filepath.Join(own, "etc/base-build")); err != nil || fi.Mode()&fs.ModeCharDevice == 0 || fi.Sys().(*syscall.Stat_t).Rdev != 0 {
			t.Errorf("%s: etc/base-build in mcp-gateway's layer: %v, %v; want a whiteout (0/0 character device)", st.name, fi, err)
		}
		var names []string
		filepath.WalkDir(own, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				names = append(names, strings.TrimPrefix(p, own+"/"))
			}
			for _, x := range must(listXattrs(p)) {
				if strings.HasPrefix(x, "trusted.") {
					t.Errorf("%s: %s in mcp-gateway's layer keeps overlayfs's %s", st.name, p, x)
				}
			}
			return nil
		})
		if want := []string{"etc/base-build", "usr/local/bin/mcp-gateway"}; !slices.Equal(names, want) {
			t.Errorf("%s: mcp-gateway's layer holds %v, want %v", st.name, names, want)
		}
		// Nothing is left of earlier builds, of the overlay or of its
		// mount.
		if got, want := onDisk(t, store, "layers"), sorted(tpl.Layers...); !slices.Equal(got, want) {
			t.Errorf("%s: layers on disk %v, want the current builds' %v", st.name, got, want)
		}
		if got := onDisk(t, store, "builds"); !slices.Equal(got, sorted(base.ID, tpl.ID)) {
			t.Errorf("%s: builds on disk %v, want base's and mcp-gateway's", st.name, got)
		}
		if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), store.Dir()) {
			t.Errorf("%s: a mount of the store is left in the test's mount table", st.name)
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
// /usr/local/bin/hutch) byte for byte, its four MCP servers answering
// initialize without a network in a read-only view of the root, and
// Claude Code running there as the sandbox's user.
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
	// No workdir: commands start in the home of whoever runs them.
	if tpl.DefaultUser != "user" || tpl.DefaultWorkdir != "" {
		t.Errorf("default user %q, workdir %q; want user and none", tpl.DefaultUser, tpl.DefaultWorkdir)
	}

	// mcp-gateway is base's layers and one of its own on top.
	if len(tpl.Layers) != len(base.Layers)+1 || !slices.Equal(tpl.Layers[:len(base.Layers)], base.Layers) {
		t.Errorf("mcp-gateway's layers %v are not base's %v and one more", tpl.Layers, base.Layers)
	}
	dirs := tpl.LowerDirs()
	// inRoot is the file that path in the template's root is: the one
	// of its topmost layer that has it.
	inRoot := func(path string) string {
		for i := len(dirs) - 1; i >= 0; i-- {
			if _, err := os.Lstat(filepath.Join(dirs[i], path)); err == nil {
				return filepath.Join(dirs[i], path)
			}
		}
		t.Fatalf("no layer of mcp-gateway has /%s", path)
		return ""
	}
	gw := inRoot("usr/local/bin/mcp-gateway")
	if gw != filepath.Join(dirs[len(dirs)-1], "usr/local/bin/mcp-gateway") {
		t.Errorf("/usr/local/bin/mcp-gateway comes from %s, not mcp-gateway's own layer", gw)
	}
	if got := fileSHA256(t, gw); got != tpl.HutchSHA256 {
		t.Errorf("%s has sha256 %s, the build records %s", gw, got, tpl.HutchSHA256)
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
		fi, err := os.Lstat(inRoot(f.path))
		if err != nil {
			t.Error(err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != f.mode || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("/%s: mode %v, owner %d:%d; want %v, 0:0", f.path, fi.Mode(), st.Uid, st.Gid, f.mode)
		}
	}
	// The root as sandboxes see it: the layers stacked, read-only (an
	// overlay without an upper directory), top first.
	var lowers []string
	for i := len(dirs) - 1; i >= 0; i-- {
		lowers = append(lowers, dirs[i])
	}

	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hutch-test","version":"1"}}}`
	view := t.TempDir()
	for _, s := range mcpServers {
		t.Run(s.pkg, func(t *testing.T) {
			var pkg struct{ Version string }
			b, err := os.ReadFile(inRoot(filepath.Join("usr/local/lib/node_modules/@modelcontextprotocol", s.pkg, "package.json")))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &pkg); err != nil || pkg.Version != "2026.8.31" {
				t.Errorf("@modelcontextprotocol/%s version %q (%v), want 2026.8.31", s.pkg, pkg.Version, err)
			}
			// The store's layers must not be written: stack them read-only
			// in a mount namespace of its own, without a network.
			cmd := exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sh", "-euc", `
				mount -t overlay overlay -o "ro,userxattr,lowerdir=$LOWERS" "$VIEW"
				mount -t proc proc "$VIEW/proc"
				mount --rbind /dev "$VIEW/dev"
				mount -t tmpfs tmpfs "$VIEW/tmp"
				echo "$INIT" | chroot "$VIEW" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root timeout 20 $SERVER | head -n 1`)
			cmd.Env = append(os.Environ(), "LOWERS="+strings.Join(lowers, ":"), "VIEW="+view, "INIT="+init, "SERVER="+s.cmd)
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

	// Claude Code, pinned, the native build of this machine's libc only,
	// runs as the sandbox's user without a network, and `claude mcp add`
	// (E2B's MCP quick start) writes the server into ~/.claude.json.
	t.Run("claude", func(t *testing.T) {
		var pkg struct{ Version string }
		b, err := os.ReadFile(inRoot("usr/local/lib/node_modules/@anthropic-ai/claude-code/package.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &pkg); err != nil || pkg.Version != claudeCodeVersion {
			t.Errorf("@anthropic-ai/claude-code version %q (%v), want %s", pkg.Version, err, claudeCodeVersion)
		}
		musl, _ := filepath.Glob(inRoot("usr/local/lib/node_modules/@anthropic-ai/claude-code") + "/node_modules/@anthropic-ai/claude-code-*")
		if len(musl) != 0 {
			t.Errorf("the template carries other builds of claude too: %v", musl)
		}
		cmd := exec.Command("unshare", "--mount", "--net", "--propagation", "private", "sh", "-euc", `
			mount -t overlay overlay -o "ro,userxattr,lowerdir=$LOWERS" "$VIEW"
			mount -t proc proc "$VIEW/proc"
			mount --rbind /dev "$VIEW/dev"
			mount -t tmpfs -o mode=1777 tmpfs "$VIEW/tmp"
			install -d -o 1000 -g 1000 "$VIEW/tmp/home"
			run() { chroot --userspec=1000:1000 "$VIEW" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp/home sh -c 'cd && exec timeout 60 "$@"' run "$@"; }
			run claude --version
			run claude mcp add --transport http gw http://127.0.0.1:1/mcp --header "Authorization: Bearer t" >/dev/null
			cat "$VIEW/tmp/home/.claude.json"`)
		cmd.Env = append(os.Environ(), "LOWERS="+strings.Join(lowers, ":"), "VIEW="+view)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("claude: %v\n%s\nstderr: %s", err, out, stderr.String())
		}
		version, config, _ := strings.Cut(string(out), "\n")
		if want := claudeCodeVersion + " (Claude Code)"; version != want {
			t.Errorf("claude --version = %q, want %q", version, want)
		}
		var cfg struct {
			Projects map[string]struct {
				MCPServers map[string]struct {
					Type, URL string
					Headers   map[string]string
				} `json:"mcpServers"`
			} `json:"projects"`
		}
		if err := json.Unmarshal([]byte(config), &cfg); err != nil {
			t.Fatalf("~/.claude.json: %v\n%s", err, config)
		}
		gw := cfg.Projects["/tmp/home"].MCPServers["gw"]
		if gw.Type != "http" || gw.URL != "http://127.0.0.1:1/mcp" || gw.Headers["Authorization"] != "Bearer t" {
			t.Errorf("claude mcp add wrote %+v, want http, http://127.0.0.1:1/mcp, Bearer t:\n%s", gw, config)
		}
	})
}

// claudeCodeVersion is the version of @anthropic-ai/claude-code the
// mcp-gateway recipe pins (CLAUDE_CODE_VERSION).
const claudeCodeVersion = "2.1.197"

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// legacyTemplate writes a template as an earlier Hutch kept it:
// <store>/<name>/template.json beside its rootfs.
func legacyTemplate(t *testing.T, dir, name string, cfg Config) {
	t.Helper()
	root := filepath.Join(dir, name, "rootfs")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/legacy"), []byte(name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(dir, name, "template.json"), cfg); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptLegacy: a template an earlier Hutch built into one directory
// is moved into the layer store when its recipe is this binary's, and
// removed otherwise.
func TestAdoptLegacy(t *testing.T) {
	built := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		cfg     Config
		adopted bool
	}{
		{"this recipe: adopted", Config{DefaultUser: "user", DefaultWorkdir: "/home/user", RecipeHash: "want", Built: built}, true},
		{"another recipe: removed", Config{DefaultUser: "user", RecipeHash: "old", Built: built}, false},
		{"made from another template: removed", Config{RecipeHash: "want", From: &Origin{Name: "base"}, Built: built}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := Open(t.TempDir())
			legacyTemplate(t, s.Dir(), "tpl", tc.cfg)
			got, err := s.adoptLegacy("tpl", "want")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(s.Dir(), "tpl")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the legacy directory is left: %v", err)
			}
			tpl, err := s.Get("tpl")
			if !tc.adopted {
				if got != nil || !errors.Is(err, errdefs.ErrNotFound) {
					t.Errorf("adoptLegacy = %v, Get = %v, %v; want nothing registered", got, tpl, err)
				}
				if layers := onDisk(t, s, "layers"); len(layers) != 0 {
					t.Errorf("layers %v, want none", layers)
				}
				return
			}
			if err != nil || got == nil || got.ID != tpl.ID {
				t.Fatalf("adoptLegacy = %v; Get = %v, %v", got, tpl, err)
			}
			if tpl.DefaultUser != "user" || tpl.DefaultWorkdir != "" || tpl.RecipeHash != "want" || !tpl.Built.Equal(built) || tpl.Source != "recipe tpl" || len(tpl.Layers) != 1 {
				t.Errorf("adopted build %+v (layers %v); want the legacy config (workdir: the user's home), source recipe tpl, one layer", tpl.Config, tpl.Layers)
			}
			if b, err := os.ReadFile(filepath.Join(tpl.LowerDirs()[0], "etc/legacy")); err != nil || string(b) != "tpl\n" {
				t.Errorf("the adopted layer's etc/legacy = %q, %v; want the legacy tree's", b, err)
			}
		})
	}
	if got, err := Open(t.TempDir()).adoptLegacy("tpl", "want"); got != nil || err != nil {
		t.Errorf("adoptLegacy without a legacy directory = %v, %v; want nil, nil", got, err)
	}
}

// TestRetireLegacy: an earlier Hutch's template trees (the current one
// and those it had moved aside) are removed unless a mount still uses
// them.
func TestRetireLegacy(t *testing.T) {
	dir := t.TempDir()
	s := Open(dir)
	for _, d := range []string{".tpl-old-1/rootfs", ".tpl-old-2/rootfs", ".other-old-3/rootfs", "tpl/rootfs", "tplx/rootfs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A retired tree a mount refers to stays: bind one into a private
	// mount namespace of a process that outlives the check.
	release := holdMount(t, filepath.Join(dir, ".tpl-old-2", "rootfs"))
	s.retireLegacy("tpl")
	for _, c := range []struct {
		dir  string
		kept bool
	}{{".tpl-old-1", false}, {".tpl-old-2", true}, {".other-old-3", true}, {"tpl", false}, {"tplx", true}} {
		_, err := os.Stat(filepath.Join(dir, c.dir))
		if c.kept && err != nil {
			t.Errorf("%s: removed (%v), want kept", c.dir, err)
		}
		if !c.kept && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: kept (%v), want removed", c.dir, err)
		}
	}
	release()
	s.retireLegacy("tpl")
	if _, err := os.Stat(filepath.Join(dir, ".tpl-old-2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a retired tree no longer mounted is kept (%v)", err)
	}
}

// TestBuildLegacy: what `hutch template build base` does in a store an
// earlier Hutch wrote: the base of this recipe is moved in, not rebuilt;
// one of an older recipe is rebuilt and its tree removed, once no
// sandbox uses it.
func TestBuildLegacy(t *testing.T) {
	testenv.RequireRoot(t, "mounts a legacy tree in a mount namespace of its own")
	r := must(lookupRecipe("base"))
	hash := buildHash(r, nil, "")
	tests := []struct {
		name    string
		hash    string
		force   bool
		mounted bool
		rebuilt bool
	}{
		{"this recipe: moved in", hash, false, false, false},
		{"an older recipe: rebuilt", "old", false, false, true},
		{"an older recipe, in use: rebuilt, removed after", "old", false, true, true},
		{"this recipe, forced: rebuilt", hash, true, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mounted || tc.rebuilt {
				// retireLegacy knows a tree by its name: a sandbox of another
				// store's legacy base (the host's) keeps this one too.
				for p := range mountedPaths() {
					if strings.Contains(p+"/", "/base/rootfs/") {
						t.Skipf("a legacy base is mounted on this host (%s)", p)
					}
				}
			}
			s := Open(t.TempDir())
			legacyTemplate(t, s.Dir(), "base", Config{DefaultUser: "user", DefaultWorkdir: "/home/user", RecipeHash: tc.hash})
			ran := 0
			orig := runRecipe
			t.Cleanup(func() { runRecipe = orig })
			runRecipe = func(cmd *exec.Cmd) error {
				ran++
				for _, kv := range cmd.Env {
					if rootfs, ok := strings.CutPrefix(kv, "ROOTFS="); ok {
						return os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
					}
				}
				return errors.New("no ROOTFS")
			}
			release := func() {}
			if tc.mounted {
				release = holdMount(t, filepath.Join(s.Dir(), "base", "rootfs"))
			}
			var log bytes.Buffer
			opts := BuildOptions{Mirror: "http://mirror.invalid/debian", CacheDir: t.TempDir(), Force: tc.force, Progress: &log}
			tpl, built, err := s.Build(t.Context(), "base", opts)
			if err != nil {
				t.Fatal(err)
			}
			if built != tc.rebuilt || ran != map[bool]int{true: 1}[tc.rebuilt] {
				t.Errorf("built %v, recipe ran %d times; want rebuilt %v (log %q)", built, ran, tc.rebuilt, log.String())
			}
			_, legacyErr := os.Stat(filepath.Join(tpl.LowerDirs()[0], "etc/legacy"))
			if moved := legacyErr == nil; moved == tc.rebuilt {
				t.Errorf("base's layer has the legacy tree's files: %v; want %v", moved, !tc.rebuilt)
			}
			if !tc.rebuilt && !strings.Contains(log.String(), "moved into the layer store") {
				t.Errorf("log %q does not say base was moved into the layer store", log.String())
			}
			_, err = os.Stat(filepath.Join(s.Dir(), "base"))
			if tc.mounted && err != nil {
				t.Errorf("the legacy tree a sandbox uses was removed: %v", err)
			}
			release()
			// The next build finds base up to date, and removes the legacy
			// tree no sandbox uses any more.
			if _, built, err := s.Build(t.Context(), "base", BuildOptions{Mirror: opts.Mirror, CacheDir: opts.CacheDir}); err != nil || built {
				t.Fatalf("second Build: built %v, %v; want up to date", built, err)
			}
			if _, err := os.Stat(filepath.Join(s.Dir(), "base")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the legacy tree is left: %v", err)
			}
		})
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
				commit(t, s, name, nil, cfg, files{"etc/" + name: name})
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

// TestBuildBaseRemovedMeanwhile: removing base while mcp-gateway is being
// built on it leaves the build its layers: the recipe still reads base's
// files, and mcp-gateway comes out whole.
func TestBuildBaseRemovedMeanwhile(t *testing.T) {
	testenv.RequireRoot(t, "mcp-gateway's recipe runs on an overlay mount")
	store := Open(t.TempDir())
	hutch := filepath.Join(t.TempDir(), "hutch")
	os.WriteFile(hutch, []byte("hutch v1"), 0o755)
	gwScript := string(must(lookupRecipe("mcp-gateway")).script)
	orig := runRecipe
	t.Cleanup(func() { runRecipe = orig })
	var removeErr, readErr error
	runRecipe = func(cmd *exec.Cmd) error {
		var rootfs string
		for _, kv := range cmd.Env {
			if v, ok := strings.CutPrefix(kv, "ROOTFS="); ok {
				rootfs = v
			}
		}
		if string(must(os.ReadFile(cmd.Args[len(cmd.Args)-1]))) != gwScript {
			if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(rootfs, "etc/base-file"), []byte("base\n"), 0o644)
		}
		removeErr = store.Remove("base", nil)
		_, readErr = os.ReadFile(filepath.Join(rootfs, "etc/base-file"))
		return os.WriteFile(filepath.Join(rootfs, "gateway"), []byte("gw\n"), 0o644)
	}
	tpl, _, err := store.Build(t.Context(), "mcp-gateway", BuildOptions{Mirror: "http://mirror.invalid/debian", CacheDir: t.TempDir(), Hutch: hutch})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if removeErr != nil {
		t.Fatalf("Remove(base) during the build: %v", removeErr)
	}
	if readErr != nil {
		t.Errorf("the recipe could not read base's files after base was removed: %v", readErr)
	}
	if _, err := store.Get("base"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(base) = %v, want ErrNotFound", err)
	}
	for _, id := range tpl.Layers {
		if !store.HasLayer(id) {
			t.Errorf("mcp-gateway's layer %.12s is not in the store", id)
		}
	}
	if _, err := os.Stat(filepath.Join(tpl.LowerDirs()[0], "etc/base-file")); err != nil {
		t.Errorf("mcp-gateway's bottom layer: %v", err)
	}
}
