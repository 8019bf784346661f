package e2bjs

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// testKey is the API key every test server accepts (HUTCH_API_KEY).
const testKey = "e2b_0123456789012345678901234567890123456789"

// testDomain is the sandbox domain: hosts "<port>-<id>.hutch.test" are
// routed to sandboxes.
const testDomain = "hutch.test"

// server is a real `hutch serve` on a loopback port, run from the binary
// built from this checkout; it can be killed and started again on the same
// data dir and address.
type server struct {
	t    *testing.T
	bin  string
	addr string
	env  []string

	args []string // extra flags of hutch serve

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func hutchBinary(t *testing.T) string { return hutchBin.Path(t) }

// startServe starts a server with a fresh data dir and the flags given;
// everything it made is removed when the test ends (sandboxes outlive
// servers by design).
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	tmp := t.TempDir()
	// Sandboxes' uids must traverse to their layers under the data dir.
	os.Chmod(filepath.Dir(tmp), 0o711)
	os.Chmod(tmp, 0o711)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	templates := os.Getenv("HUTCH_TEMPLATES")
	if templates == "" {
		templates = "/var/lib/hutch/templates"
	}
	s := &server{
		// Networking has tests of its own, in namespaces they make; these
		// servers leave the host's firewall alone.
		t: t, bin: hutchBinary(t), addr: addr, args: append([]string{"--network=false"}, args...),
		env: append(os.Environ(), "HUTCH_DATA_DIR="+filepath.Join(tmp, "data"), "HUTCH_TEMPLATES="+templates, "HUTCH_API_KEY="+testKey),
	}
	t.Cleanup(func() {
		s.stop(syscall.SIGTERM)
		for _, st := range s.runtimeSandboxes() {
			rm := exec.Command(s.bin, "rm", st.ID)
			rm.Env = s.env
			rm.Run()
		}
	})
	s.start()
	return s
}

// start runs the server and waits until it answers.
func (s *server) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, append([]string{"serve", "--listen", s.addr, "--domain", testDomain}, s.args...)...)
	cmd.Env = s.env
	log := logWriter(s.t, "serve: ")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + s.addr + "/health")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("hutch serve never answered: %v", err)
		}
	}
}

// stop sends sig to the server and waits for it to exit.
func (s *server) stop(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	<-done
}

// sdkEnv is what points the SDK at the server.
func (s *server) sdkEnv() []string {
	return []string{"E2B_API_URL=http://" + s.addr, "E2B_SANDBOX_URL=http://" + s.addr, "E2B_API_KEY=" + testKey}
}

// runtimeSandboxes lists the runtime's sandboxes in the server's data dir.
func (s *server) runtimeSandboxes() []hutchtest.RuntimeStatus {
	return hutchtest.RuntimeSandboxes(s.t, s.bin, s.env)
}

// apiSandboxes lists the sandboxes the API reports (every state).
func (s *server) apiSandboxes() []string {
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/v2/sandboxes?limit=100", nil)
	req.Header.Set("X-API-KEY", testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		s.t.Fatalf("list sandboxes: %s: %v", resp.Status, err)
	}
	var ids []string
	for _, sb := range list {
		ids = append(ids, sb.SandboxID)
	}
	return ids
}

