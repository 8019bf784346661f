package native

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// SandboxBinaryName is the in-sandbox binary (cmd/hutch-sandbox): each
// sandbox's init and envd, without the rest of hutch. FindSandboxBinary
// looks for it beside the running binary.
const SandboxBinaryName = "hutch-sandbox"

// stampTagPrefix starts the build tag that identifies one build of hutch
// and hutch-sandbox together: scripts/setup.sh (and the tests' builder)
// build both with the same tag (-tags hutch_build_HASH, HASH of the source
// they are built from), which Go records in each binary's build
// information. No file uses the tag.
const stampTagPrefix = "hutch_build_"

// FindSandboxBinary returns the hutch-sandbox installed beside the running
// binary, for Options.SandboxBinary, or "" and the reason it cannot be
// used: it is missing, or it was not built together with the running
// binary (their Go build information must name the same module and Go
// version, the same VCS revision when stamped, and the same build tag
// stampTagPrefix+HASH).
// Without it, sandboxes run this binary, as they always can.
func FindSandboxBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("own path: %w", err)
	}
	path := filepath.Join(filepath.Dir(exe), SandboxBinaryName)
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := sandboxBinaryMatches(f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return path, nil
}

// sandboxMainPackage is hutch-sandbox's main package.
const sandboxMainPackage = "github.com/hutch-sandbox/hutch/cmd/hutch-sandbox"

// errOtherBuild is a hutch-sandbox built from other source than hutch.
var errOtherBuild = errors.New("not built from the same source as this hutch")

// sandboxBinaryMatches reports whether the binary read from r was built
// together with the running one. The host and the init speak a protocol
// of their own (initConfig, initMsg, the descriptors' layout) that has no
// version: only the same build is trusted.
func sandboxBinaryMatches(r io.ReaderAt) error {
	self, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Errorf("%w: this binary has no build information", errOtherBuild)
	}
	other, err := buildinfo.Read(r)
	if err != nil {
		return fmt.Errorf("build information: %w", err)
	}
	// Any program of the same build would pass sameBuild: hutch copied
	// over it, say.
	if other.Path != sandboxMainPackage {
		return fmt.Errorf("%w: it is %s, not %s", errOtherBuild, other.Path, sandboxMainPackage)
	}
	return sameBuild(self, other)
}

// sameBuild compares what two binaries' build information says of their
// build, a being the running one. A build without a stamp (go test, a
// plain go build) matches nothing.
func sameBuild(a, b *debug.BuildInfo) error {
	va, vb := settings(a), settings(b)
	stamp := buildStamp(va["-tags"])
	if stamp == "" {
		return fmt.Errorf("%w: this hutch was built without a %s tag (scripts/setup.sh sets one)", errOtherBuild, stampTagPrefix)
	}
	if a.GoVersion != b.GoVersion || a.Main.Path != b.Main.Path || a.Main.Version != b.Main.Version {
		return fmt.Errorf("%w: %s %s %s, this hutch %s %s %s", errOtherBuild,
			b.Main.Path, b.Main.Version, b.GoVersion, a.Main.Path, a.Main.Version, a.GoVersion)
	}
	if other := buildStamp(vb["-tags"]); other != stamp {
		return fmt.Errorf("%w: its build tag %q, this hutch's %q", errOtherBuild, other, stamp)
	}
	for _, k := range []string{"vcs", "vcs.revision", "vcs.time", "vcs.modified"} {
		if va[k] != vb[k] {
			return fmt.Errorf("%w: %s %q, this hutch %q", errOtherBuild, k, vb[k], va[k])
		}
	}
	return nil
}

// buildStamp returns the stampTagPrefix tag of a -tags setting, or "".
func buildStamp(tags string) string {
	for _, t := range strings.Split(tags, ",") {
		if strings.HasPrefix(t, stampTagPrefix) {
			return t
		}
	}
	return ""
}

func settings(bi *debug.BuildInfo) map[string]string {
	m := map[string]string{}
	for _, s := range bi.Settings {
		m[s.Key] = s.Value
	}
	return m
}
