// Package catalog is Hutch's copy of the MCP servers E2B's SDK names in
// its `mcp` option (the McpServer type, taken from Docker's MCP Catalog):
// for each name, the image or hosted URL that runs it and how each of the
// SDK's configuration fields reaches the server — an environment
// variable, a secret, an argument, a directory.
//
// catalog.json is written by the project from the public catalog's facts
// (the docker/mcp-registry repository's servers/<name>/server.yaml, the
// file and commit named in each entry) and versioned with the code; a test
// in test/mcp fails when the pinned E2B SDK names a server it lacks.
// Resolve turns a name and a sandbox creator's configuration into what to
// run; the host (to pull images and bind directories) and the in-sandbox
// gateway (to start the server) both use it, so they agree.
package catalog

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
)

//go:embed catalog.json
var catalogJSON []byte

// Entry is one catalog server, as catalog.json writes it.
type Entry struct {
	// Title is the catalog's name for it; Registry and Commit the
	// server.yaml it was read from.
	Title    string `json:"title"`
	Registry string `json:"registry"`
	Commit   string `json:"commit"`
	// Type is "server" (a stdio server run from Image) or "remote" (a
	// hosted server at Remote.URL).
	Type  string `json:"type"`
	Image string `json:"image,omitempty"`
	// Fields are the SDK's configuration fields, by the SDK's names.
	Fields map[string]Field `json:"fields,omitempty"`
	// Env are environment variables whose values are templates of fields
	// ("{{field}}") or constants.
	Env map[string]string `json:"env,omitempty"`
	// Command are arguments after the image's entrypoint, templated.
	Command []string `json:"command,omitempty"`
	// Volumes are "source:target" templates: a directory of the sandbox
	// shown at target in the image's root. A source that is not a path
	// is a volume of Docker's own (a named one) and needs nothing here:
	// the image's root is writable.
	Volumes []string `json:"volumes,omitempty"`
	// AllowHosts are the hosts the server reaches; DisableNetwork says it
	// needs none.
	AllowHosts     []string `json:"allowHosts,omitempty"`
	DisableNetwork bool     `json:"disableNetwork,omitempty"`
	// User is the user the catalog runs the image as, if not its own.
	User   string  `json:"user,omitempty"`
	Remote *Remote `json:"remote,omitempty"`
	// Unsupported, when set, says why the server cannot run in a sandbox.
	Unsupported string `json:"unsupported,omitempty"`
	Note        string `json:"note,omitempty"`
}

// Field is one configuration field of a server.
type Field struct {
	// Secret fields are delivered as the environment variable Env.
	Secret   bool   `json:"secret,omitempty"`
	Env      string `json:"env,omitempty"`
	Required bool   `json:"required,omitempty"`
	// List fields take a list of strings.
	List bool `json:"list,omitempty"`
}

