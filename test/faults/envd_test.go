package faults

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// descendants are the pids below pid, depth first.
func descendants(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}

// envdPid is the host pid of sandbox id's envd (native), 0 if none runs.
func (e *env) envdPid(t *testing.T, id string) int {
	t.Helper()
	for _, st := range e.srv.RuntimeSandboxes() {
		if st.ID != id {
			continue
		}
		for _, p := range descendants(st.Pid) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
			if strings.Contains(string(b), "envd") {
				return p
			}
		}
	}
	return 0
}

// gone waits for the API to stop listing sandbox id, failing the test if
// it lists it after a minute.
func (e *env) gone(t *testing.T, id, why string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, ok := e.list(t)[id]; !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("sandbox %s is still listed a minute after %s", id, why)
			return
		}
	}
}

// TestEnvdKilled: a sandbox whose envd is killed from the host (once, or
// again each time one runs: crash-looping) is reported gone — not listed
// running while it answers nothing — and leaves nothing behind; a request
// to it fails clearly; the other sandboxes are untouched. (envd is the
// sandbox's first process: nothing starts it again.)
func TestEnvdKilled(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, "native")
	e.start("")
	once, looping, other := e.sandbox(t), e.sandbox(t), e.sandbox(t)

	pid := e.envdPid(t, once.ID)
	if pid == 0 {
		t.Fatalf("no envd found in sandbox %s", once.ID)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	// Looping: each envd found in the sandbox is killed, until none is.
	kills := 0
	for p := e.envdPid(t, looping.ID); p != 0; p = e.envdPid(t, looping.ID) {
		syscall.Kill(p, syscall.SIGKILL)
		kills++
		time.Sleep(20 * time.Millisecond)
	}
	if kills == 0 {
		t.Fatalf("no envd found in sandbox %s", looping.ID)
	}
	for _, sb := range []*sdk.Sandbox{once, looping} {
		e.gone(t, sb.ID, "its envd was killed")
		_, err := sb.Commands.Run(ctx, "true", &sdk.RunOptions{Timeout: time.Minute})
		if !errors.Is(err, sdk.ErrNotRunning) && !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("a command in sandbox %s, whose envd was killed: %v; want not running or not found", sb.ID, err)
		}
		if _, err := e.client.Connect(ctx, sb.ID, sdk.ConnectOptions{}); !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("connect to sandbox %s, whose envd was killed: %v; want not found", sb.ID, err)
		}
		if l := leftovers(e.srv.DataDir, sb.ID); len(l) > 0 {
			t.Errorf("sandbox %s is gone, and left %v", sb.ID, l)
		}
	}
	e.consistent(t, []string{other.ID}, nil)
}
