package audit

import (
	"strings"
	"testing"
	"unicode"
)

// alnumSecret reports whether s is a secret the properties below hold for:
// four or more letters and digits, none of Redacted's own text. (A secret
// of punctuation could be formed again by the quoting or the brackets the
// redaction adds.)
func alnumSecret(s string) bool {
	if len(s) < minSecret || strings.Contains(Redacted, s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// maxFuzzInput bounds the inputs the redaction's targets take: its
// regular expressions run in linear time (RE2), and the fuzzer's large
// inputs only make each execution, and the minimizing of what it finds,
// slow enough to pass the run's deadline (Go reports that as a failure).
const maxFuzzInput = 4 << 10

// FuzzString: redaction never panics, and a known secret never survives
// it.
func FuzzString(f *testing.F) {
	for _, s := range []string{
		"curl -H 'Authorization: Bearer sk-live-abcdefgh12345678' x",
		"psql postgresql://app:PgPass1234@db/x",
		"GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123 gh repo list",
		"mysql -u root -pSECRETpw db",
		"-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
	} {
		f.Add(s, "hunter22")
	}
	f.Fuzz(func(t *testing.T, s, secret string) {
		if len(s) > maxFuzzInput {
			return
		}
		got := String(s, []string{secret})
		if alnumSecret(secret) && strings.Contains(got, secret) {
			t.Fatalf("String(%q, %q) = %q: the secret survived", s, secret, got)
		}
	})
}

// FuzzCommandLine: a command line's gateway configuration is read as a
// shell reads it, whatever the line; every value found in it is gone from
// the line returned.
func FuzzCommandLine(f *testing.F) {
	for _, s := range []string{
		`mcp-gateway --config '{"githubOfficial":{"githubPersonalAccessToken":"ghp_zzzzzzzzzzzz"}}'`,
		`mcp-gateway --config '{"a":{"note":"it'"'"'s"},"b":{"k":"valuevalue"}}' && echo done`,
		`x --config="{\"a\":{\"b\":\"cdefgh\"}}"`,
		`--config`,
		`--config '`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if len(line) > maxFuzzInput {
			return
		}
		got, found := CommandLine(line, nil)
		for _, sec := range found {
			if alnumSecret(sec) && strings.Contains(got, sec) {
				t.Fatalf("CommandLine(%q) = %q: the configuration's value %q survived", line, got, sec)
			}
		}
	})
}

// FuzzShellWord: a word is read within its text, however it is quoted.
func FuzzShellWord(f *testing.F) {
	for _, s := range []string{`'a'"b"c d`, `"a\"b" x`, `'unterminated`, `\`, `a\ b`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, n := shellWord(s)
		if n < 0 || n > len(s) || len(w) > len(s) {
			t.Fatalf("shellWord(%q) = %q, %d", s, w, n)
		}
	})
}
