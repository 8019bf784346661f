// Package opensandbox drives a real `hutch serve` with OpenSandbox's own
// clients, pinned and unmodified, as a user of OpenSandbox points them at
// it: opensandbox-mcp (PyPI, over stdio, driven by an MCP client), the
// Python SDK opensandbox (requirements.txt, in a venv
// hutchtest.PythonVenv makes) and the TypeScript SDK
// @alibaba-group/opensandbox (js/, next to E2B's JS SDK). The clients find
// the server by OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY alone; the
// scripts print what they saw as JSON lines and the tests judge them.
//
// One server serves every case (TestOpenSandbox's subtests), in a network
// namespace of its own with the clients and a loopback OCI registry
// holding one small image, imported once by the first client that asks
// for it into the server's own template store. Nothing leaves the
// namespace: an image the server would pull from the internet fails there
// at once.
package opensandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/internal/testenv/ocitest"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func TestMain(m *testing.M) {
	testenv.RequireRootMain("sandboxes need namespaces, cgroups and mounts")
	hutchtest.Main(m, hutchBin)
}

// scriptTimeout bounds one client script: a dozen sandboxes' worth of
// calls at most.
const scriptTimeout = 3 * time.Minute

// template is the Hutch template the clients name as an image.
const template = "base"

// suite is what every case shares: the server, the clients' runtimes and
// the image on the registry.
type suite struct {
	srv *hutchtest.Server
	// ns is the network namespace of the server, its registry and the
	// clients; client reaches the server there.
	ns     *hutchtest.NetNS
	client *http.Client
	// python is the venv's python (opensandbox-mcp, opensandbox).
	python string
	// js is the JS package (the TypeScript SDK, E2B's JS SDK).
	js string
	// image is a reference on the loopback registry: busybox and
	// /etc/osb-mark, which holds mark.
	image, mark string
	// missing is a reference on the same registry that does not exist.
	missing string
	// secret is a host file no sandbox may read, holding secretText.
	secret, secretText string
}

// TestOpenSandbox starts the server and runs every case against it.
func TestOpenSandbox(t *testing.T) {
	s := startSuite(t)
	t.Run("MCP", s.testMCP)
	t.Run("PythonSDK", func(t *testing.T) { s.testSDK(t, "python") })
	t.Run("TypeScriptSDK", func(t *testing.T) { s.testSDK(t, "typescript") })
	t.Run("E2BInterop", s.testE2BInterop)
	t.Run("Resources", s.testResources)
	t.Run("Errors", s.testErrors)
	t.Run("SDKErrors", s.testSDKErrors)
	// Whatever a case made, it killed: nothing is left running.
	if ids := s.srv.APISandboxes(); len(ids) != 0 {
		t.Errorf("sandboxes left after the cases: %v", ids)
	}
}

