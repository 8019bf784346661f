// Package gateway is the MCP gateway that runs inside a sandbox: it starts
// the stdio MCP servers its configuration names, keeps one process per
// server (restarted with backoff when it crashes), and serves their tools,
// prompts and resources together, prefixed "server__name", over streamable
// HTTP behind a bearer token. It is what E2B's SDK starts for
// Sandbox.create({mcp: ...}): `mcp-gateway --config '<json>'` in a sandbox
// of the mcp-gateway template, then port 50005, path /mcp.
//
// MCP servers are untrusted code; here each runs in the sandbox with only
// its own environment (its secrets are never visible to another server),
// and the sandbox is the boundary.
package gateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/hutch-sandbox/hutch/internal/mcp/catalog"
)

// Server is one configured upstream MCP server, resolved from the config.
type Server struct {
	// Name is the key in the config; tools are exposed as Name__tool.
	Name string
	// Command and Args start it; it speaks MCP on stdin/stdout.
	Command string
	Args    []string
	// Env is its whole environment besides a minimal base (PATH, HOME,
	// LANG): secrets given to it reach it alone.
	Env map[string]string
	// Dir is its working directory; empty means the workspace.
	Dir string
	// Install, if set, runs once (sh -c, in Dir) before the first start.
	Install string
	// Download names what the server fetches from the internet when it
	// starts or installs (an npx package, a git repository); empty when it
	// runs offline.
	Download string
	// Root, when set, is the root of the server's image in the sandbox
	// (ImageRoot): Command and Args are then the image's entrypoint and
	// the catalog's arguments, read at start from Root+".json", and the
	// server runs chrooted there as a user of its own (UID).
	Root string
	UID  int
	// Image names the image Root holds, for messages.
	Image string
	// Binds are the sandbox's directories the host shows in Root.
	Binds []catalog.Bind
	// Remote, when set, is a hosted server the gateway connects to in
	// place of starting a process.
	Remote *catalog.Remote
	// AllowTools, if not empty, lists the only tools exposed; DenyTools
	// lists tools never exposed. Names are the upstream's, unprefixed.
	AllowTools, DenyTools []string
}

// exposes reports whether the server's tool name is exposed.
func (s *Server) exposes(tool string) bool {
	if slices.Contains(s.DenyTools, tool) {
		return false
	}
	return len(s.AllowTools) == 0 || slices.Contains(s.AllowTools, tool)
}

// Separator joins a server's name and a tool's, prompt's or resource
// template's name: "memory__create_entities".
const Separator = "__"

// serverName is what a server may be called: it becomes a prefix of tool
// names, which clients restrict to [a-zA-Z0-9_-].
var serverName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9-]*$`)

// ParseConfig reads the JSON object E2B's SDK passes as --config: keys are
// server names, values their configuration, in one of three forms:
//
//   - a catalog name ("memory", "filesystem", "githubOfficial", …) with the
//     catalog's fields ({"paths": [...]}, {"apiKey": "…"}), turned into
//     arguments and environment variables (see Catalog);
//   - "github/<owner>/<repo>": {"runCmd", "installCmd"?, "envs"?}, as E2B's
//     SDK types it: the repository is cloned, installCmd run in it, then
//     runCmd;
//   - any other name: {"command", "args"?, "env"?}, a stdio server to run.
//
// Every form also takes "allowTools" and "denyTools" (lists of the
// server's own tool names). Servers come back sorted by name.
func ParseConfig(raw []byte) ([]*Server, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("config is not a JSON object of servers: %w", err)
	}
	if len(cfg) == 0 {
		return nil, fmt.Errorf("config names no MCP server")
	}
	var out []*Server
	for _, key := range slices.Sorted(maps.Keys(cfg)) {
		s, err := parseServer(key, cfg[key])
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", key, err)
		}
		if s.Root != "" {
			s.UID = imageUIDBase + len(out)
		}
		out = append(out, s)
	}
	return out, nil
}

// common holds the fields every form takes.
type common struct {
	AllowTools []string `json:"allowTools"`
	DenyTools  []string `json:"denyTools"`
}

func parseServer(key string, raw json.RawMessage) (*Server, error) {
	var c common
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("configuration is not an object: %w", err)
	}
	var s *Server
	var err error
	switch {
	case strings.HasPrefix(key, "github/"):
		s, err = githubServer(key, raw)
	case Catalog[key] != nil:
		s, err = Catalog[key].resolve(key, raw)
	case catalog.Load().Lookup(key) != nil:
		s, err = catalogServer(key, catalog.Load().Lookup(key), raw)
	default:
		if !serverName.MatchString(key) {
			return nil, fmt.Errorf("not in the catalog, and not a usable name (letters, digits and -) for a {command, args, env} server")
		}
		s, err = commandServer(key, raw)
	}
	if err != nil {
		return nil, err
	}
	s.AllowTools, s.DenyTools = c.AllowTools, c.DenyTools
	return s, nil
}

func commandServer(key string, raw json.RawMessage) (*Server, error) {
	var c struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
		Cwd     string            `json:"cwd"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	if c.Command == "" {
		return nil, fmt.Errorf("not in the catalog (E2B's SDK names its servers; Hutch's copy is internal/mcp/catalog/catalog.json, see docs/mcp-gateway.md) and no \"command\" given")
	}
	s := &Server{Name: key, Command: c.Command, Args: c.Args, Env: c.Env, Dir: c.Cwd}
	if c.Command == "npx" || c.Command == "uvx" {
		s.Download = c.Command + " " + strings.Join(c.Args, " ")
	}
	return s, nil
}

