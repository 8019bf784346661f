package envd

import (
	"bytes"
	"strings"
	"testing"
)

func TestLogWriterStopsAtLimit(t *testing.T) {
	var buf bytes.Buffer
	w := NewLogWriter(&buf)
	line := []byte(strings.Repeat("x", 1023) + "\n")
	for range MaxLogBytes/len(line) + 100 {
		if n, err := w.Write(line); n != len(line) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if buf.Len() > MaxLogBytes+200 {
		t.Errorf("log grew to %d bytes, limit %d", buf.Len(), MaxLogBytes)
	}
	if !strings.HasSuffix(buf.String(), "later entries are dropped\"}\n") {
		t.Errorf("the log does not end with the cut notice: %q", buf.String()[buf.Len()-100:])
	}
	if strings.Count(buf.String(), "log limit reached") != 1 {
		t.Error("the cut notice is not written exactly once")
	}
}
