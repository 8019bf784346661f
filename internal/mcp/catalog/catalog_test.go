package catalog

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestCatalogWellFormed: every entry can be resolved: a server has an
// image, a remote a URL, every template names a field of the entry and a
// filter the resolver knows, and a configuration with every field given
// resolves.
func TestCatalogWellFormed(t *testing.T) {
	c := Load()
	if len(c.Names()) < 265 {
		t.Errorf("%d servers, want at least E2B's 265", len(c.Names()))
	}
	for _, name := range c.Names() {
		e := c.Lookup(name)
		switch e.Type {
		case "server":
			if e.Image == "" {
				t.Errorf("%s: a server without an image", name)
			}
		case "remote":
			if e.Remote == nil || !strings.HasPrefix(e.Remote.URL, "https://") {
				t.Errorf("%s: a remote without an https URL", name)
			}
		default:
			t.Errorf("%s: type %q", name, e.Type)
		}
		if e.Unsupported != "" {
			continue
		}
		cfg := map[string]any{}
		for f, spec := range e.Fields {
			if spec.List {
				cfg[f] = []string{"/home/user/" + f}
			} else {
				cfg[f] = "/home/user/" + f
			}
		}
		raw, _ := json.Marshal(cfg)
		if _, err := e.Resolve(raw); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestResolve(t *testing.T) {
	e := &Entry{
		Type: "server", Image: "mcp/x",
		Fields: map[string]Field{
			"apiKey": {Secret: true, Env: "X_API_KEY", Required: true},
			"paths":  {List: true},
			"mode":   {},
		},
		Env:     map[string]string{"MODE": "{{mode|or:fast}}", "CONST": "1"},
		Command: []string{"{{paths|volume-target|into}}", "--mode={{mode}}"},
		Volumes: []string{"{{paths|volume|into}}", "cache:/data", "{{mode}}:/etc/mode:ro"},
	}
	tests := []struct {
		name string
		cfg  string
		want *Resolved
		err  string
	}{
		{"all", `{"apiKey":"k","paths":["/a","/b"],"mode":"slow","allowTools":["t"]}`, &Resolved{
			Image: "mcp/x", Env: map[string]string{"X_API_KEY": "k", "MODE": "slow", "CONST": "1"},
			Args:  []string{"/a", "/b", "--mode=slow"},
			Binds: []Bind{{"/a", "/a", false}, {"/b", "/b", false}},
		}, ""},
		{"defaults", `{"apiKey":"k"}`, &Resolved{
			Image: "mcp/x", Env: map[string]string{"X_API_KEY": "k", "MODE": "fast", "CONST": "1"},
			Args: []string{"--mode="},
		}, ""},
		{"missing", `{}`, nil, `missing required field(s) "apiKey"`},
		{"unknown", `{"apiKey":"k","token":"t"}`, nil, `unknown field "token" (this server takes: apiKey, mode, paths)`},
		{"not a string", `{"apiKey":["k"]}`, nil, `field "apiKey" must be a string`},
		{"not a list", `{"apiKey":"k","paths":[1]}`, nil, `field "paths" must be a list of strings`},
		{"not an object", `[]`, nil, `configuration is not an object`},
		{"too many paths", `{"apiKey":"k","paths":["/a","/a","/a","/a","/a","/a","/a","/a","/a","/a","/a","/a","/a","/a","/a","/a","/a"]}`, nil, `field "paths" has 17 values, at most 16`},
		{"a colon in a path", `{"apiKey":"k","paths":["/home/user/.bashrc:/run/x"]}`, nil, `field "paths": a path here may not contain ":"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.Resolve(json.RawMessage(tt.cfg))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestMirror(t *testing.T) {
	for _, tt := range []struct{ ref, mirror, want string }{
		{"mcp/brave-search", "", "mcp/brave-search"},
		{"mcp/brave-search", "127.0.0.1:5000", "127.0.0.1:5000/mcp/brave-search"},
		{"docker.io/mcp/brave-search:latest", "127.0.0.1:5000", "127.0.0.1:5000/mcp/brave-search:latest"},
		{"ghcr.io/org/srv:1", "mirror.example/hub", "mirror.example/hub/ghcr.io/org/srv:1"},
		{"dhi.io/filesystem-mcp", "127.0.0.1:5000", "127.0.0.1:5000/dhi.io/filesystem-mcp"},
		{"index.docker.io/mcp/x", "127.0.0.1:5000", "127.0.0.1:5000/mcp/x"},
	} {
		got, err := Mirror(tt.ref, tt.mirror)
		if err != nil || got != tt.want {
			t.Errorf("Mirror(%q, %q) = %q, %v; want %q", tt.ref, tt.mirror, got, err, tt.want)
		}
	}
}
