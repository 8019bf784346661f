package localcli

// Helpers shared by the escape and limit tests: running commands in
// sandboxes, finding a sandbox's processes and cgroup files from the host.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// runSandbox runs argv in a fresh `hutch run --rm` sandbox with the given flags.
func runSandbox(t testing.TB, flags []string, argv ...string) result {
	t.Helper()
	args := append([]string{"run", "--rm"}, flags...)
	args = append(args, "--")
	return hutch(t, "", append(args, argv...)...)
}

// runInheriting is runSandbox, but hutch itself is started holding f open (without
// close-on-exec) as descriptor fd, the way a careless caller such as a shell
// script or a daemon leaks descriptors into the programs it starts.
func runInheriting(t testing.TB, f *os.File, fd int, flags []string, argv ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"run", "--rm"}, flags...)
	args = append(args, "--")
	cmd := hutchCmd(ctx, append(args, argv...)...)
	// ExtraFiles[i] becomes descriptor 3+i; nil entries are closed.
	cmd.ExtraFiles = make([]*os.File, fd-3+1)
	cmd.ExtraFiles[fd-3] = f
	return hutchtest.Run(t, cmd)
}

// pyArgv returns the argv that runs code with the sandbox's python3.
func pyArgv(code string) []string { return []string{"python3", "-c", code} }

// randHex returns a random hex string for markers and names.
func randHex(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// sleepArg returns a unique argument for sleep(1): a duration of about 1000
// seconds whose digits make it findable in any process listing.
func sleepArg(t testing.TB) string {
	t.Helper()
	n, err := strconv.ParseUint(randHex(t)[:8], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return "1000." + strconv.FormatUint(n, 10)
}

// detachSandbox starts a sandbox with `hutch run -d` and removes it when the test
// ends. It returns the sandbox id.
func detachSandbox(t testing.TB, flags []string, argv ...string) string {
	t.Helper()
	args := append([]string{"run", "-d"}, flags...)
	args = append(args, "--")
	r := hutch(t, "", append(args, argv...)...)
	id := strings.TrimSpace(r.Stdout)
	if r.Code != 0 || id == "" {
		t.Fatalf("hutch run -d %v: %v", argv, r)
	}
	t.Cleanup(func() { removeSandbox(t, id) })
	return id
}

// waitOutput reads a detached sandbox's output files (the older, then the
// newer) until done says so or ten seconds pass, and returns what they
// hold then.
func waitOutput(t testing.TB, id string, done func(out []byte) bool) []byte {
	t.Helper()
	dir := filepath.Join(dataDir, "sandboxes", id)
	var out []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		cur, _ := os.ReadFile(filepath.Join(dir, "output.log"))
		old, _ := os.ReadFile(filepath.Join(dir, "output.1.log"))
		if out = append(old, cur...); done(out) {
			break
		}
	}
	return out
}

// removeSandbox runs `hutch rm id` unless the sandbox is already gone.
func removeSandbox(t testing.TB, id string) {
	t.Helper()
	if st, ok := sandboxStatus(t, id); !ok {
		return
	} else if r := hutch(t, "", "rm", id); r.Code != 0 {
		t.Errorf("hutch rm %s (state %s): %v", id, st.State, r)
	}
}

// psRow is the part of `hutch ps --json` the tests read.
type psRow struct {
	ID    string
	State string
	Pid   int
	Exit  *struct {
		Code      int  `json:"code"`
		OOMKilled bool `json:"oomKilled"`
	}
}

// sandboxStatus finds id in `hutch ps --json`.
func sandboxStatus(t testing.TB, id string) (psRow, bool) {
	t.Helper()
	r := hutch(t, "", "ps", "--json")
	if r.Code != 0 {
		t.Fatalf("hutch ps --json: %v", r)
	}
	var list []psRow
	if err := json.Unmarshal([]byte(r.Stdout), &list); err != nil {
		t.Fatalf("hutch ps --json: %v\n%s", err, r.Stdout)
	}
	for _, e := range list {
		if e.ID == id {
			return e, true
		}
	}
	return psRow{}, false
}

// initPid returns the host pid of a running sandbox's init.
func initPid(t testing.TB, id string) int {
	t.Helper()
	st, ok := sandboxStatus(t, id)
	if !ok || st.State != "running" || st.Pid <= 0 {
		t.Fatalf("sandbox %s is not running: %+v", id, st)
	}
	return st.Pid
}

// hostCmdline returns the argv of host process pid, nil if it is gone.
func hostCmdline(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// hostPids lists host processes whose argv is exactly argv.
func hostPids(argv ...string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if got := hostCmdline(pid); strings.Join(got, "\x00") == strings.Join(argv, "\x00") {
			out = append(out, pid)
		}
	}
	return out
}

// waitHostPid waits (up to 20 s, not a performance bound) for exactly one
// host process running argv and returns its pid.
func waitHostPid(t testing.TB, argv ...string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := hostPids(argv...)
		if len(pids) == 1 {
			return pids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("host processes running %q: got %v, want exactly one", argv, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// procStatus returns a field of /proc/<pid>/status, split into words.
func procStatus(t testing.TB, pid int, field string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return strings.Fields(v)
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return nil
}

// startHostSleep runs sleep(1) on the host with a unique argument, killed
// when the test ends.
func startHostSleep(t testing.TB) (*exec.Cmd, string) {
	t.Helper()
	arg := sleepArg(t)
	cmd := exec.Command("sleep", arg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, arg
}

// processState returns the state letter of host process pid ("R", "S", "Z"
// ...), or "" when it does not exist.
func processState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// fileSHA256 returns the hex sha256 of a host file.
func fileSHA256(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// readTrim returns a host file's content without surrounding space.
func readTrim(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// outLines splits output into trimmed, non-empty lines.
func outLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// hasLine reports whether out has a line equal to want (ignoring spaces
// around it).
func hasLine(out, want string) bool {
	for _, l := range outLines(out) {
		if l == want {
			return true
		}
	}
	return false
}

// wantLines fails the test for each want that is not a line of r.Stdout.
func wantLines(t testing.TB, r result, want ...string) {
	t.Helper()
	for _, w := range want {
		if !hasLine(r.Stdout, w) {
			t.Errorf("output has no line %q\n%v", w, r)
		}
	}
}
