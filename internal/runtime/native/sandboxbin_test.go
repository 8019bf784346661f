package native

import (
	"errors"
	"runtime/debug"
	"testing"
)

func TestSameBuild(t *testing.T) {
	const stamp = "hutch_build_53b2433d8577"
	build := func(gover, stamp, rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: gover, Main: debug.Module{Path: "github.com/hutch-sandbox/hutch", Version: "(devel)"}}
		if stamp != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "-tags", Value: "netgo," + stamp})
		}
		if rev != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs", Value: "git"},
				debug.BuildSetting{Key: "vcs.revision", Value: rev}, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	self := build("go1.26.8", stamp, "", "")
	tests := []struct {
		name  string
		a, b  *debug.BuildInfo
		match bool
	}{
		{"same stamp", self, build("go1.26.8", stamp, "", ""), true},
		{"same stamp and revision", build("go1.26.8", stamp, "5d21ab1", "true"), build("go1.26.8", stamp, "5d21ab1", "true"), true},
		{"other stamp", self, build("go1.26.8", "hutch_build_9e0c11aa", "", ""), false},
		{"stamp a prefix of the other's", build("go1.26.8", "hutch_build_53b2", "", ""), self, false},
		{"no stamp in the other", self, build("go1.26.8", "", "", ""), false},
		{"unstamped hutch", build("go1.26.8", "", "", ""), build("go1.26.8", "", "", ""), false},
		{"other revision", build("go1.26.8", stamp, "5d21ab1", "false"), build("go1.26.8", stamp, "fcb315c", "false"), false},
		{"other Go", self, build("go1.26.7", stamp, "", ""), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := sameBuild(tc.a, tc.b)
			if tc.match && err != nil {
				t.Errorf("sameBuild: %v, want a match", err)
			}
			if !tc.match && !errors.Is(err, errOtherBuild) {
				t.Errorf("sameBuild: %v, want errOtherBuild", err)
			}
		})
	}
}
