package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestBoundedReader: a copy out passes on at most the limit, then fails
// with the oversize error naming what the sandbox reported (review
// finding C4); up to the limit, the stream passes unchanged.
func TestBoundedReader(t *testing.T) {
	c := &copier{}
	tests := []struct {
		name      string
		size      int
		limit     int64
		oneByte   bool
		wantBytes int
		wantErr   bool
	}{
		{"under", 10, 11, false, 10, false},
		{"exactly", 10, 10, false, 10, false},
		{"one past", 11, 10, false, 10, true},
		{"far past", 1 << 20, 100, false, 100, true},
		{"one byte at a time", 11, 10, true, 10, true},
		{"empty", 0, 0, false, 0, false},
		{"empty limit", 1, 0, false, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r io.Reader = strings.NewReader(strings.Repeat("x", tt.size))
			if tt.oneByte {
				r = iotest.OneByteReader(r)
			}
			got, err := io.ReadAll(c.bound(r, "ID:/f", 2, tt.limit))
			var oe *oversizeError
			if len(got) != tt.wantBytes || errors.As(err, &oe) != tt.wantErr || (err != nil && !tt.wantErr) {
				t.Fatalf("read %d bytes, %v; want %d bytes, oversize error %v", len(got), err, tt.wantBytes, tt.wantErr)
			}
			if tt.wantErr && !strings.Contains(err.Error(), "ID:/f: the sandbox sent more than the 2 bytes it reported") {
				t.Errorf("error %q", err)
			}
		})
	}
}

func TestSizeSlack(t *testing.T) {
	for _, tt := range []struct{ reported, want int64 }{{0, 1 << 20}, {2, 1 << 20}, {100 << 20, 1<<20 + 1<<20}} {
		if got := sizeSlack(tt.reported); got != tt.want {
			t.Errorf("sizeSlack(%d) = %d, want %d", tt.reported, got, tt.want)
		}
	}
}