// Remote is a hosted server.
type Remote struct {
	URL string `json:"url"`
	// Transport is "streamable-http" or "sse".
	Transport string            `json:"transport"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// Catalog is the parsed catalog.json.
type Catalog struct {
	entries map[string]*Entry
}

// Load returns the catalog built into this binary. It is parsed once;
// every call returns the same read-only catalog.
var Load = sync.OnceValue(func() *Catalog {
	var entries map[string]*Entry
	if err := json.Unmarshal(catalogJSON, &entries); err != nil {
		panic("catalog.json: " + err.Error()) // a test parses it: never in a build
	}
	return &Catalog{entries: entries}
})

// Lookup returns the entry of a name, nil if the catalog has none.
func (c *Catalog) Lookup(name string) *Entry { return c.entries[name] }

// Names are the catalog's server names, sorted.
func (c *Catalog) Names() []string { return slices.Sorted(maps.Keys(c.entries)) }

// Resolved is what running one configured catalog server takes.
type Resolved struct {
	// Image is the image reference to run (a "server"); Remote the hosted
	// server (a "remote"), its headers' templates filled in.
	Image  string
	Remote *Remote
	// Env is the server's own environment: the catalog's variables and
	// the secrets given (never another server's).
	Env map[string]string
	// Args follow the image's entrypoint.
	Args []string
	// Binds are directories of the sandbox shown in the image's root.
	Binds []Bind
	// AllowHosts are the hosts it reaches (the remote's host included).
	AllowHosts []string
}

// Bind is a directory or file of the sandbox (From) shown in an image's
// root (To), read-only when the catalog says ":ro".
type Bind struct {
	From, To string
	ReadOnly bool
}

// Resolve checks a configuration of the server called name against the
// entry's fields (unknown fields, missing required ones and wrong types
// are errors naming them) and fills in the entry's templates with it.
// "allowTools" and "denyTools" are the gateway's, not the server's, and
// are ignored here.
func (e *Entry) Resolve(raw json.RawMessage) (*Resolved, error) {
	if e.Unsupported != "" {
		return nil, fmt.Errorf("cannot run in a sandbox: %s", e.Unsupported)
	}
	var given map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &given); err != nil {
			return nil, fmt.Errorf("configuration is not an object: %w", err)
		}
	}
	delete(given, "allowTools")
	delete(given, "denyTools")
	vals := map[string][]string{}
	for name, v := range given {
		f, ok := e.Fields[name]
		if !ok {
			known := slices.Sorted(maps.Keys(e.Fields))
			if len(known) == 0 {
				return nil, fmt.Errorf("unknown field %q (this server takes no configuration)", name)
			}
			return nil, fmt.Errorf("unknown field %q (this server takes: %s)", name, strings.Join(known, ", "))
		}
		list, err := values(name, v, f.List)
		if err != nil {
			return nil, err
		}
		vals[name] = list
	}
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(e.Fields)) {
		if e.Fields[name].Required && len(vals[name]) == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing required field(s) %s (E2B's SDK types them as required)", strings.Join(quote(missing), ", "))
	}
	r := &Resolved{Image: e.Image, Env: map[string]string{}, AllowHosts: slices.Clone(e.AllowHosts)}
	for name, f := range e.Fields {
		if f.Secret && f.Env != "" && len(vals[name]) > 0 {
			r.Env[f.Env] = strings.Join(vals[name], ",")
		}
	}
	for k, tpl := range e.Env {
		v, err := expand(tpl, vals, false)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", k, err)
		}
		if s := strings.Join(v, ","); s != "" || !strings.Contains(tpl, "{{") {
			r.Env[k] = s
		}
	}
	for _, tpl := range e.Command {
		v, err := expand(tpl, vals, true)
		if err != nil {
			return nil, fmt.Errorf("command: %w", err)
		}
		r.Args = append(r.Args, v...)
	}
	for _, tpl := range e.Volumes {
		for _, m := range fieldRef.FindAllStringSubmatch(tpl, -1) {
			for _, v := range vals[m[1]] {
				if strings.Contains(v, ":") {
					// It would pick the bind's target or options.
					return nil, fmt.Errorf("field %q: a path here may not contain \":\" (%q)", m[1], v)
				}
			}
		}
		vs, err := expand(tpl, vals, true)
		if err != nil {
			return nil, fmt.Errorf("volume: %w", err)
		}
		for _, v := range vs {
			from, to, ok := strings.Cut(v, ":")
			if !ok || !path.IsAbs(from) {
				continue // a named volume of Docker's (the root is writable), or an optional field not given
			}
			to, opts, _ := strings.Cut(to, ":")
			if !path.IsAbs(to) {
				return nil, fmt.Errorf("volume %q: the target is not an absolute path", v)
			}
			if opts != "" && opts != "ro" && opts != "rw" {
				return nil, fmt.Errorf("volume %q: unknown options %q", v, opts)
			}
			r.Binds = append(r.Binds, Bind{From: path.Clean(from), To: path.Clean(to), ReadOnly: opts == "ro"})
		}
	}
	if e.Remote != nil {
		rem := &Remote{URL: e.Remote.URL, Transport: e.Remote.Transport, Headers: map[string]string{}}
		for k, tpl := range e.Remote.Headers {
			v, err := expand(tpl, vals, false)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", k, err)
			}
			rem.Headers[k] = strings.Join(v, ",")
		}
		r.Remote = rem
	}
	return r, nil
}

// fieldRef finds the fields a template names.
var fieldRef = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_]+)`)

