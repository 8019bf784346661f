package opensandbox

import (
	"slices"
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// testE2BInterop runs js/cross.mjs: a sandbox made through E2B's JS SDK
// used (files, commands, kill) through OpenSandbox's TypeScript SDK, and
// the reverse, with one key.
func (s *suite) testE2BInterop(t *testing.T) {
	tag := unique("interop")
	env := s.clientEnv(append(s.srv.SDKEnv(), "OSB_TEMPLATE="+template, "OSB_TAG="+tag)...)
	lines := s.runScript(t, s.js, env, nodePath(t), "cross.mjs")
	e2bID, osbID := lines["e2b-create"].ID, lines["osb-create"].ID

	checks := []stepCheck{
		{step: "e2b-create"},
		{step: "osb-connect", check: func(t *testing.T, l line) {
			if l.ID != e2bID || l.State != "Running" || l.Metadata["osbtest"] != tag || l.Metadata["made"] != "e2b" {
				t.Errorf("id %q state %q metadata %v; want %q Running osbtest=%s made=e2b", l.ID, l.State, l.Metadata, e2bID, tag)
			}
		}},
		{step: "osb-read", check: wantContent("written by e2b " + tag + "\n")},
		{step: "osb-run", check: wantRun([]string{"written by e2b " + tag}, nil, 0)},
		{step: "e2b-read-back", check: wantContent("42\n")},
		{step: "osb-kill"},
		{step: "e2b-running", check: func(t *testing.T, l line) {
			if l.Running == nil || *l.Running {
				t.Errorf("E2B's isRunning after OpenSandbox's kill: %v, want false", ptrBool(l.Running))
			}
		}},
		{step: "osb-create"},
		{step: "e2b-connect", check: func(t *testing.T, l line) {
			if l.ID != osbID || l.Metadata["osbtest"] != tag || l.Metadata["made"] != "osb" {
				t.Errorf("id %q metadata %v; want %q osbtest=%s made=osb", l.ID, l.Metadata, osbID, tag)
			}
		}},
		{step: "e2b-read", check: wantContent("written by opensandbox " + tag + "\n")},
		{step: "e2b-run", check: wantRun([]string{"written by opensandbox " + tag}, nil, 0)},
		{step: "e2b-kill", check: func(t *testing.T, l line) {
			if l.Killed == nil || !*l.Killed {
				t.Errorf("E2B's kill: %v, want true", ptrBool(l.Killed))
			}
		}},
		{step: "osb-info-killed", err: 404},
	}
	judge(t, lines, checks)
	// Both are gone from both APIs.
	for _, id := range []string{e2bID, osbID} {
		if id == "" {
			continue
		}
		if st := s.e2bStatus(t, id); st != 404 {
			t.Errorf("E2B's GET /sandboxes/%s after the kill: %d, want 404", id, st)
		}
		if st, _ := s.osbGet(t, "/v1/sandboxes/"+id, hutchtest.TestKey); st != 404 {
			t.Errorf("OpenSandbox's GET /v1/sandboxes/%s after the kill: %d, want 404", id, st)
		}
	}
	if slices.Contains(s.srv.APISandboxes(), e2bID) {
		t.Errorf("%s is still listed", e2bID)
	}
}

func ptrBool(p *bool) any {
	if p == nil {
		return "none"
	}
	return *p
}
