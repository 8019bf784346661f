package template

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

// Each recipe is recipes/NAME.sh; files it installs, when it has any, are
// in recipes/NAME/ (the build hands them over in RECIPE_FILES).
//
//go:embed recipes
var recipes embed.FS

// DefaultCacheDir keeps downloads between builds (and between clones).
const DefaultCacheDir = "/var/cache/hutch"

// recipe is how to build one named template.
type recipe struct {
	name           string
	script         []byte
	defaultUser    string
	defaultWorkdir string
	// from names the template this one starts from: the recipe copies its
	// root (TEMPLATES/<from>/rootfs), so it is built first when missing or
	// out of date, and a rebuild of it makes this one out of date.
	from string
	// hutch is where in the root the recipe installs the hutch binary
	// (HUTCH_BINARY), if it does: a different binary, or a changed copy,
	// makes the template out of date.
	hutch string
	// files are recipes/NAME/'s files by path under it, hashed with the
	// script.
	files map[string][]byte
	// start and ready are the template's start and ready commands.
	start, ready string
}

// derived lists the templates built on top of another one, and what of
// Hutch's own they carry. Every other recipe builds from nothing.
var derived = map[string]struct {
	from, hutch  string
	start, ready string
}{
	"mcp-gateway": {from: "base", hutch: "/usr/local/bin/mcp-gateway"},
	// The code interpreter's server (recipes/code-interpreter-v1/) on port
	// 49999, as E2B's template runs it; ready once it answers /health,
	// which it does after its default Python kernel has started.
	"code-interpreter-v1": {
		from:  "base",
		start: "/opt/hutch/code-interpreter/start",
		ready: "curl -sf -o /dev/null http://127.0.0.1:49999/health",
	},
}

func lookupRecipe(name string) (*recipe, error) {
	b, err := recipes.ReadFile("recipes/" + name + ".sh")
	if err != nil {
		return nil, fmt.Errorf("no recipe for template %q (known: %s): %w", name, strings.Join(knownRecipes(), ", "), errdefs.ErrNotFound)
	}
	d := derived[name]
	files := map[string][]byte{}
	err = fs.WalkDir(recipes, "recipes/"+name, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := recipes.ReadFile(path)
		files[strings.TrimPrefix(path, "recipes/"+name+"/")] = b
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("recipe %s: %w", name, err)
	}
	return &recipe{name: name, script: b, defaultUser: "user", defaultWorkdir: "/home/user", from: d.from, hutch: d.hutch,
		files: files, start: d.start, ready: d.ready}, nil
}

// knownRecipes lists the names of the embedded recipes.
func knownRecipes() []string {
	ents, _ := recipes.ReadDir("recipes")
	var names []string
	for _, e := range ents {
		if !e.IsDir() {
			names = append(names, strings.TrimSuffix(e.Name(), ".sh"))
		}
	}
	return names
}

