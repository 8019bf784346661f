package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/hutch-sandbox/hutch/internal/mcp/catalog"
)

// imageConfig is what the host writes beside an image's root (the
// sandbox package's ImageConfig; the JSON names are the contract).
type imageConfig struct {
	Cmd        []string `json:"cmd"`
	Entrypoint []string `json:"entrypoint"`
	Env        []string `json:"env"`
	WorkingDir string   `json:"workingDir"`
	User       string   `json:"user"`
}

// imageCommand is the command that runs a catalog server from its image:
// the image's entrypoint and command, or the catalog's arguments in place
// of the command as Docker runs it, chrooted in the image's root as the
// server's own uid, with the image's environment and the server's own
// variables. The root gets the sandbox's resolv.conf and hosts, and a
// /tmp anyone may write, before each start.
func imageCommand(s *Server) (*exec.Cmd, error) {
	b, err := os.ReadFile(s.Root + ".json")
	if err != nil {
		return nil, fmt.Errorf("MCP server %s runs from its image %s, which the host did not show in this sandbox (%v): create the sandbox with this server in its mcp configuration", s.Name, s.Image, err)
	}
	var cfg imageConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("MCP server %s: its image's config: %w", s.Name, err)
	}
	argv := cfg.Cmd
	if len(s.Args) > 0 {
		// The catalog's arguments replace the image's CMD, as `docker run
		// image args…` does.
		argv = append(slices.Clone(cfg.Entrypoint), s.Args...)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("MCP server %s: its image %s names no command", s.Name, s.Image)
	}
	if err := prepareRoot(s.Root); err != nil {
		return nil, fmt.Errorf("MCP server %s: %w", s.Name, err)
	}
	env := map[string]string{"HOME": "/tmp", "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, kv := range cfg.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range s.Env {
		env[k] = v
	}
	prog, err := lookPathIn(s.Root, argv[0], env["PATH"])
	if err != nil {
		return nil, fmt.Errorf("MCP server %s: %w", s.Name, err)
	}
	cmd := &exec.Cmd{Path: prog, Args: argv, Dir: cfg.WorkingDir}
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	for _, k := range sortedKeys(env) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     s.Root,
		Credential: &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.UID), Groups: []uint32{}},
		// It ends with the gateway (what it started in a session of its
		// own is beyond this: the edge reaches the gateway's port only
		// through a listener root owns, envdapi.HeaderPortOwner).
		Pdeathsig: syscall.SIGKILL,
	}
	return cmd, nil
}

// prepareRoot gives an image's root what a program expects to find: the
// sandbox's name resolution and a writable /tmp. The image is not
// trusted, and its root holds mounts of the sandbox's own trees (its
// /dev, directories bound in): every path is opened beneath the root
// without following a link and without crossing a mount (openat2's
// RESOLVE_NO_SYMLINKS and RESOLVE_NO_XDEV), so the gateway, root in the
// sandbox, changes nothing but the image's own writable layer. An image
// whose tmp or etc is a link is refused (review 31, round 2, F2: a tmp
// link to the sandbox's /dev or a bound home had the gateway make it
// writable by everyone).
func prepareRoot(dir string) error {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	tmp, err := ownDir(root, "tmp")
	if err != nil {
		return err
	}
	err = unix.Fchmod(tmp, 0o777|unix.S_ISVTX)
	unix.Close(tmp)
	if err != nil {
		return fmt.Errorf("/tmp: %w", err)
	}
	etc, err := ownDir(root, "etc")
	if err != nil {
		return err
	}
	defer unix.Close(etc)
	for _, f := range []string{"resolv.conf", "hosts"} {
		b, err := os.ReadFile(filepath.Join("/etc", f))
		if err != nil {
			continue
		}
		// Replaced, never written through.
		if err := unix.Unlinkat(etc, f, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("/etc/%s: %w", f, err)
		}
		fd, err := unix.Openat(etc, f, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return fmt.Errorf("/etc/%s: %w", f, err)
		}
		file := os.NewFile(uintptr(fd), f)
		_, err = file.Write(b)
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("/etc/%s: %w", f, err)
		}
	}
	return nil
}

// ownDir opens directory name of root (made if missing) for changes: a
// directory of the image's own layer, not a link and not a mount.
func ownDir(root int, name string) (int, error) {
	if err := unix.Mkdirat(root, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("/%s: %w", name, err)
	}
	fd, err := unix.Openat2(root, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return -1, fmt.Errorf("/%s of the image is a link, a mount or not a directory (%w): refused", name, err)
	}
	return fd, nil
}

// lookPathIn finds a program the way a shell in root would: names with a
// slash as they are, others in PATH's directories under root. The path
// returned is root's own, for exec after the chroot.
func lookPathIn(dir, name, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	for _, d := range filepath.SplitList(pathEnv) {
		if !path.IsAbs(d) {
			continue
		}
		p := path.Join(d, name)
		rel := strings.TrimPrefix(p, "/")
		if fi, err := root.Stat(rel); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
		if fi, err := root.Lstat(rel); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			// An absolute link, which os.Root does not follow: it resolves
			// in the image's root after the chroot.
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in the image (PATH %s)", name, pathEnv)
}

// remoteTransport connects to a hosted catalog server with its headers.
func remoteTransport(r *catalog.Remote) mcp.Transport {
	client := &http.Client{Transport: headerTransport{headers: r.Headers, next: http.DefaultTransport}}
	if r.Transport == "sse" {
		return &mcp.SSEClientTransport{Endpoint: r.URL, HTTPClient: client}
	}
	return &mcp.StreamableClientTransport{Endpoint: r.URL, HTTPClient: client}
}

// headerTransport adds a hosted server's headers (its key) to requests.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (h headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	return h.next.RoundTrip(req)
}
