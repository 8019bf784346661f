// Package testenv is what tests ask of the machine they run on: root, and
// the template store. Every test package shares its one rule for root
// (RequireRoot) and its one default for the store (TemplatesDir); only
// tests and test helpers import it, and it imports nothing of Hutch's, so
// any package's tests can use it without an import cycle.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// SkipRootEnv names the variable that, set to 1, turns RequireRoot's
// failure into a skip.
const SkipRootEnv = "HUTCH_TEST_SKIP_ROOT"

// TemplatesEnv names the variable that overrides the template store the
// tests use, as it does for hutch itself.
const TemplatesEnv = "HUTCH_TEMPLATES"

// DefaultTemplates is hutch's default template store. It is
// template.DefaultDir, written again only because this package imports
// none of Hutch's (package template's own tests use it); a test checks the
// two agree.
const DefaultTemplates = "/var/lib/hutch/templates"

// TemplatesDir is the template store tests use: $HUTCH_TEMPLATES, else
// hutch's default. It is read at each call, so t.Setenv applies.
func TemplatesDir() string {
	if d := os.Getenv(TemplatesEnv); d != "" {
		return d
	}
	return DefaultTemplates
}

// RequireRoot is the one rule for tests that need root (namespaces,
// cgroups, mounts, chown): as root it returns; otherwise it fails t,
// saying why (what the test does that needs root), unless
// HUTCH_TEST_SKIP_ROOT=1, when it skips t. The suite runs as root
// (./scripts/test.sh, CI), so a skip by default would let a whole suite
// pass by running nothing; a machine that cannot give root opts out by
// name.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	skip, msg := rootVerdict(os.Geteuid(), os.Getenv(SkipRootEnv), why)
	switch {
	case msg == "":
	case skip:
		t.Skip(msg)
	default:
		t.Fatal(msg)
	}
}

// RequireRootMain is RequireRoot for the TestMain of a package whose
// every test needs root, before anything is set up: as root it returns;
// otherwise it says why on standard error and exits the test binary with
// status 1, or 0 (nothing run) when HUTCH_TEST_SKIP_ROOT=1.
func RequireRootMain(why string) {
	skip, msg := rootVerdict(os.Geteuid(), os.Getenv(SkipRootEnv), why)
	switch {
	case msg == "":
	case skip:
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		os.Exit(0)
	default:
		fmt.Fprintln(os.Stderr, "FAIL:", msg)
		os.Exit(1)
	}
}

// rootVerdict is RequireRoot's decision for effective uid euid and the
// value of HUTCH_TEST_SKIP_ROOT: msg is "" when the test may run.
func rootVerdict(euid int, skipEnv, why string) (skip bool, msg string) {
	if euid == 0 {
		return false, ""
	}
	if skipEnv == "1" {
		return true, fmt.Sprintf("needs root (%s): skipped, as %s=1", why, SkipRootEnv)
	}
	return false, fmt.Sprintf("needs root (%s): run the tests as root (./scripts/test.sh), or set %s=1 to skip the tests that need it", why, SkipRootEnv)
}
