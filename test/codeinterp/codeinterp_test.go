// Package codeinterp runs E2B's official code-interpreter SDKs against a
// real `hutch serve` and its code-interpreter-v1 template (the SDKs'
// default), as a user points them at it: the JS SDK (@e2b/code-interpreter
// with e2b, pinned in js/) by node's test runner on js/codeinterp.test.mjs,
// and the Python SDK (e2b-code-interpreter with e2b, pinned in
// requirements.txt, in a venv hutchtest.PythonVenv makes) by pytest on
// tests/test_codeinterp.py. Both report in JUnit XML; cases is the table of
// what each must have passed, and a case missing, failed or skipped in
// either fails its subtest (TestCodeInterpreter/<sdk>/<case>).
package codeinterp

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) { hutchtest.Main(m, hutchBin) }

// templateName is the SDKs' default template (Sandbox.defaultTemplate,
// DEFAULT_TEMPLATE), which scripts/setup.sh builds.
const templateName = "code-interpreter-v1"

// runTimeout bounds one SDK's whole run (node or pytest).
const runTimeout = 5 * time.Minute

// The SDKs, as cases name them.
const (
	jsSDK = "js"
	pySDK = "python"
)

// testCase is a behaviour both suites check: name is the JS test's name
// and the Python test's after "test_"; only, when set, is the one SDK
// that has it; asserts says what the tests check.
type testCase struct {
	name    string
	only    string
	asserts string
}

// cases are the behaviours each SDK is checked for, in the order the
// suites run them (they share one sandbox; pause_resume pauses it, so it
// is last).
var cases = []testCase{
	{name: "state_across_calls", asserts: "x = 1, then x + 1 has text \"2\" as its main result"},
	{name: "stdout_stderr", asserts: "onStdout/onStderr (on_stdout/on_stderr) get the printed lines as they are printed, and execution.logs has them"},
	{name: "dataframe", asserts: "a pandas DataFrame as the last expression: one main result with html (a <table>) and data ({column: values})"},
	{name: "matplotlib_chart", asserts: "plt.plot + plt.show(): a display result with a valid PNG and a line chart (title, label, points)"},
	{name: "exception", asserts: "1/0: execution.error ZeroDivisionError / division by zero with a traceback naming it, onError called, the kernel goes on"},
	{name: "timeout", asserts: "while True with timeoutMs 3000 / timeout=3 raises the SDK's timeout error; the next runCode works and keeps the earlier variables"},
	{name: "contexts", asserts: "createCodeContext (python, cwd /tmp), listCodeContexts lists it, state apart from the default context, restart clears it, remove unlists it and runCode in it raises NotFound"},
	{name: "javascript", asserts: "language javascript: state across calls, console.log to stdout, the last expression as text, a throw as an execution error"},
	{name: "typescript", asserts: "language typescript: a typed function's result as text"},
	{name: "bash", asserts: "language bash: state across calls, stdout, cwd /home/user"},
	{name: "envs", asserts: "envs {FOO: bar} gives os.environ[\"FOO\"] 'bar', gone from the next call without envs (as E2B documents)"},
	{name: "context_and_language", asserts: "context and language both given: InvalidArgumentError (InvalidArgumentException), client-side"},
	{name: "unknown_language", asserts: "language cobol: a SandboxError of status 400 (Python: whose message names cobol), and no context for it"},
	{name: "async_sdk", only: pySDK, asserts: "AsyncSandbox connected to the same sandbox: state, async on_stdout, an error, a timeout that leaves the state"},
	{name: "pause_resume", asserts: "a variable set, sandbox.pause(), getInfo says paused, Sandbox.connect(id) resumes, the variable is still there"},
}

// TestCodeInterpreter runs both SDKs' suites against one `hutch serve`,
// one sandbox each, and checks every case of the table in each.
func TestCodeInterpreter(t *testing.T) {
	testenv.RequireRoot(t, "sandboxes: namespaces, cgroups and mounts")
	requireTemplate(t)
	jsDir := hutchtest.JSPackage(t, "codeinterp/js")
	python := hutchtest.PythonVenv(t, "requirements.txt")
	s := hutchtest.StartServe(t, hutchBin.Path(t))

	sdks := []struct {
		name string
		run  func(t *testing.T, junit string) error
	}{
		{jsSDK, func(t *testing.T, junit string) error { return runNode(t, jsDir, s.SDKEnv(), junit) }},
		{pySDK, func(t *testing.T, junit string) error { return runPytest(t, python, s.SDKEnv(), junit) }},
	}
	for _, sdk := range sdks {
		t.Run(sdk.name, func(t *testing.T) {
			junit := filepath.Join(t.TempDir(), "junit.xml")
			start := time.Now()
			runErr := sdk.run(t, junit)
			t.Logf("%s suite took %v", sdk.name, time.Since(start).Round(time.Millisecond))
			got, err := readJUnit(junit)
			if err != nil {
				t.Fatalf("no report of the %s suite (run: %v): %v", sdk.name, runErr, err)
			}
			checkCases(t, sdk.name, got)
			if runErr != nil && !t.Failed() {
				t.Errorf("the %s suite failed though every case passed: %v", sdk.name, runErr)
			}
		})
	}
}

