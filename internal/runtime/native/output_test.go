package native

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOutputRing: whatever is written, the two files together hold at most
// twice half bytes, end with the newest output, and read back in order
// (older file first) as a suffix of everything written; files switch at
// line breaks where a line fits.
func TestOutputRing(t *testing.T) {
	line := func(i int) string { return fmt.Sprintf("line %05d %s\n", i, strings.Repeat("x", i%37)) }
	tests := []struct {
		name   string
		half   int64
		writes []string
	}{
		{"nothing", 64, nil},
		{"less than half", 64, []string{"a\n", "b\n"}},
		{"exactly half", 4, []string{"abc\n"}},
		{"many lines", 256, func() []string {
			var w []string
			for i := 0; i < 500; i++ {
				w = append(w, line(i))
			}
			return w
		}()},
		{"one big write of lines", 256, []string{func() string {
			var b strings.Builder
			for i := 0; i < 500; i++ {
				b.WriteString(line(i))
			}
			return b.String()
		}()}},
		{"a line longer than half", 16, []string{strings.Repeat("y", 100) + "\n", "tail\n"}},
		{"no line breaks", 16, []string{strings.Repeat("z", 1000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			files, err := openOutputFiles(dir, os.Getuid())
			if err != nil {
				t.Fatal(err)
			}
			ring := &outputRing{files: files, half: tt.half}
			var all strings.Builder
			for _, w := range tt.writes {
				n, err := ring.Write([]byte(w))
				if err != nil || n != len(w) {
					t.Fatalf("Write = %d, %v; want %d", n, err, len(w))
				}
				all.WriteString(w)
			}
			files[0].Close()
			files[1].Close()
			var sizes int64
			for _, name := range []string{outputLog, outputLogOld} {
				fi, err := os.Stat(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Size() > tt.half {
					t.Errorf("%s has %d bytes, more than half (%d)", name, fi.Size(), tt.half)
				}
				sizes += fi.Size()
			}
			rc, err := readOutput(dir, "x")
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(io.NewSectionReader(rc, 0, rc.Size()))
			// ReadAt at any offset, across the files' boundary too, reads
			// what reading from the start does; past the end, io.EOF.
			for off := 0; off <= len(got); off += 7 {
				p := make([]byte, 13)
				n, err := rc.ReadAt(p, int64(off))
				if want := got[off:min(off+len(p), len(got))]; string(p[:n]) != string(want) || (n < len(p)) != (err == io.EOF) {
					t.Fatalf("ReadAt(%d bytes, %d) = %q, %v; want %q", len(p), off, p[:n], err, want)
				}
			}
			rc.Close()
			if int64(len(got)) != sizes {
				t.Errorf("read %d bytes, the files hold %d", len(got), sizes)
			}
			if !strings.HasSuffix(all.String(), string(got)) {
				t.Errorf("the output read back is not the newest output:\n got %q\nwant a suffix of %q", got, all.String())
			}
			// At least the newest half's worth is kept.
			if want := min(int64(all.Len()), tt.half); int64(len(got)) < want {
				t.Errorf("kept %d bytes, want at least %d", len(got), want)
			}
			if tt.name == "many lines" || tt.name == "one big write of lines" {
				if !bytes.HasPrefix(got, []byte("line ")) {
					t.Errorf("the kept output does not start at a line: %q", got[:20])
				}
			}
		})
	}
}
