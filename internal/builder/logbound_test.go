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

// TestRequestBounds: what a key may keep in the server's memory through
// builds it requests (review 27 round 2): tags per build, builds requested
// and never started, finished builds with their logs, a failure's message.
func TestRequestBounds(t *testing.T) {
	b := New(Options{Store: template.Open(t.TempDir())})
	tags := make([]string, maxTags+1)
	for i := range tags {
		tags[i] = fmt.Sprint("t", i)
	}
	if _, err := b.Request("k1", Request{Name: "many-tags", Tags: tags}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("%d tags: %v, want ErrInvalidArgument", len(tags), err)
	}
	for i := range maxWaitingPerKey {
		if _, err := b.Request("k1", Request{Name: fmt.Sprint("w", i)}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if _, err := b.Request("k1", Request{Name: "one-more"}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("waiting build %d of a key: %v, want ErrResourceExhausted", maxWaitingPerKey+1, err)
	}
	if _, err := b.Request("k2", Request{Name: "other-key"}); err != nil {
		t.Errorf("another key's request: %v", err)
	}
	// Finished builds: a key keeps its newest maxFinishedPerKey.
	for i := range maxFinishedPerKey + 5 {
		bd := &Build{ID: fmt.Sprint("f", i), KeyID: "k3", Template: fmt.Sprint("f", i), Status: StatusBuilding}
		b.mu.Lock()
		b.builds[bd.ID] = bd
		b.mu.Unlock()
		b.finish(bd, nil, &Failure{Step: "1", Message: strings.Repeat("m", 100<<10)})
		if n := len(bd.Reason.Message); n > maxFailure+64 {
			t.Fatalf("a failure kept %d bytes of message", n)
		}
	}
	b.mu.Lock()
	n := 0
	for _, bd := range b.builds {
		if bd.KeyID == "k3" {
			n++
		}
	}
	b.mu.Unlock()
	if n != maxFinishedPerKey {
		t.Errorf("the server keeps %d finished builds of a key, want %d", n, maxFinishedPerKey)
	}
}
