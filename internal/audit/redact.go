package audit

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
)

// Redacted replaces every secret value the rules find.
const Redacted = "[redacted]"

// secretWords are the parts of a name whose value is a secret: an env
// variable, a JSON field or a command-line flag named like TOKEN, KEY,
// SECRET or PASSWORD (in any case, anywhere in the name).
var secretWords = []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "AUTH", "SESSION", "COOKIE"}

// SecretName reports whether a value named name is a secret by rule.
func SecretName(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	// A personal access token (GH_PAT), not a PATH.
	return up == "PAT" || strings.HasSuffix(up, "_PAT")
}

// secretShapes are values that are secrets whatever they are named:
// credentials in a URL, an Authorization header's, tokens whose prefix
// says what they are, a private key (review of issue 22: these survived
// the rules by name). Each match is replaced whole, but for the part a
// reader needs (a URL's user, the scheme of an Authorization).
var secretShapes = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'"]+):[^/\s@'"]+@`), "${1}:" + Redacted + "@"},
	{regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}`), "${1}${2}" + Redacted},
	{regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b`), Redacted},
	{regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`), Redacted},
}

// Env returns env with the values of secret names replaced (SecretName),
// and each of secrets replaced wherever it appears in the others.
func Env(env map[string]string, secrets []string) map[string]string {
	if len(env) == 0 {
		return nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		if SecretName(k) {
			out[k] = Redacted
		} else {
			out[k] = String(v, secrets)
		}
	}
	return out
}

// String returns s with each of secrets replaced, and every value of a
// secret's shape (secretShapes).
func String(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= minSecret && strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	for _, sh := range secretShapes {
		s = sh.re.ReplaceAllString(s, sh.with)
	}
	return s
}

// minSecret is the shortest value replaced as a known secret: shorter
// ones ("1", "true") would blank ordinary words, and are no secret worth
// keeping.
const minSecret = 4

// JSON returns a copy of v (decoded JSON) with the values of secret fields
// replaced and each of secrets replaced in every string.
func JSON(v any, secrets []string) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			if SecretName(k) {
				out[k] = Redacted
			} else {
				out[k] = JSON(x, secrets)
			}
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = JSON(x, secrets)
		}
		return out
	case string:
		return String(t, secrets)
	}
	return v
}

// GatewaySecrets returns the values of an MCP gateway configuration (E2B's
// `mcp` option, as JSON): every string in it but the servers' names and
// field names, which are all its secrets may be (a GitHub token, an API
// key, a database URL with a password). Longest first, so that a secret
// containing another is replaced whole.
func GatewaySecrets(config []byte) []string {
	var v any
	if json.Unmarshal(config, &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch t := v.(type) {
		case map[string]any:
			for _, x := range t {
				walk(x)
			}
		case []any:
			for _, x := range t {
				walk(x)
			}
		case string:
			if len(t) >= minSecret {
				out = append(out, t)
			}
		}
	}
	walk(v)
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// gatewayConfig finds an MCP gateway's configuration in a command line, as
// the E2B SDKs start it: mcp-gateway --config '<json>'.
var gatewayConfig = regexp.MustCompile(`--config[ =]'([^']*)'`)

// assignment is NAME=value in a shell command line; flag is --name=value
// or --name value.
var (
	assignment = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)=('[^']*'|"[^"]*"|[^\s;&|]+)`)
	flag       = regexp.MustCompile(`(--?[A-Za-z][A-Za-z0-9_-]*)([ =])('[^']*'|"[^"]*"|[^\s;&|]+)`)
)

// CommandLine returns a command line with its secrets replaced: every
// value of a gateway configuration it carries (GatewaySecrets, whose
// values are also returned so that the caller can redact them from what
// follows), values assigned to secret names (TOKEN=…, --api-key …) and
// each of secrets.
func CommandLine(line string, secrets []string) (string, []string) {
	var found []string
	line = gatewayConfig.ReplaceAllStringFunc(line, func(m string) string {
		sub := gatewayConfig.FindStringSubmatch(m)
		sec := GatewaySecrets([]byte(sub[1]))
		found = append(found, sec...)
		var v any
		if json.Unmarshal([]byte(sub[1]), &v) != nil {
			return "--config '" + Redacted + "'"
		}
		b, _ := json.Marshal(redactLeaves(v))
		return "--config '" + string(b) + "'"
	})
	line = assignment.ReplaceAllStringFunc(line, func(m string) string {
		sub := assignment.FindStringSubmatch(m)
		if SecretName(sub[1]) {
			return sub[1] + "=" + Redacted
		}
		return m
	})
	line = flag.ReplaceAllStringFunc(line, func(m string) string {
		sub := flag.FindStringSubmatch(m)
		if SecretName(strings.TrimLeft(sub[1], "-")) && !strings.HasPrefix(sub[3], "-") {
			return sub[1] + sub[2] + Redacted
		}
		return m
	})
	return String(line, append(found, secrets...)), found
}

// redactLeaves replaces every string, number and bool in v, keeping the
// shape (server names and field names).
func redactLeaves(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[k] = redactLeaves(x)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = redactLeaves(x)
		}
		return out
	case nil:
		return nil
	}
	return Redacted
}