// githubRepo is owner/repo as GitHub allows them.
var githubRepo = regexp.MustCompile(`^github/([A-Za-z0-9-]+)/([A-Za-z0-9._-]+)$`)

func githubServer(key string, raw json.RawMessage) (*Server, error) {
	m := githubRepo.FindStringSubmatch(key)
	if m == nil || m[2] == "." || m[2] == ".." {
		return nil, fmt.Errorf("want github/<owner>/<repo>")
	}
	var c struct {
		RunCmd     string            `json:"runCmd"`
		InstallCmd string            `json:"installCmd"`
		Envs       map[string]string `json:"envs"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	if c.RunCmd == "" {
		return nil, fmt.Errorf("runCmd is required")
	}
	url := "https://github.com/" + m[1] + "/" + m[2]
	dir := "/opt/mcp/github/" + m[1] + "/" + m[2]
	install := fmt.Sprintf("test -d %s/.git || git clone --depth 1 %s %s", dir, url, dir)
	if c.InstallCmd != "" {
		install += " && cd " + dir + " && " + c.InstallCmd
	}
	name := m[1] + "-" + strings.ReplaceAll(m[2], ".", "-")
	return &Server{Name: name, Command: "/bin/sh", Args: []string{"-c", c.RunCmd}, Env: c.Envs, Dir: dir, Install: install, Download: url}, nil
}

// ImagesDir is where the host shows catalog servers' images in a sandbox:
// ImageRoot(name) each, its config beside it (see sandbox.ImageConfig).
const ImagesDir = "/opt/mcp/images"

// ImageRoot is where the image of catalog server name is in a sandbox.
func ImageRoot(name string) string { return ImagesDir + "/" + name }

// imageUIDBase is the first uid servers run from images get: each its own
// (imageUIDBase + its index among the image servers), so no server reads
// another's environment (its secrets) through /proc.
const imageUIDBase = 61000

// catalogServer is a server of the catalog Hutch has no package run for:
// run from its image, or connected to where it is hosted.
func catalogServer(key string, e *catalog.Entry, raw json.RawMessage) (*Server, error) {
	r, err := e.Resolve(raw)
	if err != nil {
		return nil, err
	}
	if r.Remote != nil {
		return &Server{Name: key, Remote: r.Remote, Download: r.Remote.URL}, nil
	}
	if r.Image == "" {
		return nil, fmt.Errorf("the catalog names no image for it")
	}
	return &Server{Name: key, Root: ImageRoot(key), Image: r.Image, Args: r.Args, Env: r.Env, Binds: r.Binds}, nil
}
