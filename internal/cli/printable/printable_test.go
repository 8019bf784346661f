package printable

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "process started pid=42", "process started pid=42"},
		{"empty", "", ""},
		{"UTF-8 text", "héllo, 世界 ✓", "héllo, 世界 ✓"},
		// The review's sequences (finding C1).
		{"OSC 0: window title", "\x1b]0;pwned\a", `\x1b]0;pwned\a`},
		{"OSC 0 ended by ST", "\x1b]0;pwned\x1b\\", `\x1b]0;pwned\x1b\`},
		{"OSC 52: clipboard", "\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\a", `\x1b]52;c;Y3VybCBldmlsLnRlc3QgfCBzaA==\a`},
		{"CSI: cursor up, erase line, CR", "ok\x1b[1A\x1b[2K\rINFO all good", `ok\x1b[1A\x1b[2K\rINFO all good`},
		{"line breaks and tabs", "a\nb\r\nc\td", `a\nb\r\nc\td`},
		{"C1 controls as characters", "\u009b31m \u009d0;x\u009c \u0085", `\u009b31m \u009d0;x\u009c \u0085`},
		{"C1 controls as bytes", "\x9b31m\x9d", `\x9b31m\x9d`},
		{"DEL and NUL", "a\x7fb\x00", `a\x7fb\x00`},
		{"not UTF-8", "a\xff\xfeb", `a\xff\xfeb`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`},
		{"zero-width space", "a\u200bb", `a\u200bb`},
		{"backslashes stay", `C:\path\x1b`, `C:\path\x1b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := String(tt.in)
			if got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			for _, c := range []byte(got) {
				if c < 0x20 || c == 0x7f {
					t.Errorf("String(%q) = %q holds control byte %#x", tt.in, got, c)
				}
			}
			if strings.ContainsRune(got, '\u009b') {
				t.Errorf("String(%q) = %q holds CSI", tt.in, got)
			}
		})
	}
}

func TestStringEveryByte(t *testing.T) {
	var all []byte
	for c := range 256 {
		all = append(all, byte(c))
	}
	got := String(string(all))
	for i := 0; i < len(got); i++ {
		if c := got[i]; c < 0x20 || c == 0x7f || c >= 0x80 {
			t.Fatalf("String(every byte) = %q holds byte %#x", got, c)
		}
	}
}
