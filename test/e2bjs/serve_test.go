package e2bjs

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// hutchBin is cmd/hutch built from this checkout, once.
var hutchBin = &hutchtest.Binary{ModuleRoot: "../.."}

func hutchBinary(t *testing.T) string { return hutchBin.Path(t) }

// server is a real `hutch serve`; see hutchtest.Server.
type server = hutchtest.Server

func startServe(t *testing.T, args ...string) *server {
	return hutchtest.StartServe(t, hutchBinary(t), args...)
}

// nodeScript runs an ES module with the SDK pointed at the server and
// returns its standard output.
func nodeScript(t *testing.T, s *server, dir, script string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"--input-type=module", "-e", script, "--"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), s.SDKEnv()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node script: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
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
	out := nodeScript(t, s, dir, `
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

	s.Stop(syscall.SIGKILL)
	// While no server runs, one sandbox's init dies.
	for _, st := range s.RuntimeSandboxes() {
		if st.ID == made.Dies {
			if err := syscall.Kill(st.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Start()

	nodeScript(t, s, dir, `
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
const [keepId, diesId, endAt] = process.argv.slice(1)
const sbx = await Sandbox.connect(keepId)
assert.equal(await sbx.files.read('/home/user/state.txt'), 'written before the restart')
const procs = await sbx.commands.list()
assert.ok(procs.some((p) => p.args.join(' ').includes('sleep 1000')), 'the background command is gone: ' + JSON.stringify(procs))
assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
const info = await sbx.getInfo()
assert.deepEqual(info.metadata, { role: 'keep', 'hutch.runtime': process.env.HUTCH_RUNTIME || 'native' })
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
	node.Env = append(os.Environ(), s.SDKEnv()...)
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { node.Process.Kill(); node.Wait() }()
	// Wait until creates are well under way, then kill the server.
	for deadline := time.Now().Add(60 * time.Second); len(s.RuntimeSandboxes()) < 6; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("creates never got going")
		}
	}
	s.Stop(syscall.SIGKILL)
	node.Process.Kill()
	node.Wait()
	before := len(s.RuntimeSandboxes())
	s.Start()

	api := s.APISandboxes()
	var ours []string
	for _, st := range s.RuntimeSandboxes() {
		if st.Labels["hutch.control-plane"] == "true" {
			ours = append(ours, st.ID)
		}
	}
	if !sameSet(api, ours) {
		t.Errorf("after the restart the API reports %v but the runtime has %v", api, ours)
	}
	// Each sandbox has two envd sockets: its API and its control socket.
	socks, _ := filepath.Glob(filepath.Join(s.DataDir, "sockets", "*.sock"))
	var sockIDs, controlIDs []string
	for _, p := range socks {
		if id, ok := strings.CutSuffix(filepath.Base(p), ".control.sock"); ok {
			controlIDs = append(controlIDs, id)
		} else {
			sockIDs = append(sockIDs, strings.TrimSuffix(filepath.Base(p), ".sock"))
		}
	}
	if !sameSet(api, sockIDs) || !sameSet(api, controlIDs) {
		t.Errorf("API sockets %v, control sockets %v, sandboxes %v", sockIDs, controlIDs, api)
	}
	t.Logf("%d runtime sandboxes at the kill, %d recorded and kept", before, len(api))
	if len(api) == 0 {
		t.Error("no sandbox survived: the creates that had finished were lost")
	}
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