func startSuite(t *testing.T) *suite {
	t.Helper()
	s := &suite{
		python: hutchtest.PythonVenv(t, "requirements.txt"),
		js:     hutchtest.JSPackage(t, "opensandbox/js"),
	}
	tmp := t.TempDir()
	// Sandboxes' uids must traverse to their layers under the data dir.
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, 0o711)
	s.ns = hutchtest.NewNetNS(t)
	s.client = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DialContext: s.ns.DialContext}}
	s.srv = hutchtest.NewServer(t, hutchBin.Path(t), filepath.Join(tmp, "data"))
	s.srv.Wrap = s.ns.Wrap()
	s.srv.Client = s.client
	// A store of the suite's own: images are imported into it.
	templates := testenv.PrivateTemplates(t)
	for i, e := range s.srv.Env {
		if strings.HasPrefix(e, "HUTCH_TEMPLATES=") {
			s.srv.Env[i] = "HUTCH_TEMPLATES=" + templates
		}
	}
	// The registry is on loopback.
	s.srv.Args = []string{"--domain", hutchtest.TestDomain, "--network=false", "--registry-allow", "127.0.0.1"}
	s.srv.Start()

	var reg string
	s.ns.Do(func() error { reg = ocitest.StartRegistry(t); return nil })
	s.mark = unique("image-mark")
	s.image = reg + "/osbtest/busybox:1"
	s.missing = reg + "/osbtest/missing:1"
	img := ocitest.Image(t, ocitest.ImageConfig{Env: []string{"PATH=/bin"}},
		ocitest.Layer(t, append(ocitest.BusyboxFiles(t), ocitest.File{Path: "etc/osb-mark", Content: s.mark + "\n"})...))
	ocitest.Push(t, s.image, img, remote.WithTransport(&http.Transport{DialContext: s.ns.DialContext}))

	dir, err := os.MkdirTemp("/var/tmp", "hutch-osbtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	s.secretText = unique("host-secret")
	s.secret = filepath.Join(dir, "secret")
	if err := os.WriteFile(s.secret, []byte(s.secretText+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// clientEnv is the environment of a client process: this one's, less
// anything that configures Hutch, E2B or OpenSandbox clients, plus
// OpenSandbox's two variables pointing at the server, and extra.
func (s *suite) clientEnv(extra ...string) []string {
	var env []string
	for _, kv := range hutchtest.CleanEnv() {
		if !strings.HasPrefix(kv, "OPEN_SANDBOX_") && !strings.HasPrefix(kv, "OPENSANDBOX_") {
			env = append(env, kv)
		}
	}
	return append(env, append([]string{
		"OPEN_SANDBOX_DOMAIN=" + s.srv.Addr,
		"OPEN_SANDBOX_API_KEY=" + hutchtest.TestKey,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "NO_COLOR=1",
	}, extra...)...)
}

// line is one JSON line a client script printed: the step and what it
// saw. Each step fills the fields it has.
type line struct {
	Step  string     `json:"step"`
	Error *stepError `json:"error"`

	ID        string            `json:"id"`
	IDs       []string          `json:"ids"`
	State     string            `json:"state"`
	States    []string          `json:"states"`
	ExpiresAt string            `json:"expires_at"`
	Metadata  map[string]string `json:"metadata"`
	Image     *string           `json:"image"`
	Healthy   *bool             `json:"healthy"`
	Found     *bool             `json:"found"`
	Running   *bool             `json:"running"`
	Killed    *bool             `json:"killed"`
	Template  *string           `json:"template"`

	Stdout   []string `json:"stdout"`
	Stderr   []string `json:"stderr"`
	ExitCode *int     `json:"exit_code"`

	Content *string  `json:"content"`
	Paths   []string `json:"paths"`
	Results []struct {
		Path     string `json:"path"`
		Replaced int    `json:"replaced"`
	} `json:"results"`

	Endpoint string   `json:"endpoint"`
	Headers  []string `json:"headers"`
	Status   *int     `json:"status"`
	Body     string   `json:"body"`

	CPUCount       float64 `json:"cpu_count"`
	MemoryTotalMiB float64 `json:"memory_total_mib"`
	MemoryUsedMiB  float64 `json:"memory_used_mib"`
	Timestamp      float64 `json:"timestamp"`

	Old  *string `json:"old"`
	New  *string `json:"new"`
	Info *string `json:"info"`
}

// stepError is a failed step: what the SDK raised.
type stepError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Status  int    `json:"status"`
	Code    string `json:"code"`
}

func (e *stepError) String() string {
	return fmt.Sprintf("%s (status %d, code %q): %s", e.Type, e.Status, e.Code, e.Message)
}

// runScript runs a client script (argv: the interpreter and its arguments)
// in dir, in the suite's network namespace, with env and returns its lines
// by step. It fails the test when
// the script fails, runs longer than scriptTimeout or prints a step twice;
// the steps' own failures are lines for the caller to judge.
func (s *suite) runScript(t *testing.T, dir string, env []string, argv ...string) map[string]line {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	wrapped := append(s.ns.Wrap(), argv...)
	cmd := exec.CommandContext(ctx, wrapped[0], wrapped[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	// Its own process group, killed whole at the deadline and after.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var timedOut atomic.Bool
	cmd.Cancel = func() error {
		timedOut.Store(true)
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("%s took %v", filepath.Base(argv[len(argv)-1]), time.Since(start).Round(time.Millisecond))
	if timedOut.Load() {
		err = errors.Join(err, fmt.Errorf("ran longer than %v", scriptTimeout))
	}
	if err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", argv, err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", filepath.Base(argv[len(argv)-1]), stderr.String())
	}
	lines := map[string]line{}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Step == "" {
			t.Fatalf("not a step's line: %q (%v)", sc.Text(), err)
		}
		if _, dup := lines[l.Step]; dup {
			t.Fatalf("step %q printed twice", l.Step)
		}
		lines[l.Step] = l
	}
	return lines
}

// e2bStatus is the status of GET /sandboxes/{id} of E2B's API: 200 for a
// sandbox the key has, 404 once it is gone.
func (s *suite) e2bStatus(t *testing.T, id string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", s.srv.URL()+"/sandboxes/"+id, nil)
	req.Header.Set("X-API-KEY", hutchtest.TestKey)
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// e2bCreate makes a base sandbox through E2B's API (as E2B's SDKs do),
// killed when the test ends if nothing killed it first.
func (s *suite) e2bCreate(t *testing.T, metadata map[string]string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"templateID": template, "timeout": 300, "metadata": metadata})
	req, _ := http.NewRequest("POST", s.srv.URL()+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("X-API-KEY", hutchtest.TestKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		SandboxID string `json:"sandboxID"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &out) != nil || out.SandboxID == "" {
		t.Fatalf("E2B create: %s %s", resp.Status, b)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", s.srv.URL()+"/sandboxes/"+out.SandboxID, nil)
		req.Header.Set("X-API-KEY", hutchtest.TestKey)
		if resp, err := s.client.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	return out.SandboxID
}

// unique returns a name no other test uses.
func unique(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// stepCheck is what one step of a script must have done: failed with
// status err (0: not failed), and passed check, if any.
type stepCheck struct {
	step  string
	err   int
	check func(t *testing.T, l line)
}

// judge runs checks against a script's lines, one subtest per step, and
// fails when the script printed a step no check knows.
func judge(t *testing.T, lines map[string]line, checks []stepCheck) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.step, func(t *testing.T) {
			l, ok := lines[c.step]
			switch {
			case !ok:
				t.Fatalf("the script did not get to step %s", c.step)
			case c.err == 0 && l.Error != nil:
				t.Fatalf("failed: %s", l.Error)
			case c.err != 0 && l.Error == nil:
				t.Fatalf("succeeded (%+v), want a failure with status %d", l, c.err)
			case c.err != 0 && (l.Error.Status != c.err || l.Error.Code == ""):
				t.Errorf("failed with %s, want status %d and OpenSandbox's code", l.Error, c.err)
			}
			if c.check != nil {
				c.check(t, l)
			}
		})
	}
	if len(lines) != len(checks) {
		t.Errorf("the script printed %d steps, the test knows %d", len(lines), len(checks))
	}
}
