package hutchtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckPinned(t *testing.T) {
	for _, tc := range []struct {
		reqs string
		ok   bool
	}{
		{"# a comment\n\ne2b==2.63.0\npytest==9.2.0\n", true},
		{"e2b\n", false},
		{"e2b>=2.63\n", false},
		{"e2b==2.*\n", false},
		{"e2b==2.63.0; python_version>'3'\n", false},
		{"==1.0\n", false},
		{"-r other.txt\n", false},
	} {
		if err := checkPinned(tc.reqs); (err == nil) != tc.ok {
			t.Errorf("checkPinned(%q) = %v, want ok %v", tc.reqs, err, tc.ok)
		}
	}
}

// TestBenchVenvPath: bench/lib.sh's venv_path names the same directory
// as PythonVenv for each requirements file, so the benches use the
// tests' venvs (and a change to either key shows here).
func TestBenchVenvPath(t *testing.T) {
	base, version, err := basePython()
	if err != nil {
		t.Skip(err)
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	extra := filepath.Join(t.TempDir(), "requirements.txt")
	if err := os.WriteFile(extra, []byte("# a comment, and no newline at the end\nsix==1.17.0"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{filepath.Join(root, "test/e2bpy/requirements.txt"), filepath.Join(root, "test/opensandbox/requirements.txt"), extra} {
		reqs, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-c", `. ./bench/lib.sh && venv_path "$1" && echo "$VENV_DIR"`, "sh", file)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("venv_path %s: %v\n%s", file, err, out)
		}
		if got, want := strings.TrimSpace(string(out)), venvDir(base, version, reqs); got != want {
			t.Errorf("venv_path %s = %s, PythonVenv uses %s", file, got, want)
		}
	}
}
