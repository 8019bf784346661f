// Package schema fuzzes the REST API of a real `hutch serve` against its
// own OpenAPI document (GET /openapi.json) with schemathesis (from PyPI,
// pinned in requirements.txt): no 5xx but the documented 501s
// (schemathesis.toml says which), every response's status, content type
// and body as the document describes them.
package schema

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, hutchBin) }

// The run's bounds: the whole schemathesis run stops after budget (the
// test stays under three minutes with the venv cached), each operation
// gets at most maxExamples generated cases per phase, and seed makes the
// cases the same from run to run (what a run reaches within budget may
// still differ with the machine's speed).
const (
	budget      = 100 * time.Second
	maxExamples = 10
	seed        = 1
	// maxSandboxes caps the sandboxes the generated creates start; more
	// answer 429, which the document allows.
	maxSandboxes = 3
)

// excluded are the operations the run leaves out, each with its reason.
// Each is named by its operationId in the document.
var excluded = []struct{ operationID, why string }{
	// A build pulls its base image from a registry and runs its steps in
	// sandboxes for minutes: neither fits a bounded run without network.
	// Builds are tested with real images in internal/builder and
	// test/templates.
	{"startTemplateBuild", "POST /v2/templates/{templateID}/builds/{buildID} starts a template build"},
	// Deleting an API key could revoke the key the run itself uses, and
	// every later answer would be a 401.
	{"revokeAPIKey", "DELETE /api-keys/{apiKeyID} could revoke the run's own key"},
}

// checks are schemathesis's checks the run applies.
var checks = []string{
	"not_a_server_error",
	"status_code_conformance",
	"content_type_conformance",
	"response_schema_conformance",
}

// TestOpenAPI runs schemathesis's examples, coverage and fuzzing phases
// (not the stateful one: its chains of calls, create then pause then
// fork, would not fit the budget) against every operation of
// /openapi.json but the excluded ones, with the server's API key, and
// fails on any failure, printing schemathesis's report.
func TestOpenAPI(t *testing.T) {
	testenv.RequireRoot(t, "hutch serve runs sandboxes: namespaces, cgroups and mounts")
	python := hutchtest.PythonVenv(t, "requirements.txt")
	// Snapshots, pauses, forks and the template API write to the server's
	// template store: one of the test's own, not the machine's.
	t.Setenv(testenv.TemplatesEnv, testenv.PrivateTemplates(t))
	s := hutchtest.StartServe(t, hutchBin.Path(t), "--warm", "0", "--max-sandboxes-per-key", strconv.Itoa(maxSandboxes))
	config, err := filepath.Abs("schemathesis.toml")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-c", "import sys; from schemathesis.cli import schemathesis; sys.exit(schemathesis())",
		"--config-file", config, "run", s.URL() + "/openapi.json",
		"--header", "X-API-Key: " + hutchtest.TestKey,
		"--checks", strings.Join(checks, ","),
		"--phases", "examples,coverage,fuzzing",
		"--max-examples", strconv.Itoa(maxExamples),
		"--seed", strconv.Itoa(seed),
		"--max-time", strconv.Itoa(int(budget.Seconds())),
		"--request-timeout", "30",
		"--workers", "1",
		"--no-color", "--output-truncate", "false",
	}
	for _, e := range excluded {
		args = append(args, "--exclude-operation-id", e.operationID)
	}
	cmd := exec.Command(python, args...)
	// schemathesis keeps Hypothesis's example database in the working
	// directory: a fresh one each run, so that only the seed decides.
	cmd.Dir = t.TempDir()
	cmd.Env = hutchtest.CleanEnv("HOME="+cmd.Dir, "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(budget+time.Minute, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err = cmd.Wait()
	report := out.String()
	if err != nil {
		t.Fatalf("schemathesis: %v\n%s", err, report)
	}
	// A run that tested nothing passes too: make sure it reached the API.
	if !strings.Contains(report, "passed") || strings.Contains(report, "No operations") {
		t.Fatalf("schemathesis ran no test:\n%s", report)
	}
	t.Logf("schemathesis:\n%s", report)
}
