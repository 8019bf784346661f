package gateway

import (
	"encoding/json"
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
	}
	return cmd, nil
}

// prepareRoot gives an image's root what a program expects to find: the
// sandbox's name resolution and a writable /tmp. The image is not trusted:
// every path is taken within the root (os.Root), so a link of the image's
// (etc -> /root/.ssh) cannot have the gateway, root in the sandbox, write
// outside it.
func prepareRoot(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.MkdirAll("tmp", 0o755); err != nil {
		return err
	}
	if err := root.Chmod("tmp", 0o777|os.ModeSticky); err != nil {
		return err
	}
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return err
	}
	for _, f := range []string{"resolv.conf", "hosts"} {
		b, err := os.ReadFile(filepath.Join("/etc", f))
		if err != nil {
			continue
		}
		name := path.Join("etc", f)
		root.Remove(name) // a link of the image's is replaced, never written through
		if err := root.WriteFile(name, b, 0o644); err != nil {
			return err
		}
	}
	return nil
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
