package osbapi

import "testing"

func TestParseCPU(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"500m", 500, false},
		{"1", 1000, false},
		{"0.5", 500, false},
		{"1.5", 1500, false},
		{"250m", 250, false},
		{"0.0001", 1, false}, // rounded up
		{"", 0, true},
		{"-1", 0, true},
		{"1e3", 0, true},
		{"one", 0, true},
		{"1Xi", 0, true},
		{"m", 0, true},
		{"99999999999999", 0, true},
	} {
		got, err := ParseCPU(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseCPU(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseMemory(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"512Mi", 512, false},
		{"2Gi", 2048, false},
		{"1G", 954, false}, // 10^9 bytes, rounded up to MiB
		{"1048576", 1, false},
		{"1", 1, false},
		{"1.5Gi", 1536, false},
		{"64M", 62, false},
		{"2GB", 0, true},
		{"Gi", 0, true},
		{"-512Mi", 0, true},
		{"10Ei", 0, true},
	} {
		got, err := ParseMemory(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
