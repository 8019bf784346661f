package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.99.1",
		Main:      debug.Module{Path: "github.com/hutch-sandbox/hutch", Version: "v0.0.0-20250102030405-0123456789ab+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "-tags", Value: "netgo,hutch_build_abcdef"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2025-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, tc := range []struct {
		name, ver, date string
		want            Info
		wantString      string
	}{
		{
			name: "plain go build in a checkout",
			want: Info{Version: bi.Main.Version, Commit: "0123456789abcdef0123456789abcdef01234567", CommitTime: "2025-01-02T03:04:05Z",
				Modified: true, SourceHash: "abcdef", GoVersion: "go1.99.1"},
			wantString: "v0.0.0-20250102030405-0123456789ab+dirty (commit 0123456789ab, modified)",
		},
		{
			name: "package script's flags",
			ver:  "1.2.3", date: "2025-02-03T00:00:00Z",
			want: Info{Version: "1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", CommitTime: "2025-01-02T03:04:05Z",
				Modified: true, BuildDate: "2025-02-03T00:00:00Z", SourceHash: "abcdef", GoVersion: "go1.99.1"},
			wantString: "1.2.3 (commit 0123456789ab, modified)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(bi, linked{version: tc.ver, buildDate: tc.date, commit: "ffff"})
			got.Platform = ""
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			if s := got.String(); s != tc.wantString {
				t.Errorf("String() = %q, want %q", s, tc.wantString)
			}
		})
	}
}

// TestWithoutVCS: setup.sh's builds carry no VCS information (GOFLAGS may
// hold -buildvcs=false) but the source hash of their build tag names them.
func TestWithoutVCS(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "-tags", Value: "hutch_build_0a1b2c"}}}
	got := fromBuildInfo(bi, linked{})
	if s := got.String(); s != "(devel) (source 0a1b2c)" {
		t.Errorf("String() = %q", s)
	}
	if l := strings.Join(got.Lines(), "\n"); !strings.Contains(l, "source:     0a1b2c") || strings.Contains(l, "commit") {
		t.Errorf("Lines():\n%s", l)
	}
	if got := fromBuildInfo(bi, linked{commit: "0a1b2c3d"}); got.Commit != "0a1b2c3d" {
		t.Errorf("-X commit: %+v", got)
	}
	if got := fromBuildInfo(nil, linked{}); got.Version != "unknown" {
		t.Errorf("no build information: version %q", got.Version)
	}
}

// TestRunningBinary: a test binary has build information; Get must not
// panic and must name the toolchain.
func TestRunningBinary(t *testing.T) {
	if i := Get(); !strings.HasPrefix(i.GoVersion, "go") || i.Platform == "" {
		t.Errorf("Get() = %+v", i)
	}
}
