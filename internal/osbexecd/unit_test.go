package osbexecd

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var errConnRefused = errors.New("connection refused")

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func httpRequest(method, target string) *http.Request {
	return httptest.NewRequest(method, target, nil)
}

func TestUTF8Carry(t *testing.T) {
	euro := []byte("€") // 3 bytes
	tests := []struct {
		name   string
		chunks [][]byte
		want   []string
	}{
		{"whole runes", [][]byte{[]byte("aé"), []byte("b")}, []string{"aé", "b", ""}},
		{"split after 1 byte", [][]byte{append([]byte("x"), euro[:1]...), euro[1:]}, []string{"x", "€", ""}},
		{"split after 2 bytes", [][]byte{euro[:2], append(euro[2:], 'y')}, []string{"", "€y", ""}},
		{"byte by byte", [][]byte{euro[:1], euro[1:2], euro[2:]}, []string{"", "", "€", ""}},
		{"cut at the end", [][]byte{append([]byte("z"), euro[:2]...)}, []string{"z", string(euro[:2])}},
		{"invalid bytes pass", [][]byte{{0xff, 'a'}}, []string{"\xffa", ""}},
	}
	for _, tt := range tests {
		var c utf8Carry
		var got []string
		for _, ch := range tt.chunks {
			got = append(got, c.text(ch))
		}
		got = append(got, c.flush())
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: (-want +got)\n%s", tt.name, diff)
		}
	}
}

func TestFirstRange(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "bytes=0-9", want: "bytes=0-9"},
		{in: "bytes=5-", want: "bytes=5-"},
		{in: "bytes=-5", want: "bytes=-5"},
		{in: "bytes= 1-2 , 4-5", want: "bytes=1-2"},
		{in: "bytes=,3-4", want: "bytes=3-4"},
		{in: "bytes=", bad: true},
		{in: "bytes=-", bad: true},
		{in: "bytes=4-2", bad: true},
		{in: "bytes=1-2,x", bad: true},
		{in: "bytes=-1-2", bad: true},
		{in: "lines=1-2", bad: true},
		{in: "bytes=99999999999999999999-", bad: true},
	}
	for _, tt := range tests {
		got, err := firstRange(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("firstRange(%q) = %q, %v; want %q, bad %v", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func TestModeAndOwner(t *testing.T) {
	modes := []struct {
		in   int
		want string
		bad  bool
	}{
		{0, "", false}, {755, "0755", false}, {644, "0644", false}, {7, "07", false}, {4755, "04755", false},
		{8, "", true}, {789, "", true}, {17777, "", true}, {-644, "", true},
	}
	for _, tt := range modes {
		got, err := modeText(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("modeText(%d) = %q, %v", tt.in, got, err)
		}
	}
	owners := []struct {
		owner, group, want string
		bad                bool
	}{
		{"", "", "", false}, {"user", "", "user", false}, {"", "staff", ":staff", false}, {"user", "staff", "user:staff", false},
		{"1000", "1000", "1000:1000", false}, {"-rf", "", "-rf", false},
		{"a:b", "", "", true}, {"", "x/y", "", true}, {"a\nb", "", "", true}, {strings.Repeat("u", 300), "", "", true},
	}
	for _, tt := range owners {
		got, err := ownerText(tt.owner, tt.group)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ownerText(%q, %q) = %q, %v", tt.owner, tt.group, got, err)
		}
	}
}

// TestCommandRegister checks the bounds of kept commands and their
// output without a sandbox.
func TestCommandRegister(t *testing.T) {
	st := &sandboxState{commands: map[string]*command{}}
	ids := func(cmds []*command) []string {
		var out []string
		for _, c := range cmds {
			out = append(out, c.id)
		}
		return out
	}
	mk := func(id string, background, running bool, wantDrop ...string) *command {
		t.Helper()
		c := &command{id: id, done: make(chan struct{})}
		if background {
			c.log = &commandLog{end: -1}
		}
		drop, err := st.register(c, 4, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(drop); !slices.Equal(got, wantDrop) {
			t.Errorf("registering %s drops the output of %v, want %v", id, got, wantDrop)
		}
		c.running = running
		return c
	}
	mk("a", true, false)
	mk("b", false, false)
	mk("c", true, true)
	// A third background command's output is one over 2: the oldest
	// finished one's (a) goes.
	mk("d", true, true, "a")
	// A fifth command evicts the oldest finished one (a, output gone
	// already) ...
	mk("e", true, true)
	if st.lookup("a") != nil || st.lookup("b") == nil {
		t.Error("the oldest finished command was not the one forgotten")
	}
	// ... then b (a foreground command: no output to remove); c, d and e
	// keep theirs while they run.
	mk("f", false, true)
	if st.lookup("b") != nil {
		t.Error("b was not forgotten")
	}
	// With all running, one more is refused.
	if _, err := st.register(&command{id: "g", done: make(chan struct{})}, 4, 2); err == nil {
		t.Error("a command past the bound with all running was accepted")
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"printf", "%s|", "a b", "it's", ""})
	if want := `printf '%s|' 'a b' 'it'\''s' ''`; got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

// TestReplacer: the streamed replacement is what bytes.ReplaceAll makes,
// whatever the size of the reads.
func TestReplacer(t *testing.T) {
	tests := []struct{ data, old, new string }{
		{"a-a-a", "a", "XY"},
		{"aaaa", "aa", "b"},
		{"aaa", "aa", ""},
		{"xyz", "q", "r"},
		{"", "a", "b"},
		{"abcabc", "abc", "abcabc"},
		{"ab", "ab", ""},
	}
	for _, tt := range tests {
		want := strings.ReplaceAll(tt.data, tt.old, tt.new)
		for _, size := range []int{1, 2, 3, 1024} {
			rp := &replacer{data: []byte(tt.data), old: []byte(tt.old), new: []byte(tt.new)}
			var got []byte
			buf := make([]byte, size)
			for {
				n, err := rp.Read(buf)
				got = append(got, buf[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil || n == 0 {
					t.Fatalf("Read: %d, %v", n, err)
				}
			}
			if string(got) != want {
				t.Errorf("%q %q->%q in reads of %d: %q, want %q", tt.data, tt.old, tt.new, size, got, want)
			}
		}
	}
}
