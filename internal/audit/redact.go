package audit

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
)

// Redacted replaces every secret value the rules find.
const Redacted = "[redacted]"

// Secrets are found three ways (docs/audit.md): by the name a value is
// given (an env variable, a JSON field, NAME=value, --name value), by its
// shape whatever its name (credentials in a URL, an Authorization
// header's, tokens whose prefix says what they are), and by being a value
// known to be secret (an MCP gateway's configuration). Two outside
// reviews of issue 22 found forms these missed; each is a case of
// TestShapes.

// secretWords are the parts of a name whose value is a secret: an env
// variable, a JSON field or a command-line flag named like TOKEN, KEY,
// SECRET or PASSWORD (in any case, anywhere in the name).
var secretWords = []string{"TOKEN", "KEY", "SECRET", "PASS", "PWD", "CREDENTIAL", "CREDS", "PRIVATE", "AUTH", "SESSION", "COOKIE"}

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

// secretShapes are values that are secrets whatever they are named. Each
// match is replaced, but for the part a reader needs (a URL's user, a
// header's name, the scheme of an Authorization).
var secretShapes = []struct {
	re   *regexp.Regexp
	with string
}{
	// scheme://user:password@ and scheme://TOKEN@ (a token as the user, a
	// Sentry DSN's key).
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@'"]+):[^/\s@'"]+@`), "${1}:" + Redacted + "@"},
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[A-Za-z0-9_.-]{16,}@`), "${1}" + Redacted + "@"},
	// Bearer x, Basic x, token x.
	{regexp.MustCompile(`(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}`), "${1}${2}" + Redacted},
	// Password=x; in a connection string, api_key=x in a query.
	{regexp.MustCompile(`(?i)\b(password|pwd|secret|token|api[_-]?key|access[_-]?key)(\s*=\s*)[^;\s'"&]+`), "${1}${2}" + Redacted},
	// curl -u user:password, --user user:password.
	{regexp.MustCompile(`(\s(?:-u|--user)(?:\s+|=)[^\s:'"]+):[^\s'"]+`), "${1}:" + Redacted},
	// Passwords as short flags of tools that take them so.
	{regexp.MustCompile(`(\bsshpass\s+-p\s*)\S+`), "${1}" + Redacted},
	{regexp.MustCompile(`(\bredis-cli\b[^|;&\n]*?\s-a\s+)\S+`), "${1}" + Redacted},
	{regexp.MustCompile(`(\bmysql\w*\b[^|;&\n]*?\s-p)[^\s'"]+`), "${1}" + Redacted},
	// A value after a secret's name in snake case: aws configure set
	// aws_secret_access_key x.
	{regexp.MustCompile(`(?i)(\b(?:[A-Za-z0-9]+_)+(?:secret|token|password|passwd|key)[A-Za-z0-9_]*\s+)[^\s'"-][^\s'"]*`), "${1}" + Redacted},
	// Tokens whose prefix says what they are: GitHub, GitLab, OpenAI and
	// Stripe, Slack, AWS access keys, Hugging Face, npm, Google, Hutch's
	// (and E2B's) own API keys, JWTs.
	{regexp.MustCompile(`\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{16,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16}|hf_[A-Za-z0-9]{30,}|npm_[A-Za-z0-9]{30,}|AIza[0-9A-Za-z_-]{35}|e2b_[0-9a-f]{40}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})\b`), Redacted},
	// PEM private keys.
	{regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`), Redacted},
}

// header is a header of a secret name: X-API-Key: x, Authorization: x
// (whose scheme, Bearer x, is kept: secretShapes replaced x).
var header = regexp.MustCompile(`(?i)\b([A-Za-z0-9_-]*(?:key|token|secret|auth|password|cookie)[A-Za-z0-9_-]*)(\s*:\s*)([^\s'"]+)`)

// assignment is NAME=value (a shell's, an env file's, one in a JSON
// string); flag is --name=value or --name value. Short flags are left to
// secretShapes: -pSECRET names nothing.
var (
	assignment = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)=('[^']*'|"[^"]*"|[^\s;&|]+)`)
	flag       = regexp.MustCompile(`(--[A-Za-z][A-Za-z0-9_-]*)([ =])('[^']*'|"[^"]*"|[^\s;&|]+)`)
)

// Env returns env with the values of secret names replaced (SecretName),
// and the rest redacted as String does.
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
// secret's shape (secretShapes) or assigned to a secret's name.
func String(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= minSecret && strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	for _, sh := range secretShapes {
		s = sh.re.ReplaceAllString(s, sh.with)
	}
	s = header.ReplaceAllStringFunc(s, func(m string) string {
		sub := header.FindStringSubmatch(m)
		switch strings.ToLower(sub[3]) {
		case "bearer", "basic", "token", strings.ToLower(Redacted):
			return m
		}
		return sub[1] + sub[2] + Redacted
	})
	s = assignment.ReplaceAllStringFunc(s, func(m string) string {
		sub := assignment.FindStringSubmatch(m)
		if SecretName(sub[1]) {
			return sub[1] + "=" + Redacted
		}
		return m
	})
	return flag.ReplaceAllStringFunc(s, func(m string) string {
		sub := flag.FindStringSubmatch(m)
		if SecretName(strings.TrimLeft(sub[1], "-")) && !strings.HasPrefix(sub[3], "-") {
			return sub[1] + sub[2] + Redacted
		}
		return m
	})
}

// minSecret is the shortest value replaced as a known secret: shorter
// ones ("1", "true") would blank ordinary words, and are no secret worth
// keeping.
const minSecret = 4

// JSON returns a copy of v (decoded JSON) with the values of secret fields
// replaced and every string redacted as String does.
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

// configFlag is where an MCP gateway's configuration starts in a command
// line, as the E2B SDKs start it: mcp-gateway --config '<json>'.
var configFlag = regexp.MustCompile(`--config[ =]`)

// CommandLine returns a command line with its secrets replaced: every
// value of a gateway configuration it carries (GatewaySecrets, whose
// values are also returned so that the caller can redact them from what
// follows), and what String replaces.
func CommandLine(line string, secrets []string) (string, []string) {
	var (
		b     strings.Builder
		found []string
	)
	for {
		loc := configFlag.FindStringIndex(line)
		if loc == nil {
			b.WriteString(line)
			break
		}
		b.WriteString(line[:loc[1]])
		word, n := shellWord(line[loc[1]:])
		var v any
		if n == 0 {
			// Nothing after it: no configuration.
		} else if json.Unmarshal([]byte(word), &v) != nil {
			b.WriteString("'" + Redacted + "'")
		} else {
			found = append(found, GatewaySecrets([]byte(word))...)
			red, _ := json.Marshal(redactLeaves(v))
			b.WriteString(shellQuote(string(red)))
		}
		line = line[loc[1]+n:]
	}
	return String(b.String(), append(found, secrets...)), found
}

// shellWord reads the shell word at the start of s, as a POSIX shell
// would: '…' and "…" (with \ escapes) quoting and unquoted runs, joined
// until a blank or an operator; it returns the word's value and how many
// bytes of s it took. Hand-written: the E2B SDKs quote a configuration
// with a ' in it as '"'"', which ended a pattern's match early and left
// the values after it in clear (review of issue 22).
func shellWord(s string) (string, int) {
	var w strings.Builder
	i := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				w.WriteString(s[i+1:])
				return w.String(), len(s)
			}
			w.WriteString(s[i+1 : i+1+j])
			i += j + 2
		case c == '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("$`\"\\\n", s[i+1]) >= 0 {
					i++
				}
				w.WriteByte(s[i])
				i++
			}
			i++
		case c == '\\' && i+1 < len(s):
			w.WriteByte(s[i+1])
			i += 2
		case c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|':
			return w.String(), i
		default:
			w.WriteByte(c)
			i++
		}
	}
	return w.String(), min(i, len(s))
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
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
