package template

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
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
	script         []byte
	defaultUser    string
	defaultWorkdir string
}

func lookupRecipe(name string) (*recipe, error) {
	b, err := recipes.ReadFile("recipes/" + name + ".sh")
	if err != nil {
		return nil, fmt.Errorf("no recipe for template %q (known: base): %w", name, errdefs.ErrNotFound)
	}
	return &recipe{script: b, defaultUser: "user", defaultWorkdir: "/home/user"}, nil
}

func (r *recipe) hash() string {
	h := sha256.New()
	h.Write(r.script)
	fmt.Fprintf(h, "\x00%s\x00%s", r.defaultUser, r.defaultWorkdir)
	return hex.EncodeToString(h.Sum(nil))
}

// BuildOptions tune Build. The zero value builds from the host's own Debian
// mirror with the default cache.
type BuildOptions struct {
	// Mirror is the Debian mirror URL; empty takes the one the host's apt uses.
	Mirror string
	// CacheDir keeps downloaded packages; empty means DefaultCacheDir.
	CacheDir string
	// Force rebuilds even when the recipe is unchanged.
	Force bool
	// Progress receives the build's log; nil discards it.
	Progress io.Writer
}

// Build builds the template called name from its recipe unless a build of
// the same recipe is already in the store, and returns it. built tells
// whether any work was done. Concurrent builds of one name wait for each other.
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

	hash := r.hash()
	if cur, err := s.Get(name); err == nil && cur.RecipeHash == hash && !opts.Force {
		fmt.Fprintf(progress, "template %s is up to date (recipe %s)\n", name, hash[:12])
		return cur, false, nil
	}

	mirror := opts.Mirror
	if mirror == "" {
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
	start := time.Now()
	fmt.Fprintf(progress, "building template %s (recipe %s) into %s\n", name, hash[:12], s.dir)
	cmd := exec.CommandContext(ctx, "/bin/sh", script)
	cmd.Env = append(os.Environ(), "ROOTFS="+rootfs, "MIRROR="+mirror, "CACHE="+cache)
	cmd.Stdout, cmd.Stderr = progress, progress
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return nil, false, fmt.Errorf("build template %s: recipe failed: %w", name, err)
	}
	if err := os.Remove(script); err != nil {
		return nil, false, err
	}
	cfg := Config{Name: name, DefaultUser: r.defaultUser, DefaultWorkdir: r.defaultWorkdir, RecipeHash: hash, Built: time.Now().UTC()}
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
	t, err = s.Get(name)
	return t, true, err
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
