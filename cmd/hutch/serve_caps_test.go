package main

import "testing"

func TestDefaultTotal(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name   string
		ram    uint64
		memory int64
		want   int
	}{
		{"24 GiB host, 512 MiB sandboxes", 24 * gib, 512 << 20, 384},
		{"4 GiB host", 4 * gib, 512 << 20, 64},
		{"1 GiB host", 1 * gib, 512 << 20, 16},
		{"tiny host", 32 << 20, 512 << 20, 1},
		{"1 GiB sandboxes", 24 * gib, 1 << 30, 192},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := defaultTotal(tt.ram, tt.memory); got != tt.want {
				t.Errorf("defaultTotal(%d, %d) = %d, want %d", tt.ram, tt.memory, got, tt.want)
			}
		})
	}
}

func TestSandboxCapsRefuseNegative(t *testing.T) {
	for _, c := range []sandboxCaps{{total: -1}, {perKey: -1}} {
		if _, _, err := c.resolve(512 << 20); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	c := sandboxCaps{total: 7, perKey: 3}
	if total, perKey, err := c.resolve(512 << 20); err != nil || total != 7 || perKey != 3 {
		t.Errorf("resolve = %d, %d, %v; want 7, 3", total, perKey, err)
	}
}
