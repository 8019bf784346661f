package builder

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// TestBuildLogBounded: a RUN step that prints without end keeps the
// server's memory bounded (review 27 F8: a million lines took 170 MB for
// 24 hours): the build keeps its first lines, up to a count and a size,
// errors whatever the bounds, and says at the end how many it cut.
func TestBuildLogBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines int
		size  int
	}{
		{"many short lines", 3 * maxLogEntries, 10},
		{"long lines", 5000, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Builder{}
			b.cond = sync.NewCond(&b.mu)
			bd := &Build{}
			line := strings.Repeat("x", tc.size)
			for range tc.lines {
				b.logf(bd, "info", "1", "%s", line)
			}
			b.logf(bd, "error", "1", "the step failed")
			b.builds = map[string]*Build{}
			b.running = map[string]string{}
			b.finish(bd, nil, &Failure{Step: "1", Message: "exit 1"})
			if len(bd.logs) > maxLogEntries+2 || bd.logBytes > maxLogBytes+1024 { // the error line is kept past the bound
				t.Errorf("kept %d lines, %d bytes", len(bd.logs), bd.logBytes)
			}
			var kept, sawErr bool
			for _, l := range bd.logs {
				sawErr = sawErr || l.Message == "the step failed"
				kept = kept || strings.Contains(l.Message, "more log lines were not kept")
			}
			if !sawErr || !kept {
				t.Errorf("the error line kept: %v; the cut noted: %v (last: %+v)", sawErr, kept, bd.logs[len(bd.logs)-2:])
			}
		})
	}
}

// TestBuildBounds: a build of more steps than maxSteps is refused before
// anything runs, and a key runs at most maxBuildsPerKey builds at once
// (review 27 F9); another key's builds are its own.
func TestBuildBounds(t *testing.T) {
	spec := Spec{FromTemplate: "base", Steps: make([]template.Step, maxSteps+1)}
	for i := range spec.Steps {
		spec.Steps[i] = template.Step{Type: "ENV", Args: []string{"A", "1"}}
	}
	if err := checkSpec(&spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("%d steps: %v, want ErrInvalidArgument", len(spec.Steps), err)
	}
	spec.Steps = spec.Steps[:maxSteps]
	if err := checkSpec(&spec); err != nil {
		t.Errorf("%d steps: %v", len(spec.Steps), err)
	}
	b := &Builder{builds: map[string]*Build{}, running: map[string]string{}}
	for i := range maxBuildsPerKey {
		id := fmt.Sprint("b", i)
		b.builds[id] = &Build{ID: id, KeyID: "k1"}
		b.running[fmt.Sprint("t", i)] = id
	}
	if err := b.keyCapLocked("k1"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("build %d of a key: %v, want ErrResourceExhausted", maxBuildsPerKey+1, err)
	}
	if err := b.keyCapLocked("k2"); err != nil {
		t.Errorf("another key's first build: %v", err)
	}
}
