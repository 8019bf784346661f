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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
)

//go:embed recipes/*.sh
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
}

// derived lists the templates built on top of another one, and what of
// Hutch's own they carry. Every other recipe builds from nothing.
var derived = map[string]struct {
	from, hutch string
}{
	"mcp-gateway": {from: "base", hutch: "/usr/local/bin/mcp-gateway"},
}

func lookupRecipe(name string) (*recipe, error) {
	b, err := recipes.ReadFile("recipes/" + name + ".sh")
	if err != nil {
		return nil, fmt.Errorf("no recipe for template %q (known: %s): %w", name, strings.Join(knownRecipes(), ", "), errdefs.ErrNotFound)
	}
	d := derived[name]
	return &recipe{name: name, script: b, defaultUser: "user", defaultWorkdir: "/home/user", from: d.from, hutch: d.hutch}, nil
}

// knownRecipes lists the names of the embedded recipes.
func knownRecipes() []string {
	ents, _ := recipes.ReadDir("recipes")
	var names []string
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".sh"))
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
	if errors.Is(err, errdefs.ErrNotFound) {
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
// of date. Concurrent builds of one name wait for each other.
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
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, false, fmt.Errorf("template store: %w", err)
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
		// rebuilt (moved aside) while the recipe copies it. Locks are always
		// taken derived first, so two builds cannot wait for each other.
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
			return cur, false, nil
		}
		fmt.Fprintf(progress, "template %s: %s is not the hutch binary it was built with; rebuilding\n", name, r.hutch)
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
	storeDir, err := filepath.Abs(s.dir)
	if err != nil {
		return nil, false, err
	}

	tmp, err := os.MkdirTemp(s.dir, "."+name+"-build-")
	if err != nil {
		return nil, false, fmt.Errorf("template build dir: %w", err)
	}
	defer os.RemoveAll(tmp) // no-op once renamed into place
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, false, err
	}
	rootfs := filepath.Join(tmp, "rootfs")
	script := filepath.Join(tmp, "recipe.sh")
	if err := os.WriteFile(script, r.script, 0o755); err != nil {
		return nil, false, err
	}
	// Scratch files of the build, removed before the rename.
	scratch := []string{script}
	env := append(os.Environ(), "ROOTFS="+rootfs, "MIRROR="+mirror, "CACHE="+cache, "TEMPLATES="+storeDir)
	if r.hutch != "" {
		// The recipe gets a copy of exactly the bytes that were hashed.
		bin := filepath.Join(tmp, "hutch")
		if err := copyHutch(hutchPath, hutchSum, bin); err != nil {
			return nil, false, fmt.Errorf("build template %s: %w", name, err)
		}
		scratch = append(scratch, bin)
		env = append(env, "HUTCH_BINARY="+bin)
	}
	start := time.Now()
	fmt.Fprintf(progress, "building template %s (recipe %s) into %s\n", name, hash[:12], s.dir)
	cmd := exec.CommandContext(ctx, "/bin/sh", script)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = progress, progress
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	if err := runRecipe(cmd); err != nil {
		return nil, false, fmt.Errorf("build template %s: recipe failed: %w", name, err)
	}
	for _, f := range scratch {
		if err := os.Remove(f); err != nil {
			return nil, false, err
		}
	}
	cfg := Config{Name: name, DefaultUser: r.defaultUser, DefaultWorkdir: r.defaultWorkdir, RecipeHash: hash, Built: time.Now().UTC(), HutchSHA256: hutchSum}
	if from != nil {
		cfg.From = &Origin{Name: from.Name, RecipeHash: from.RecipeHash, Built: from.Built}
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "template.json"), append(b, '\n'), 0o644); err != nil {
		return nil, false, err
	}
	// Swap atomically. The old tree moves aside rather than being deleted:
	// running sandboxes may still have it mounted as their lower layer.
	final := filepath.Join(s.dir, name)
	if _, err := os.Stat(final); err == nil {
		old := filepath.Join(s.dir, fmt.Sprintf(".%s-old-%d", name, time.Now().UnixNano()))
		if err := os.Rename(final, old); err != nil {
			return nil, false, fmt.Errorf("retire old template: %w", err)
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return nil, false, fmt.Errorf("install template: %w", err)
	}
	fmt.Fprintf(progress, "template %s built in %s\n", name, time.Since(start).Round(time.Second))
	if n := s.removeRetired(name); n > 0 {
		fmt.Fprintf(progress, "removed %d retired build(s) of %s that no sandbox uses\n", n, name)
	}
	t, err = s.Get(name)
	return t, true, err
}

// removeRetired deletes the trees earlier builds of name were moved aside
// to (.<name>-old-*) that no process's mount table refers to any more:
// without it, every rebuild (each new hutch binary, for mcp-gateway) would
// leave hundreds of megabytes behind. A tree still mounted by a running
// sandbox is kept for a later build to remove. It returns how many it
// removed.
func (s *Store) removeRetired(name string) int {
	old, _ := filepath.Glob(filepath.Join(s.dir, "."+name+"-old-*"))
	if len(old) == 0 {
		return 0
	}
	used := mountedPaths()
	n := 0
	for _, dir := range old {
		abs, err := filepath.Abs(dir)
		if err != nil {
			continue
		}
		// Matched by the tree's unique name, not its whole path: a mount
		// root is relative to its file system's root, which need not be /.
		mark := "/" + filepath.Base(abs) + "/"
		inUse := false
		for p := range used {
			if strings.Contains(p+"/", mark) {
				inUse = true
				break
			}
		}
		if !inUse && os.RemoveAll(abs) == nil {
			n++
		}
	}
	return n
}

// mountedPaths collects the paths every process's mount table names, as
// mount roots and mount points (/proc/*/mountinfo fields 4 and 5), so that
// mounts inside sandboxes' own mount namespaces count too.
func mountedPaths() map[string]bool {
	seen := map[string]bool{}
	infos, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	tables := map[string]bool{} // by mount namespace, read each once
	for _, info := range infos {
		ns, err := os.Readlink(filepath.Join(filepath.Dir(info), "ns", "mnt"))
		if err != nil || tables[ns] {
			continue
		}
		tables[ns] = true
		b, err := os.ReadFile(info)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 {
				seen[f[3]], seen[f[4]] = true, true
			}
		}
	}
	return seen
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
	_, got, err := hutchBinary(filepath.Join(t.RootFS, path))
	return err == nil && got == sum
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
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
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