// buildHash is the hash template.json records and a build compares: the
// recipe's text and default user and workdir; for a template built on
// another, that one's recipe hash and build time (so that rebuilding it
// rebuilds this); and for one that carries the hutch binary, the binary's
// SHA-256. A template with neither hashes as it always has.
func buildHash(r *recipe, from *Config, hutchSum string) string {
	h := sha256.New()
	h.Write(r.script)
	fmt.Fprintf(h, "\x00%s\x00%s", r.defaultUser, r.defaultWorkdir)
	// Hashed only when present, so that recipes without them hash as
	// they always have.
	for _, p := range slices.Sorted(maps.Keys(r.files)) {
		fmt.Fprintf(h, "\x00file\x00%s\x00%d\x00", p, len(r.files[p]))
		h.Write(r.files[p])
	}
	if r.start != "" || r.ready != "" {
		fmt.Fprintf(h, "\x00start\x00%s\x00ready\x00%s", r.start, r.ready)
	}
	if r.from != "" {
		var fh string
		var fb time.Time
		if from != nil {
			fh, fb = from.RecipeHash, from.Built
		}
		fmt.Fprintf(h, "\x00from\x00%s\x00%s\x00%s", r.from, fh, fb.UTC().Format(time.RFC3339Nano))
	}
	if r.hutch != "" {
		fmt.Fprintf(h, "\x00hutch\x00%s", hutchSum)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Stale reports whether the built template called name was made from
// another recipe than this binary's, or on another build of the template
// it is made from: `hutch template build NAME` would rebuild it, and until
// then sandboxes get the old one. The hutch binary a template carries is
// not compared (each build of hutch differs; Build replaces it). A
// template no embedded recipe makes is never stale; one not built is an
// error wrapping errdefs.ErrNotFound.
func (s *Store) Stale(name string) (bool, error) {
	cur, err := s.Get(name)
	if err != nil {
		return false, err
	}
	r, err := lookupRecipe(name)
	if errors.Is(err, errdefs.ErrNotFound) || cur.RecipeHash == "" {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var from *Config
	if r.from != "" {
		f, err := s.Get(r.from)
		if errors.Is(err, errdefs.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		from = &f.Config
	}
	return buildHash(r, from, cur.HutchSHA256) != cur.RecipeHash, nil
}

// BuildOptions tune Build. The zero value builds from the host's own Debian
// mirror with the default cache.
type BuildOptions struct {
	// Mirror is the Debian mirror URL; empty takes the one the host's apt uses.
	Mirror string
	// CacheDir keeps downloaded packages; empty means DefaultCacheDir.
	CacheDir string
	// Force rebuilds even when the recipe is unchanged. It applies to the
	// template named, not to the one it is built on.
	Force bool
	// Hutch is the hutch binary that templates carrying one (mcp-gateway)
	// get; empty means the running binary.
	Hutch string
	// Progress receives the build's log; nil discards it.
	Progress io.Writer
}

// runRecipe runs a recipe's command; tests replace it.
var runRecipe = func(cmd *exec.Cmd) error { return cmd.Run() }

// Build builds the template called name from its recipe unless a build of
// the same recipe (and, for a template built on another or carrying the
// hutch binary, of the same base build and binary) is already in the store,
// and returns it. built tells whether any work was done on name itself. A
// template built on another builds that one first when it is missing or out
// of date, and is one layer on top of that one's. Concurrent builds of one
// name wait for each other.
func (s *Store) Build(ctx context.Context, name string, opts BuildOptions) (t *Template, built bool, err error) {
	if !ValidName(name) {
		return nil, false, fmt.Errorf("template name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	r, err := lookupRecipe(name)
	if err != nil {
		return nil, false, err
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	if err := s.init(); err != nil {
		return nil, false, err
	}
	unlock, err := lockFile(ctx, filepath.Join(s.dir, "."+name+".lock"))
	if err != nil {
		return nil, false, err
	}
	defer unlock()

	var from *Template
	if r.from != "" {
		fromOpts := opts
		fromOpts.Force = false
		if _, _, err := s.Build(ctx, r.from, fromOpts); err != nil {
			return nil, false, fmt.Errorf("build template %s: its base %s: %w", name, r.from, err)
		}
		// Hold the base's lock until this build is done, so that it is not
		// rebuilt while this one stacks on it. Locks are always taken
		// derived first, so two builds cannot wait for each other.
		unlockFrom, err := lockFile(ctx, filepath.Join(s.dir, "."+r.from+".lock"))
		if err != nil {
			return nil, false, err
		}
		defer unlockFrom()
		if from, err = s.Get(r.from); err != nil {
			return nil, false, fmt.Errorf("build template %s: %w", name, err)
		}
	}
	var hutchPath, hutchSum string
	if r.hutch != "" {
		if hutchPath, hutchSum, err = hutchBinary(opts.Hutch); err != nil {
			return nil, false, fmt.Errorf("build template %s: %w", name, err)
		}
	}
	var fromCfg *Config
	if from != nil {
		fromCfg = &from.Config
	}
	hash := buildHash(r, fromCfg, hutchSum)
	if cur, err := s.Get(name); err == nil && cur.RecipeHash == hash && !opts.Force {
		if r.hutch == "" || carries(cur, r.hutch, hutchSum) {
			fmt.Fprintf(progress, "template %s is up to date (recipe %s)\n", name, hash[:12])
			// An earlier Hutch's tree a sandbox still used at the last build.
			s.retireLegacy(name)
			if cur.DefaultWorkdir != "" {
				// Registered by a Hutch that gave recipe templates a
				// workdir: the same layers, with none (see recipeConfig).
				cfg := cur.Config
				cfg.DefaultWorkdir = ""
				t, err := s.Commit(name, nil, cur.Layers, cfg)
				return t, false, err
			}
			return cur, false, nil
		}
		fmt.Fprintf(progress, "template %s: %s is not the hutch binary it was built with; rebuilding\n", name, r.hutch)
	}
	if !opts.Force {
		t, err := s.adoptLegacy(name, hash)
		if err != nil {
			return nil, false, err
		}
		if t != nil {
			fmt.Fprintf(progress, "template %s (recipe %s) moved into the layer store\n", name, hash[:12])
			return t, false, nil
		}
	}

	mirror := opts.Mirror
	if mirror == "" && r.from == "" {
		if mirror, err = hostDebianMirror(); err != nil {
			return nil, false, err
		}
	}
	cache := opts.CacheDir
	if cache == "" {
		cache = DefaultCacheDir
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, false, fmt.Errorf("cache dir: %w", err)
	}
	lease, err := s.NewLease()
	if err != nil {
		return nil, false, err
	}
	defer lease.Release()
	if from != nil {
		// Base's layers are mounted in a thread's mount namespace, which
		// no /proc/<pid>/mountinfo shows: removing base meanwhile must
		// not collect them.
		if err := lease.Add(from.Layers...); err != nil {
			return nil, false, err
		}
	}
	start := time.Now()
	fmt.Fprintf(progress, "building template %s (recipe %s) into %s\n", name, hash[:12], s.dir)
	layer, err := s.AddLayer(lease, "recipe "+name, func(root string) (string, error) {
		tmp := filepath.Dir(root)
		script := filepath.Join(tmp, "recipe.sh")
		if err := os.WriteFile(script, r.script, 0o755); err != nil {
			return "", err
		}
		env := append(os.Environ(), "MIRROR="+mirror, "CACHE="+cache)
		if len(r.files) > 0 {
			dir := filepath.Join(tmp, "files")
			for p, b := range r.files {
				f := filepath.Join(dir, filepath.FromSlash(p))
				if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
					return "", err
				}
				if err := os.WriteFile(f, b, 0o644); err != nil {
					return "", err
				}
			}
			env = append(env, "RECIPE_FILES="+dir)
		}
		if r.hutch != "" {
			// The recipe gets a copy of exactly the bytes that were hashed.
			bin := filepath.Join(tmp, "hutch")
			if err := copyHutch(hutchPath, hutchSum, bin); err != nil {
				return "", fmt.Errorf("build template %s: %w", name, err)
			}
			env = append(env, "HUTCH_BINARY="+bin)
		}
		run := func(rootfs string) error {
			cmd := exec.CommandContext(ctx, "/bin/sh", script)
			cmd.Env = append(env, "ROOTFS="+rootfs)
			cmd.Stdout, cmd.Stderr = progress, progress
			cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
			if err := runRecipe(cmd); err != nil {
				return fmt.Errorf("build template %s: recipe failed: %w", name, err)
			}
			return nil
		}
		var err error
		if from != nil {
			// The recipe changes an overlay of the base; what it changed
			// is this template's own layer.
			err = withOverlay(from.LowerDirs(), root, run)
		} else {
			// debootstrap wants to make the directory itself.
			os.Remove(root)
			err = run(root)
			if err == nil {
				_, err = os.Stat(root)
			}
		}
		if err != nil {
			return "", err
		}
		return randomLayerID("recipe", name, hash), nil
	})
	if err != nil {
		return nil, false, err
	}
	cfg := recipeConfig(r, name, hash, hutchSum)
	layers := []string{layer.ID}
	if from != nil {
		cfg.From = &Origin{Name: from.Name, RecipeHash: from.RecipeHash, Built: from.Built}
		layers = append(slices.Clone(from.Layers), layer.ID)
	}
	if t, err = s.Commit(name, nil, layers, cfg); err != nil {
		return nil, false, err
	}
	s.retireLegacy(name) // a forced build does not adopt it
	fmt.Fprintf(progress, "template %s built in %s (build %s)\n", name, time.Since(start).Round(time.Second), t.ID)
	return t, true, nil
}

// recipeConfig is the config of a template built from recipe r. Its
// DefaultWorkdir is empty: commands start in the home of whoever runs
// them (/home/user for user, /root for root), as they always have; the
// recipe's own workdir (its default user's home) is only hashed.
func recipeConfig(r *recipe, name, hash, hutchSum string) Config {
	return Config{DefaultUser: r.defaultUser, RecipeHash: hash, HutchSHA256: hutchSum, Source: "recipe " + name,
		StartCmd: r.start, ReadyCmd: r.ready}
}

// randomLayerID is the id of a layer whose content its inputs do not
// determine (a recipe fetches whatever its mirror serves that day): a
// hash of what it was made from and of random bytes.
func randomLayerID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%s\x00", p)
	}
	fmt.Fprint(h, newBuildID())
	return hex.EncodeToString(h.Sum(nil))
}

// adoptLegacy moves a template an earlier Hutch built into <store>/<name>
// (one directory, template.json beside rootfs) into the layer store, when
// its recipe hash is want, and registers it; it returns nil when there is
// no such template. A derived one (mcp-gateway, a copy of base) is not
// adopted but rebuilt as a layer on base. Running sandboxes keep the tree
// they have mounted.
func (s *Store) adoptLegacy(name, want string) (*Template, error) {
	dir := filepath.Join(s.dir, name)
	b, err := os.ReadFile(filepath.Join(dir, "template.json"))
	if err != nil {
		return nil, nil
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.RecipeHash != want || cfg.From != nil {
		s.retireLegacy(name)
		return nil, nil
	}
	lease, err := s.NewLease()
	if err != nil {
		return nil, err
	}
	defer lease.Release()
	layer, err := s.AddLayer(lease, "recipe "+name, func(root string) (string, error) {
		if err := os.Remove(root); err != nil {
			return "", err
		}
		if err := os.Rename(filepath.Join(dir, "rootfs"), root); err != nil {
			return "", err
		}
		return randomLayerID("recipe", name, want), nil
	})
	if err != nil {
		return nil, fmt.Errorf("adopt template %s: %w", name, err)
	}
	cfg.Source, cfg.DefaultWorkdir = "recipe "+name, ""
	t, err := s.Commit(name, nil, []string{layer.ID}, cfg)
	if err != nil {
		return nil, err
	}
	os.RemoveAll(dir)
	return t, nil
}

// retireLegacy removes an earlier Hutch's template directory of name (and
// the builds it had moved aside), unless a sandbox still has it mounted
// (then a later build of name removes it).
func (s *Store) retireLegacy(name string) {
	dirs, _ := filepath.Glob(filepath.Join(s.dir, "."+name+"-old-*"))
	if _, err := os.Stat(filepath.Join(s.dir, name)); err == nil {
		dirs = append(dirs, filepath.Join(s.dir, name))
	}
	if len(dirs) == 0 {
		return
	}
	mounted := mountedPaths()
	for _, dir := range dirs {
		mark := "/" + filepath.Base(dir) + "/rootfs"
		inUse := false
		for p := range mounted {
			if strings.Contains(p+"/", mark+"/") {
				inUse = true
				break
			}
		}
		if !inUse {
			os.RemoveAll(dir)
		}
	}
}

// hutchBinary returns the hutch binary at path, or the running one when
// path is empty, as a path to read it from and its SHA-256. The running
// binary is read through /proc/self/exe, which stays the file this process
// runs even when the path it was started from has since been replaced.
func hutchBinary(path string) (string, string, error) {
	if path == "" {
		path = "/proc/self/exe"
	}
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("hutch binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", "", fmt.Errorf("hutch binary %s: %w", path, err)
	}
	return path, hex.EncodeToString(h.Sum(nil)), nil
}

// carries reports whether the file at path in t's root has SHA-256 sum:
// templates are never changed in place, but a copy of hutch in one is what
// sandboxes run as root, so the up-to-date check looks at it too.
func carries(t *Template, path, sum string) bool {
	dirs := t.LowerDirs()
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Lstat(filepath.Join(dirs[i], path)); err == nil {
			_, got, err := hutchBinary(filepath.Join(dirs[i], path))
			return err == nil && got == sum
		}
	}
	return false
}

// copyHutch copies the hutch binary at src to dst (mode 0755) and checks
// that it is still the one whose SHA-256 is sum.
func copyHutch(src, sum, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("hutch binary: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy hutch binary %s: %w", src, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("hutch binary %s changed during the build (sha256 %.12s, was %.12s)", src, got, sum)
	}
	return nil
}

// lockFile takes an exclusive flock on path, waiting for ctx.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := flockWait(ctx, f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// flockWait takes an exclusive flock on f, waiting for ctx.
func flockWait(ctx context.Context, f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if err != unix.EWOULDBLOCK {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// hostDebianMirror finds the Debian mirror the host's apt is configured
// with, so builds use whatever this machine may reach.
func hostDebianMirror() (string, error) {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	files = append(files, "/etc/apt/sources.list")
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	files = append(files, more...)
	for _, f := range files {
		if m := mirrorIn(f); m != "" {
			return m, nil
		}
	}
	return "", fmt.Errorf("no Debian mirror found in /etc/apt sources; pass --mirror: %w", errdefs.ErrInvalidArgument)
}

// mirrorIn returns the first URI in an apt source file that serves
// bookworm's main component (one-line or deb822 format).
func mirrorIn(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var uris, suites string
	check := func() string {
		if strings.Contains(" "+suites+" ", " bookworm ") {
			if u := strings.Fields(uris); len(u) > 0 {
				return u[0]
			}
		}
		return ""
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "#"):
		case line == "":
			if m := check(); m != "" {
				return m
			}
			uris, suites = "", ""
		case strings.HasPrefix(line, "URIs:"):
			uris = strings.TrimSpace(strings.TrimPrefix(line, "URIs:"))
		case strings.HasPrefix(line, "Suites:"):
			suites = strings.TrimSpace(strings.TrimPrefix(line, "Suites:"))
		case strings.HasPrefix(line, "deb "):
			// deb [opts] URI SUITE COMPONENTS...
			fs := strings.Fields(line)[1:]
			if len(fs) > 0 && strings.HasPrefix(fs[0], "[") {
				for len(fs) > 0 && !strings.HasSuffix(fs[0], "]") {
					fs = fs[1:]
				}
				fs = fs[1:]
			}
			if len(fs) >= 2 && fs[1] == "bookworm" {
				return fs[0]
			}
		}
	}
	return check()
}

// Builtin reports whether name is one of Hutch's own templates, made from
// a recipe embedded in the binary (base, mcp-gateway): the API builds,
// tags and removes none of them, since every key's sandboxes use them.
func Builtin(name string) bool {
	_, err := lookupRecipe(name)
	return err == nil && ValidName(name)
}
