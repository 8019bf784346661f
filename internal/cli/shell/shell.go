// Package shell quotes words for a POSIX shell (bash -c), so that a list of
// arguments survives the round trip through a command string unchanged.
package shell

import "strings"

// Quote returns s quoted for a POSIX shell: unchanged when it consists only
// of characters no shell treats specially, else in single quotes, with
// each single quote inside written as
//
//	'\''
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if strings.IndexFunc(s, special) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// special reports whether r needs quoting. Only these are safe bare:
// letters, digits and @%+=:,./_-
func special(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	case strings.ContainsRune("@%+=:,./_-", r):
		return false
	}
	return true
}

// Join quotes each word and joins them with spaces, giving a command line
// a shell splits back into exactly words.
func Join(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Quote(w)
	}
	return strings.Join(q, " ")
}
