package units

import "testing"

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"512", 512, false},
		{"1k", 1 << 10, false},
		{"512M", 512 << 20, false},
		{"512MiB", 512 << 20, false},
		{"1.5G", 3 << 29, false},
		{"2g", 2 << 30, false},
		{"1T", 1 << 40, false},
		{"-1M", 0, true},
		{"lots", 0, true},
		{"1X", 0, true},
		{"99999999T", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseBytes(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
