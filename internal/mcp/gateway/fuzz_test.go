package gateway

import "testing"

// FuzzParseConfig: any `mcp` option parses or is refused with an error,
// never a panic, and every server it gives has a name and a command.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"memory":{},"filesystem":{"paths":["/home/user","/tmp"]}}`,
		`{"githubOfficial":{"githubPersonalAccessToken":"ghp_x"}}`,
		`{"py":{"command":"python3","args":["s.py"],"env":{"K":"v"},"allowTools":["a"],"denyTools":["b"]}}`,
		`{"github/acme/tools.mcp":{"runCmd":"node dist/index.js","installCmd":"npm ci","envs":{"T":"1"}}}`,
		`{"nope":{}}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		servers, err := ParseConfig(raw)
		if err != nil {
			return
		}
		for _, s := range servers {
			if s.Name == "" || s.Command == "" {
				t.Fatalf("ParseConfig(%q) gave a server without a name or command: %+v", raw, s)
			}
		}
	})
}
