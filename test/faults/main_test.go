// Package faults tests what `hutch serve` leaves after faults: killed
// with SIGKILL at every step of its operations (package fault's points,
// armed with HUTCH_FAULT), a full disk, a database locked by another
// process, envd killed inside a sandbox, OOM storms, a host reboot. After
// each, every sandbox is running or paused or gone — never half — what
// the API acknowledged is still there, and the client saw a clear error.
//
// Each test drives the real binary with the Go SDK, on a data dir of its
// own and a template store of the package's own (the machine's base
// template, hard-linked: pauses, snapshots and builds write to the store,
// and these tests kill servers mid-write on purpose).
package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

// templates is the package's template store (TestMain).
var templates string

func TestMain(m *testing.M) {
	testenv.RequireRootMain("hutch serve runs sandboxes: namespaces, cgroups and mounts")
	dir, err := os.MkdirTemp("/var/tmp", "hutch-faults-")
	if err == nil {
		templates = filepath.Join(dir, "templates")
		err = copyBase(testenv.TemplatesDir(), templates)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: a template store of the tests' own:", err)
		os.Exit(1)
	}
	code := m.Run()
	hutchBin.Remove()
	os.RemoveAll(dir)
	os.Exit(code)
}

// copyBase makes a template store at dst holding the base template of the
// store at src, its layers hard-linked (they are never written in place).
func copyBase(src, dst string) error {
	b, err := os.ReadFile(filepath.Join(src, "names", "base.json"))
	if err != nil {
		return err
	}
	var name struct {
		Tags map[string]string `json:"tags"`
	}
	if err := json.Unmarshal(b, &name); err != nil {
		return err
	}
	build := name.Tags["default"]
	b, err = os.ReadFile(filepath.Join(src, "builds", build+".json"))
	if err != nil {
		return err
	}
	var cfg struct {
		Layers []string `json:"layers"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	for _, d := range []string{"names", "builds", "layers"} {
		if err := os.MkdirAll(filepath.Join(dst, d), 0o755); err != nil {
			return err
		}
	}
	os.Chmod(filepath.Dir(dst), 0o711)
	for _, f := range []string{"names/base.json", "builds/" + build + ".json"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(src, f), filepath.Join(dst, f)).CombinedOutput(); err != nil {
			return fmt.Errorf("cp %s: %v: %s", f, err, out)
		}
	}
	for _, l := range cfg.Layers {
		if out, err := exec.Command("cp", "-al", filepath.Join(src, "layers", l), filepath.Join(dst, "layers", l)).CombinedOutput(); err != nil {
			return fmt.Errorf("cp -al layer %s: %v: %s", l, err, out)
		}
	}
	return nil
}
