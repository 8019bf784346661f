// Package version tells which build of Hutch is running: the version a
// package gave it, the source it was built from and the Go that built it.
//
// Most of it comes from the build information Go records in every binary
// (runtime/debug.ReadBuildInfo), so a plain `go build` in a git checkout
// reports its commit with no flags. Only what Go cannot know is set by the
// linker: the release version and the build date, which scripts/package.sh
// passes with -ldflags -X.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// version, buildDate and commit are set by the linker (-ldflags "-X
// github.com/hutch-sandbox/hutch/internal/version.version=1.2.3 -X
// ...buildDate=2025-01-02T03:04:05Z"); they must be variables for -X to
// reach them, and nothing assigns them at run time. commit is only a
// fallback for builds Go recorded no VCS information in: GOFLAGS with
// -buildvcs=false, or a git worktree, whose .git is a file Go does not
// recognise.
var (
	version   string
	buildDate string
	commit    string
)

// stampTagPrefix starts the build tag scripts/setup.sh gives hutch and
// hutch-sandbox (see native.FindSandboxBinary): a hash of the source, which
// names the source when no VCS information was recorded.
const stampTagPrefix = "hutch_build_"

// Info describes one build. Empty fields were not recorded.
type Info struct {
	// Version is the release version the package script set, else the
	// module version Go recorded (a pseudo-version from the VCS, or
	// "(devel)").
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from.
	Commit string `json:"commit,omitempty"`
	// CommitTime is that revision's commit time.
	CommitTime string `json:"commitTime,omitempty"`
	// Modified is true when the work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// BuildDate is when the package script built it (RFC 3339).
	BuildDate string `json:"buildDate,omitempty"`
	// SourceHash is scripts/setup.sh's hash of the source, from the
	// hutch_build_ tag, for builds without VCS information.
	SourceHash string `json:"sourceHash,omitempty"`
	// GoVersion is the Go toolchain that built it.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi, linked{version: version, buildDate: buildDate, commit: commit})
}

// linked is what the linker may set.
type linked struct{ version, buildDate, commit string }

// fromBuildInfo assembles an Info from Go's build information (nil when
// the binary has none) and what the linker set.
func fromBuildInfo(bi *debug.BuildInfo, l linked) Info {
	info := Info{
		Version:   l.version,
		BuildDate: l.buildDate,
		Commit:    l.commit,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi == nil {
		if info.Version == "" {
			info.Version = "unknown"
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "" {
		info.Version = bi.Main.Version
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value // Go's own record wins over -X
		case "vcs.time":
			info.CommitTime = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		case "-tags":
			for _, t := range strings.Split(s.Value, ",") {
				if h, ok := strings.CutPrefix(t, stampTagPrefix); ok {
					info.SourceHash = h
				}
			}
		}
	}
	return info
}

// String is the one-line form, for logs and User-Agent-like uses:
// "1.2.3 (commit abc123def456, modified)".
func (i Info) String() string {
	var details []string
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		details = append(details, "commit "+c)
		if i.Modified {
			details = append(details, "modified")
		}
	} else if i.SourceHash != "" {
		details = append(details, "source "+i.SourceHash)
	}
	if len(details) == 0 {
		return i.Version
	}
	return fmt.Sprintf("%s (%s)", i.Version, strings.Join(details, ", "))
}

// Lines is the long form `hutch version` prints: one "name: value" line
// per recorded field.
func (i Info) Lines() []string {
	lines := []string{"version:    " + i.Version}
	if i.Commit != "" {
		c := i.Commit
		if i.Modified {
			c += " (with uncommitted changes)"
		}
		lines = append(lines, "commit:     "+c)
	}
	if i.CommitTime != "" {
		lines = append(lines, "committed:  "+i.CommitTime)
	}
	if i.SourceHash != "" {
		lines = append(lines, "source:     "+i.SourceHash)
	}
	if i.BuildDate != "" {
		lines = append(lines, "built:      "+i.BuildDate)
	}
	lines = append(lines, "go:         "+i.GoVersion, "platform:   "+i.Platform)
	return lines
}
