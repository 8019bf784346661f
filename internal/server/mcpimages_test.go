package server

import (
	"slices"
	"testing"
)

func TestMCPEgress(t *testing.T) {
	hosts := []string{"api.airtable.com", "mcp.deepwiki.com"}
	tests := []struct {
		name        string
		allow, deny []string
		want        []string
	}{
		{"no policy", nil, nil, nil},
		{"deny all", nil, []string{"0.0.0.0/0"}, hosts},
		{"allow list", []string{"1.1.1.1", "mcp.deepwiki.com"}, nil, []string{"1.1.1.1", "mcp.deepwiki.com", "api.airtable.com"}},
	}
	for _, tt := range tests {
		if got := mcpEgress(tt.allow, tt.deny, hosts); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
