package fault

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// TestStepsAreEveryPoint: every point constant of the package is in Steps,
// once: a point added without being listed would be left out of the loop
// of test/faults.
func TestStepsAreEveryPoint(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "fault.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			for i, n := range s.(*ast.ValueSpec).Names {
				if n.Name == "Env" {
					continue
				}
				v, err := strconv.Unquote(s.(*ast.ValueSpec).Values[i].(*ast.BasicLit).Value)
				if err != nil {
					t.Fatal(err)
				}
				consts = append(consts, v)
			}
		}
	}
	for _, c := range consts {
		if !slices.Contains(Steps, c) {
			t.Errorf("point %q is not in Steps", c)
		}
	}
	seen := map[string]bool{}
	for _, s := range Steps {
		if seen[s] {
			t.Errorf("%q is twice in Steps", s)
		}
		seen[s] = true
	}
	if len(consts) != len(Steps) {
		t.Errorf("%d point constants, %d Steps", len(consts), len(Steps))
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		spec  string
		armed bool
		err   bool
	}{
		{"", false, false},
		{" , ", false, false},
		{CreateStarted, true, false},
		{PauseFrozen + ", " + KillStopped, true, false},
		{"create.start", false, true},
		{CreateStarted + ",nope", false, true},
	} {
		p, err := Parse(c.spec)
		if (err != nil) != c.err || p.Armed() != c.armed {
			t.Errorf("Parse(%q) = armed %v, %v; want armed %v, error %v", c.spec, p.Armed(), err, c.armed, c.err)
		}
	}
}

// TestAtKills: an armed point ends the process with SIGKILL (what kill -9
// does: nothing deferred runs); one not armed, and the zero Points, do
// nothing.
func TestAtKills(t *testing.T) {
	if step := os.Getenv("FAULT_TEST_AT"); step != "" {
		p, _ := Parse(PauseFrozen)
		var zero Points
		zero.At(step)
		p.At(CreateStarted)
		defer os.WriteFile(os.Getenv("FAULT_TEST_FILE"), []byte("deferred ran"), 0o600)
		p.At(step)
		return
	}
	for _, c := range []struct {
		step   string
		killed bool
	}{{PauseFrozen, true}, {KillStopped, false}} {
		file := t.TempDir() + "/f"
		cmd := exec.Command(os.Args[0], "-test.run=^TestAtKills$")
		cmd.Env = append(os.Environ(), "FAULT_TEST_AT="+c.step, "FAULT_TEST_FILE="+file)
		err := cmd.Run()
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signaled() && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if killed != c.killed {
			t.Errorf("at %s: %v; want killed by SIGKILL %v", c.step, err, c.killed)
		}
		if _, err := os.Stat(file); c.killed && err == nil {
			t.Errorf("at %s: a deferred call ran", c.step)
		}
	}
}
