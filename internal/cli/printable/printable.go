// Package printable makes text that came from a sandbox safe to show on
// a terminal. A sandbox's root chooses its log entries, its processes'
// command lines, its file names and the error messages its tools print;
// written raw to a terminal, escape sequences among them could set the
// window title (OSC 0), write the clipboard (OSC 52), or move the cursor
// and erase lines (CSI) to forge what the operator sees.
package printable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s with every character that is not printable written as
// a visible escape, as strconv.Quote writes it, without the quotes: ESC is
// \x1b, BEL \a, CSI (U+009B) \u009b, a byte that is not UTF-8 \xff.
// Printable is what strconv.IsPrint says: letters, marks, numbers,
// punctuation, symbols and the ASCII space. Tabs and line breaks are
// escaped too: what String returns is one line (the CLI prints a log
// entry, an error or a table row as one), and a tab would shift a
// table's columns. Backslashes are left as they are, so the result is for
// reading, not for decoding back. Text that is all printable ASCII comes
// back as it is.
func String(s string) string {
	if plain(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// plain reports whether s is all printable ASCII.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
