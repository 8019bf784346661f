package gateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Entry says how to run a catalog server from its configuration fields.
type Entry struct {
	// Command and Args run it.
	Command string
	Args    []string
	// ArgsField, if set, names a list field whose values are appended to
	// Args ("paths" of filesystem).
	ArgsField string
	// Env maps configuration fields (as E2B's SDK types name them) to the
	// environment variables the server reads.
	Env map[string]string
	// Required lists the fields that must be given.
	Required []string
	// Download is what it fetches at start (for npx servers), empty for
	// servers preinstalled in the mcp-gateway template.
	Download string
}

// Catalog maps the server names of E2B's SDK types (McpServer) to how to
// run them. The first four are preinstalled in the mcp-gateway template and
// run offline; the others fetch their package with npx when they start,
// which needs the sandbox's internet access. A name not here can still be
// run with {"command": …}.
var Catalog = map[string]*Entry{
	"filesystem":         {Command: "mcp-server-filesystem", ArgsField: "paths", Required: []string{"paths"}},
	"memory":             {Command: "mcp-server-memory", Env: map[string]string{"memoryFilePath": "MEMORY_FILE_PATH"}},
	"everything":         {Command: "mcp-server-everything", Args: []string{"stdio"}},
	"sequentialThinking": {Command: "mcp-server-sequential-thinking"},
	"githubOfficial": {Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-github"},
		Env: map[string]string{"githubPersonalAccessToken": "GITHUB_PERSONAL_ACCESS_TOKEN"}, Required: []string{"githubPersonalAccessToken"}, Download: "npx @modelcontextprotocol/server-github"},
	"notion": {Command: "npx", Args: []string{"-y", "@notionhq/notion-mcp-server"},
		Env: map[string]string{"internalIntegrationToken": "NOTION_TOKEN"}, Required: []string{"internalIntegrationToken"}, Download: "npx @notionhq/notion-mcp-server"},
	"exa": {Command: "npx", Args: []string{"-y", "exa-mcp-server"},
		Env: map[string]string{"apiKey": "EXA_API_KEY"}, Required: []string{"apiKey"}, Download: "npx exa-mcp-server"},
	"brave": {Command: "npx", Args: []string{"-y", "@brave/brave-search-mcp-server"},
		Env: map[string]string{"apiKey": "BRAVE_API_KEY"}, Required: []string{"apiKey"}, Download: "npx @brave/brave-search-mcp-server"},
	"fetch": {Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-fetch"}, Download: "npx @modelcontextprotocol/server-fetch"},
}

// resolve turns a catalog server's configuration into a Server.
func (e *Entry) resolve(name string, raw json.RawMessage) (*Server, error) {
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	delete(fields, "allowTools")
	delete(fields, "denyTools")
	s := &Server{Name: name, Command: e.Command, Args: slices.Clone(e.Args), Env: map[string]string{}, Download: e.Download}
	for _, f := range e.Required {
		if _, ok := fields[f]; !ok {
			return nil, fmt.Errorf("%q is required", f)
		}
	}
	for f, v := range fields {
		switch {
		case f == e.ArgsField:
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				return nil, fmt.Errorf("%q must be a non-empty list of strings", f)
			}
			for _, item := range list {
				str, ok := item.(string)
				if !ok {
					return nil, fmt.Errorf("%q must be a list of strings", f)
				}
				s.Args = append(s.Args, str)
			}
		case e.Env[f] != "":
			str, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("%q must be a string", f)
			}
			s.Env[e.Env[f]] = str
		default:
			known := slices.Sorted(maps.Keys(e.Env))
			if e.ArgsField != "" {
				known = append(known, e.ArgsField)
			}
			return nil, fmt.Errorf("unknown field %q (this server takes: %s)", f, strings.Join(known, ", "))
		}
	}
	return s, nil
}