// checkCases fails a subtest per case of the table that sdk's report got
// does not have as passed, and the test for a test the table lacks.
func checkCases(t *testing.T, sdk string, got map[string]outcome) {
	t.Helper()
	for _, c := range cases {
		if c.only != "" && c.only != sdk {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			o, ok := got[c.name]
			switch {
			case !ok:
				t.Errorf("the %s suite has no test %q (%s)", sdk, c.name, c.asserts)
			case o.status != passed:
				t.Errorf("%s: %s\nchecks: %s\n%s", o.status, c.name, c.asserts, o.detail)
			}
		})
	}
	for name := range got {
		if !slices.ContainsFunc(cases, func(c testCase) bool {
			return c.name == name && (c.only == "" || c.only == sdk)
		}) {
			t.Errorf("the %s suite ran %q, which the table of cases lacks", sdk, name)
		}
	}
}

// requireTemplate fails the test when the template store lacks
// templateName: scripts/setup.sh builds it, and CI always has it.
func requireTemplate(t *testing.T) {
	t.Helper()
	if _, err := template.Open(testenv.TemplatesDir()).Get(templateName); err != nil {
		t.Fatalf("the %s template is not built (scripts/setup.sh builds it): %v", templateName, err)
	}
}

// runNode runs node's test runner on js/codeinterp.test.mjs with env
// added: its spec report logged to the test, its JUnit report to junit.
func runNode(t *testing.T, dir string, env []string, junit string) error {
	t.Helper()
	cmd, cancel := hutchtest.NodeCommand(t, dir, nil, runTimeout, env,
		"--test",
		"--test-reporter=spec", "--test-reporter-destination=stdout",
		"--test-reporter=junit", "--test-reporter-destination="+junit,
		"codeinterp.test.mjs")
	defer cancel()
	return runLogged(t, cmd, "node: ")
}

// runPytest runs pytest (tests/, pytest.ini) with the venv's python and
// env added, nothing else configuring the SDK: its output logged to the
// test, its JUnit report to junit.
func runPytest(t *testing.T, python string, env []string, junit string) error {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-v", "-rA", "--color=no", "-p", "no:cacheprovider", "--junitxml="+junit, "-o", "junit_family=xunit2")
	cmd.Dir = dir
	// Bytecode stays out of the clone.
	cmd.Env = append(hutchtest.CleanEnv("PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "NO_COLOR=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return runLogged(t, cmd, "pytest: ")
}

// runLogged runs cmd (in a process group of its own) with its output
// logged to the test line by line, then kills what is left of its group.
func runLogged(t *testing.T, cmd *exec.Cmd, prefix string) error {
	t.Helper()
	out := hutchtest.LogWriter(t, prefix)
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	out.Close()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil && errors.Is(cmd.Err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (ran longer than %v)", err, runTimeout)
	}
	return err
}

// status is how a test ended.
type status string

const (
	passed  status = "passed"
	failed  status = "failed"
	skipped status = "skipped"
)

// outcome is one test's end in a JUnit report.
type outcome struct {
	status status
	detail string // the failure's or skip's message and text
}

// junitCase is a <testcase> of a JUnit report, as node's junit reporter
// and pytest's --junitxml write them.
type junitCase struct {
	Name    string       `xml:"name,attr"`
	Failure *junitDetail `xml:"failure"`
	Error   *junitDetail `xml:"error"`
	Skipped *junitDetail `xml:"skipped"`
}

type junitDetail struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// readJUnit reads the JUnit report at path: each <testcase>, wherever it
// is nested, by its name without pytest's "test_" prefix. A name seen
// twice counts as failed.
func readJUnit(path string) (map[string]outcome, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	got := map[string]outcome{}
	d := xml.NewDecoder(f)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		se, ok := tok.(xml.StartElement)
		if !ok || se.Name.Local != "testcase" {
			continue
		}
		var c junitCase
		if err := d.DecodeElement(&c, &se); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		name := strings.TrimPrefix(c.Name, "test_")
		o := outcome{status: passed}
		switch {
		case c.Failure != nil:
			o = outcome{failed, c.Failure.Message + "\n" + c.Failure.Text}
		case c.Error != nil:
			o = outcome{failed, c.Error.Message + "\n" + c.Error.Text}
		case c.Skipped != nil:
			o = outcome{skipped, c.Skipped.Message + "\n" + c.Skipped.Text}
		}
		if _, dup := got[name]; dup {
			o = outcome{failed, "reported twice"}
		}
		got[name] = o
	}
	if len(got) == 0 {
		return nil, fmt.Errorf("%s has no test case", path)
	}
	return got, nil
}
