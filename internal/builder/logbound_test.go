package builder

import (
	"strings"
	"sync"
	"testing"
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
