package hutchtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// VenvCache is where PythonVenv keeps its virtual environments, one
// directory per requirements file's hash, and pip its download cache
// (VenvCache/../pip): outside the clone, shared by every checkout.
const VenvCache = "/var/cache/hutch/venv"

// PythonVenv returns the python of a virtual environment holding exactly
// the packages of requirementsFile (every one pinned with ==, as `pip
// freeze` writes them), making it the first time: `python3 -m venv`, then
// `pip install --no-deps -r` (nothing but what the file names) and `pip
// check` (which fails when the file leaves a dependency out). The venv is
// VenvCache/<hash>, the hash of the file's contents and of the python
// that made it; it is built in a temporary directory beside it and
// renamed into place, so a run cut short leaves nothing that looks
// ready, and concurrent first uses (other test packages) build it once,
// under a lock. It fails the test when python3 is missing or pip fails
// (PyPI out of reach: the first run needs it, later ones do not).
func PythonVenv(t testing.TB, requirementsFile string) (python string) {
	t.Helper()
	reqs, err := os.ReadFile(requirementsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPinned(string(reqs)); err != nil {
		t.Fatalf("%s: %v", requirementsFile, err)
	}
	base, version, err := basePython()
	if err != nil {
		t.Fatal(err)
	}
	dir := venvDir(base, version, reqs)
	python = filepath.Join(dir, "bin", "python")
	if _, err := os.Stat(python); err == nil {
		return python
	}
	if err := os.MkdirAll(VenvCache, 0o755); err != nil {
		t.Fatal(err)
	}
	// One builder at a time (go test runs packages in parallel).
	lock, err := os.OpenFile(filepath.Join(VenvCache, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(python); err == nil {
		return python // made while we waited
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(VenvCache, ".build-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	// A venv's scripts name its directory: build it at the final path's
	// twin inside tmp, then rename. Only bin/python is used (run as
	// `python -m`), which finds its venv through pyvenv.cfg beside it,
	// wherever the directory is.
	venv := filepath.Join(tmp, "venv")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pip := []string{filepath.Join(venv, "bin", "python"), "-m", "pip", "--disable-pip-version-check", "--no-input"}
	steps := [][]string{
		{base, "-m", "venv", venv},
		append(append([]string{}, pip...), "install", "--no-deps", "--cache-dir", filepath.Join(filepath.Dir(VenvCache), "pip"), "-r", requirementsFile),
		append(append([]string{}, pip...), "check"),
	}
	for _, argv := range steps {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		// PIP_* from the environment (an index, a config file) must not
		// change what gets installed.
		cmd.Env = append(withoutPrefix(os.Environ(), "PIP_"), "PIP_CONFIG_FILE=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("making the venv for %s: %s: %v\n%s", requirementsFile, strings.Join(argv, " "), err, out)
		}
	}
	if err := os.Rename(venv, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("made %s for %s in %v", dir, requirementsFile, time.Since(start).Round(time.Millisecond))
	return python
}

// venvDir is the directory of the venv of requirements reqs made with
// the python base of sys.version version. bench/lib.sh's venv_path
// computes the same, so the benches share these venvs.
func venvDir(base, version string, reqs []byte) string {
	sum := sha256.Sum256([]byte(base + "\n" + version + "\n" + string(reqs)))
	return filepath.Join(VenvCache, hex.EncodeToString(sum[:8]))
}

// basePython is the python3 venvs are made with, Debian's own when it is
// there (scripts/setup.sh installs its venv module), and its version.
func basePython() (path, version string, err error) {
	path = "/usr/bin/python3"
	if _, err := os.Stat(path); err != nil {
		if path, err = exec.LookPath("python3"); err != nil {
			return "", "", fmt.Errorf("python3 is required (run ./scripts/setup.sh): %v", err)
		}
	}
	out, err := exec.Command(path, "-c", "import sys, venv; print(sys.version)").CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("%s has no venv module (apt-get install python3-venv, or run ./scripts/setup.sh): %v\n%s", path, err, out)
	}
	return path, strings.TrimSpace(string(out)), nil
}

// checkPinned reports a requirement that is not name==version: the venv
// is keyed by the file, so it must say exactly what gets installed.
func checkPinned(reqs string) error {
	for _, line := range strings.Split(reqs, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if name, version, ok := strings.Cut(line, "=="); !ok || name == "" || version == "" || strings.ContainsAny(version, "<>=!~*,; ") {
			return fmt.Errorf("%q is not pinned (want name==version)", line)
		}
	}
	return nil
}

// withoutPrefix is env without the variables whose names start with
// prefix.
func withoutPrefix(env []string, prefix string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}