// nodeScript runs an ES module with the SDK pointed at the server and
// returns its standard output.
func (s *server) nodeScript(dir, script string, args ...string) string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"--input-type=module", "-e", script, "--"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), s.sdkEnv()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		s.t.Fatalf("node script: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// TestRestartKeepsSandboxes: after kill -9 of `hutch serve` and a restart
// on the same data dir, the SDK finds every running sandbox again — same
// id, token, end of life, metadata, files and processes — and a sandbox
// whose init died meanwhile is reported gone, not half-alive.
func TestRestartKeepsSandboxes(t *testing.T) {
	dir := jsPackage(t)
	s := startServe(t)
	out := s.nodeScript(dir, `
import { Sandbox } from 'e2b'
const keep = await Sandbox.create({ metadata: { role: 'keep' }, timeoutMs: 600_000 })
await keep.files.write('/home/user/state.txt', 'written before the restart')
// No deadline: a command's deadline would kill it (as E2B's does).
const bg = await keep.commands.run('sleep 1000', { background: true, timeoutMs: 0 })
await bg.disconnect()
const dies = await Sandbox.create({ metadata: { role: 'dies' }, timeoutMs: 600_000 })
const info = await keep.getInfo()
console.log(JSON.stringify({ keep: keep.sandboxId, dies: dies.sandboxId, endAt: info.endAt.getTime() }))
process.exit(0)
`)
	var made struct {
		Keep, Dies string
		EndAt      int64
	}
	if err := json.Unmarshal([]byte(out), &made); err != nil {
		t.Fatalf("%v: %q", err, out)
	}

	s.stop(syscall.SIGKILL)
	// While no server runs, one sandbox's init dies.
	for _, st := range s.runtimeSandboxes() {
		if st.ID == made.Dies {
			if err := syscall.Kill(st.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.start()

	s.nodeScript(dir, `
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
const [keepId, diesId, endAt] = process.argv.slice(1)
const sbx = await Sandbox.connect(keepId)
assert.equal(await sbx.files.read('/home/user/state.txt'), 'written before the restart')
const procs = await sbx.commands.list()
assert.ok(procs.some((p) => p.args.join(' ').includes('sleep 1000')), 'the background command is gone: ' + JSON.stringify(procs))
assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
const info = await sbx.getInfo()
assert.deepEqual(info.metadata, { role: 'keep' })
assert.equal(info.endAt.getTime(), Number(endAt), 'the end of life moved')
await assert.rejects(Sandbox.connect(diesId), SandboxNotFoundError)
const listed = (await Sandbox.list().nextItems()).map((s) => s.sandboxId)
assert.deepEqual(listed, [keepId])
`, made.Keep, made.Dies, strconv.FormatInt(made.EndAt, 10))
}

// TestKilledMidCreateLeavesNothing: kill -9 of the server while creates
// are in flight, then a restart, leaves exactly the sandboxes the API
// reports: no runtime sandbox, socket or record of a half-made one.
func TestKilledMidCreateLeavesNothing(t *testing.T) {
	dir := jsPackage(t)
	// Without a warm pool: its sandboxes are the control plane's but not
	// the API's until handed out.
	s := startServe(t, "--warm", "0")
	node := exec.Command("node", "--input-type=module", "-e", `
import { Sandbox } from 'e2b'
// Creates back to back, four at a time, until the server dies.
await Promise.all([0, 1, 2, 3].map(async () => { for (;;) await Sandbox.create({ timeoutMs: 600_000 }) }))
`)
	node.Dir = dir
	node.Env = append(os.Environ(), s.sdkEnv()...)
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { node.Process.Kill(); node.Wait() }()
	// Wait until creates are well under way, then kill the server.
	for deadline := time.Now().Add(60 * time.Second); len(s.runtimeSandboxes()) < 6; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("creates never got going")
		}
	}
	s.stop(syscall.SIGKILL)
	node.Process.Kill()
	node.Wait()
	before := len(s.runtimeSandboxes())
	s.start()

	api := s.apiSandboxes()
	var ours []string
	for _, st := range s.runtimeSandboxes() {
		if st.Labels["hutch.control-plane"] == "true" {
			ours = append(ours, st.ID)
		}
	}
	if !sameSet(api, ours) {
		t.Errorf("after the restart the API reports %v but the runtime has %v", api, ours)
	}
	socks, _ := filepath.Glob(filepath.Join(dataDir(s), "sockets", "*.sock"))
	var sockIDs []string
	for _, p := range socks {
		sockIDs = append(sockIDs, strings.TrimSuffix(filepath.Base(p), ".sock"))
	}
	if !sameSet(api, sockIDs) {
		t.Errorf("sockets %v, sandboxes %v", sockIDs, api)
	}
	t.Logf("%d runtime sandboxes at the kill, %d recorded and kept", before, len(api))
	if len(api) == 0 {
		t.Error("no sandbox survived: the creates that had finished were lost")
	}
}

func dataDir(s *server) string {
	for _, kv := range s.env {
		if v, ok := strings.CutPrefix(kv, "HUTCH_DATA_DIR="); ok {
			return v
		}
	}
	return ""
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		if seen[x]--; seen[x] < 0 {
			return false
		}
	}
	return true
}
