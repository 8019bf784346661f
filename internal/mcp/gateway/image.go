package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutch-sandbox/hutch/internal/mcp/catalog"
)

// imageConfig is what the host writes beside an image's root (the
// sandbox package's ImageConfig; the JSON names are the contract).
type imageConfig struct {
	Cmd        []string `json:"cmd"`
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
		// image args…` does; the config keeps entrypoint and CMD together,
		// so they follow the entrypoint when the image has one.
		argv = append(entrypointOf(cfg.Cmd), s.Args...)
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

// entrypointOf guesses the entrypoint part of an image's Entrypoint+Cmd:
// the config keeps them joined. Images of the catalog run their server as
// the entrypoint with flags after it, so it is the first word, or the
// first two when the first is an interpreter (node, python, sh …).
func entrypointOf(cmd []string) []string {
	if len(cmd) == 0 {
		return nil
	}
	switch path.Base(cmd[0]) {
	case "node", "python", "python3", "uv", "uvx", "npx", "sh", "bash", "java", "deno", "bun":
		if len(cmd) > 1 {
			return cmd[:2]
		}
	}
	return cmd[:1]
}

// prepareRoot gives an image's root what a program expects to find: the
// sandbox's name resolution and a writable /tmp.
func prepareRoot(root string) error {
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return err
	}
	for _, f := range []string{"resolv.conf", "hosts"} {
		b, err := os.ReadFile(filepath.Join("/etc", f))
		if err != nil {
			continue
		}
		dst := filepath.Join(root, "etc", f)
		os.Remove(dst) // a link of the image's is replaced, never written through
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// lookPathIn finds a program the way a shell in root would: names with a
// slash as they are, others in PATH's directories under root. The path
// returned is root's own, for exec after the chroot.
func lookPathIn(root, name, pathEnv string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if !path.IsAbs(dir) {
			continue
		}
		p := path.Join(dir, name)
		if fi, err := os.Stat(filepath.Join(root, p)); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
		if fi, err := os.Lstat(filepath.Join(root, p)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			// A link (absolute ones resolve in the root after the chroot).
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
