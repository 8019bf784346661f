package human

import (
	"testing"
	"time"
)

func TestBytes(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{512 << 20, "512.0 MiB"},
		{3 << 30, "3.0 GiB"},
		{5 << 50, "5.0 PiB"},
		{5 << 60, "5120.0 PiB"},
		{-2048, "-2.0 KiB"},
	}
	for _, tt := range tests {
		if got := Bytes(tt.n); got != tt.want {
			t.Errorf("Bytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

func TestDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1400 * time.Millisecond, "1s"},
		{4*time.Minute + 5*time.Second, "4m5s"},
		{2*time.Hour + 13*time.Minute + 40*time.Second, "2h14m"},
		{-90 * time.Second, "-1m30s"},
	}
	for _, tt := range tests {
		if got := Duration(tt.d); got != tt.want {
			t.Errorf("Duration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
