package testenv_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
)

// TestDefaultTemplates: the tests' default store is hutch's.
func TestDefaultTemplates(t *testing.T) {
	if testenv.DefaultTemplates != template.DefaultDir {
		t.Errorf("testenv.DefaultTemplates = %q, template.DefaultDir = %q", testenv.DefaultTemplates, template.DefaultDir)
	}
	t.Setenv(testenv.TemplatesEnv, "")
	if got := testenv.TemplatesDir(); got != template.DefaultDir {
		t.Errorf("TemplatesDir() without %s = %q", testenv.TemplatesEnv, got)
	}
	t.Setenv(testenv.TemplatesEnv, "/elsewhere")
	if got := testenv.TemplatesDir(); got != "/elsewhere" {
		t.Errorf("TemplatesDir() with %s=/elsewhere = %q", testenv.TemplatesEnv, got)
	}
}

// helperEnv makes the helper tests below do their part: they run only in
// the copy of this binary TestRequireRootUnprivileged starts.
const helperEnv = "TESTENV_HELPER"

func TestHelperRequireRoot(t *testing.T) {
	if os.Getenv(helperEnv) != "test" {
		t.Skip("a helper of TestRequireRootUnprivileged")
	}
	testenv.RequireRoot(t, "the gate's own test")
	t.Log("ran past the gate")
}

func TestHelperRequireRootMain(t *testing.T) {
	if os.Getenv(helperEnv) != "main" {
		t.Skip("a helper of TestRequireRootUnprivileged")
	}
	testenv.RequireRootMain("the gate's own test")
	t.Log("ran past the gate")
}

// TestRequireRootUnprivileged runs both gates in this test binary as an
// unprivileged user (nobody, when this test runs as root): without
// HUTCH_TEST_SKIP_ROOT they fail, saying why and what to do; with
// HUTCH_TEST_SKIP_ROOT=1 they skip; never does the test go on.
func TestRequireRootUnprivileged(t *testing.T) {
	bin := unprivilegedCopy(t)
	for _, tc := range []struct {
		helper, skipEnv string
		wantCode        int
		want            string
	}{
		{"test", "", 1, "--- FAIL: TestHelperRequireRoot"},
		{"test", "1", 0, "--- SKIP: TestHelperRequireRoot"},
		{"main", "", 1, "FAIL: needs root"},
		{"main", "1", 0, "SKIP: needs root"},
		// Only 1 opts out.
		{"test", "yes", 1, "--- FAIL: TestHelperRequireRoot"},
	} {
		run := "^TestHelperRequireRoot$"
		if tc.helper == "main" {
			run = "^TestHelperRequireRootMain$"
		}
		cmd := exec.Command(bin, "-test.run="+run, "-test.v")
		cmd.Dir = filepath.Dir(bin)
		cmd.Env = append(os.Environ(), helperEnv+"="+tc.helper, testenv.SkipRootEnv+"="+tc.skipEnv)
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		s := string(out)
		if code != tc.wantCode || !strings.Contains(s, tc.want) || !strings.Contains(s, "needs root (the gate's own test)") || strings.Contains(s, "ran past the gate") {
			t.Errorf("%s gate, %s=%q: exit %d, want %d and %q:\n%s", tc.helper, testenv.SkipRootEnv, tc.skipEnv, code, tc.wantCode, tc.want, s)
		}
		if tc.skipEnv != "1" && !strings.Contains(s, testenv.SkipRootEnv+"=1 to skip") {
			t.Errorf("%s gate: the failure does not say how to skip:\n%s", tc.helper, s)
		}
	}
}

// unprivilegedCopy copies this test binary where nobody may run it (go
// test's own directory is its owner's alone).
func unprivilegedCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(dir, 0o755)
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "testenv.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
