package shell

import (
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "''"},
		{"ls", "ls"},
		{"/usr/bin/x-y_z.1", "/usr/bin/x-y_z.1"},
		{"a=b,c:d@e%f+g", "a=b,c:d@e%f+g"},
		{"hello world", "'hello world'"},
		{"$HOME", "'$HOME'"},
		{"it's", `'it'\''s'`},
		{"a\nb", "'a\nb'"},
		{"*", "'*'"},
		{"~", "'~'"},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestJoinRoundTrip has a real shell split Join's output back into words.
func TestJoinRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	words := []string{"printf", `%s\n`, "", "a b", "it's", `"q"`, "$HOME", "`x`", "a\\b", "tab\there", "new\nline", "*", "-n", "é"}
	out, err := exec.Command(sh, "-c", Join(words)).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, w := range words[2:] {
		want += w + "\n"
	}
	if diff := cmp.Diff(want, string(out)); diff != "" {
		t.Errorf("sh -c %q printed (-want +got):\n%s", Join(words), diff)
	}
}
