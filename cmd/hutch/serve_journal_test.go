package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestToJournal: the first API key is kept out of the journal only when
// standard output is the very stream JOURNAL_STREAM names.
func TestToJournal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "JOURNAL_STREAM" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		stream string
		want   bool
	}{
		{fmt.Sprintf("%d:%d", st.Dev, st.Ino), true},
		{fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), false}, // inherited, for another stream
		{"", false},
		{"garbage", false},
	} {
		if got := toJournal(f, env(tc.stream)); got != tc.want {
			t.Errorf("JOURNAL_STREAM=%q: %v, want %v", tc.stream, got, tc.want)
		}
	}
}