// TestPausedSurviveKillAndReboot: sandboxes paused both ways survive kill
// -9 of `hutch serve` and its restart: the one that kept its memory goes on
// counting where it was, the one that kept its files boots again with them.
// Then a reboot of the host, as far as a test can make one (the server
// killed and every sandbox process with it): the one paused with its files
// comes back with them, the one that kept only memory is reported gone.
func TestPausedSurviveKillAndReboot(t *testing.T) {
	dir := jsPackage(t)
	s := startServe(t)
	out := nodeScript(t, s, dir, `
import { Sandbox } from 'e2b'
const made = {}
for (const mode of ['memory', 'files']) {
  const sbx = await Sandbox.create({ metadata: { mode }, timeoutMs: 600_000 })
  await sbx.files.write('/home/user/state.txt', 'paused keeping ' + mode)
  await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done', { background: true, timeoutMs: 0 })
  await new Promise((r) => setTimeout(r, 500))
  made[mode] = sbx.sandboxId
  made[mode + 'Count'] = Number((await sbx.commands.run('cat /tmp/count')).stdout)
  await sbx.pause({ keepMemory: mode === 'memory' })
}
console.log(JSON.stringify(made))
process.exit(0)
`)
	var made struct {
		Memory, Files string
		MemoryCount   int
	}
	if err := json.Unmarshal([]byte(out), &made); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	check := `
import assert from 'node:assert/strict'
import { Sandbox, SandboxNotFoundError } from 'e2b'
const [memoryId, filesId, count, rebooted] = process.argv.slice(1)
for (const [id, mode] of [[memoryId, 'memory'], [filesId, 'files']]) {
  if (rebooted === 'yes' && mode === 'memory') {
    await assert.rejects(Sandbox.connect(id), SandboxNotFoundError)
    continue
  }
  assert.equal((await Sandbox.getInfo(id)).state, 'paused', mode)
  const sbx = await Sandbox.connect(id)
  assert.equal(await sbx.files.read('/home/user/state.txt'), 'paused keeping ' + mode)
  const n = Number((await sbx.commands.run('cat /tmp/count')).stdout)
  await new Promise((r) => setTimeout(r, 400))
  const m = Number((await sbx.commands.run('cat /tmp/count')).stdout)
  if (mode === 'memory') {
    assert.ok(n >= Number(count) && n <= Number(count) + 8, 'the count went on from ' + count + ', not ' + n)
    assert.ok(m > n, 'the counter runs again')
  } else {
    assert.equal(m, n, 'no process of before the pause runs after a pause of the files')
  }
  await sbx.pause({ keepMemory: mode === 'memory' })
}
`
	s.Stop(syscall.SIGKILL)
	s.Start()
	nodeScript(t, s, dir, check, made.Memory, made.Files, strconv.Itoa(made.MemoryCount), "no")

	s.Stop(syscall.SIGKILL)
	for _, st := range s.RuntimeSandboxes() {
		if st.Pid > 0 {
			syscall.Kill(st.Pid, syscall.SIGKILL)
		}
	}
	time.Sleep(500 * time.Millisecond)
	s.Start()
	nodeScript(t, s, dir, check, made.Memory, made.Files, "0", "yes")
}

// TestGvisorPausedSurviveKillAndReboot: on the gvisor runtime a pause
// that keeps memory saves it to disk, so a process's in-memory state
// survives pause → kill -9 of `hutch serve` → restart → resume, and what
// a host's restart does too (every sandbox process killed meanwhile).
func TestGvisorPausedSurviveKillAndReboot(t *testing.T) {
	dir := jsPackage(t)
	hutchtest.RequireRunsc(t)
	s := startServe(t, "--runtime", "gvisor")
	out := nodeScript(t, s, dir, `
import { Sandbox } from 'e2b'
const sbx = await Sandbox.create({ timeoutMs: 600_000 })
await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done', { background: true, timeoutMs: 0 })
await new Promise((r) => setTimeout(r, 500))
const count = Number((await sbx.commands.run('cat /tmp/count')).stdout)
await sbx.pause()
console.log(JSON.stringify({ id: sbx.sandboxId, count }))
process.exit(0)
`)
	var made struct {
		ID    string
		Count int
	}
	if err := json.Unmarshal([]byte(out), &made); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	// The counter lives in the shell's memory: a count at least where it
	// was, and running, shows the process came back, not a new one.
	check := `
import assert from 'node:assert/strict'
import { Sandbox } from 'e2b'
const [id, count] = process.argv.slice(1)
assert.equal((await Sandbox.getInfo(id)).state, 'paused')
const sbx = await Sandbox.connect(id)
const n = Number((await sbx.commands.run('cat /tmp/count')).stdout)
await new Promise((r) => setTimeout(r, 400))
const m = Number((await sbx.commands.run('cat /tmp/count')).stdout)
assert.ok(n >= Number(count) && n <= Number(count) + 8, 'the count went on from ' + count + ', not ' + n)
assert.ok(m > n, 'the counter runs again')
assert.equal((await sbx.getInfo()).metadata['hutch.runtime'], 'gvisor')
await sbx.pause()
console.log(m)
`
	s.Stop(syscall.SIGKILL)
	for _, st := range s.RuntimeSandboxes() {
		if st.ID == made.ID {
			t.Errorf("a sandbox paused on gvisor holds no processes, but the runtime has it: %+v", st)
		}
	}
	s.Start()
	n, err := strconv.Atoi(nodeScript(t, s, dir, check, made.ID, strconv.Itoa(made.Count)))
	if err != nil {
		t.Fatal(err)
	}

	// A host's restart: the server and every process of a sandbox gone.
	s.Stop(syscall.SIGKILL)
	for _, st := range s.RuntimeSandboxes() {
		if st.Pid > 0 {
			syscall.Kill(st.Pid, syscall.SIGKILL)
		}
	}
	exec.Command("pkill", "-KILL", "-f", "runsc-sandbox --root="+s.DataDir).Run()
	time.Sleep(500 * time.Millisecond)
	s.Start()
	nodeScript(t, s, dir, check, made.ID, strconv.Itoa(n))
}