// MaxListValues bounds the values of a list field.
const MaxListValues = 16

// values checks a field's value: a string (or a list of strings for a
// list field; a single string is taken as a list of one).
func values(name string, v any, list bool) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case []any:
		if !list {
			return nil, fmt.Errorf("field %q must be a string", name)
		}
		if len(v) > MaxListValues {
			// Each may be a directory shown to the server, a mount.
			return nil, fmt.Errorf("field %q has %d values, at most %d", name, len(v), MaxListValues)
		}
		out := make([]string, 0, len(v))
		for _, item := range v {
			s, ok := item.(string)
			if !ok {
				return nil, fmt.Errorf("field %q must be a list of strings", name)
			}
			out = append(out, s)
		}
		return out, nil
	case bool, float64:
		// The SDK types every field as a string; numbers and booleans
		// written without quotes mean the same.
		b, _ := json.Marshal(v)
		return []string{string(b)}, nil
	}
	if list {
		return nil, fmt.Errorf("field %q must be a list of strings", name)
	}
	return nil, fmt.Errorf("field %q must be a string", name)
}

func quote(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// expand fills in the "{{field|filter|...}}" templates of tpl, Docker's
// catalog's syntax (its filters: "volume" → "path:path", "volume-target" →
// the path as the image sees it, "into" → one value per list item, "or:x"
// → x when the field is not given). Without "into" a list is joined with
// commas. multi allows "into". Written here: the syntax is the catalog's
// own and small, no library parses it.
func expand(tpl string, vals map[string][]string, multi bool) ([]string, error) {
	var prefix strings.Builder
	rest := tpl
	var items []string
	into := false
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			break
		}
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			return nil, fmt.Errorf("unclosed template in %q", tpl)
		}
		prefix.WriteString(rest[:i])
		parts := strings.Split(strings.TrimSpace(rest[i+2:i+j]), "|")
		v := slices.Clone(vals[parts[0]])
		each := func(f func(string) string) {
			for k := range v {
				v[k] = f(v[k])
			}
		}
		thisInto := false
		for _, filter := range parts[1:] {
			switch name, arg, _ := strings.Cut(filter, ":"); name {
			case "or":
				if len(v) == 0 && arg != "" && arg != "[]" {
					v = []string{arg}
				}
			case "volume":
				each(func(s string) string { return s + ":" + s })
			case "volume-target":
			case "into":
				thisInto = true
			default:
				return nil, fmt.Errorf("unknown template filter %q in %q", name, tpl)
			}
		}
		if thisInto {
			if !multi || into || strings.TrimSpace(rest[:i]) != "" {
				return nil, fmt.Errorf("template %q: \"into\" must stand alone", tpl)
			}
			into, items = true, v
		} else {
			prefix.WriteString(strings.Join(v, ","))
		}
		rest = rest[i+j+2:]
	}
	if into {
		return items, nil
	}
	prefix.WriteString(rest)
	return []string{prefix.String()}, nil
}

// Mirror is image reference ref pulled from mirror instead of its own
// registry: mirror ("host[:port][/prefix]") takes the place of Docker
// Hub, the repository path kept ("mcp/notion" is mirror/mcp/notion), and
// an image of another registry is under that registry's name there
// ("ghcr.io/org/srv" is mirror/ghcr.io/org/srv), so no two images meet
// at one path. An empty mirror leaves ref as it is.
func Mirror(ref, mirror string) (string, error) {
	if mirror == "" {
		return ref, nil
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", ref, err)
	}
	repo := r.Context().RepositoryStr()
	if reg := r.Context().RegistryStr(); reg != name.DefaultRegistry {
		repo = reg + "/" + repo
	}
	out := strings.TrimSuffix(mirror, "/") + "/" + repo
	switch v := r.(type) {
	case name.Digest:
		out += "@" + v.DigestStr()
	case name.Tag:
		if strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
			out += ":" + v.TagStr()
		}
	}
	return out, nil
}
