package gvisor

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// TestPidsBoundAcrossUIDs: root inside that switches uids gets a fresh
// RLIMIT_NPROC budget each time, and under systrap every guest process
// is a stub process on the host; the sandbox's host tasks must still be
// bounded by its pids limit, through the pids cgroup of runsc (review 23,
// F1: 2,462 host tasks in a sandbox of --pids 512, bounded only by its
// memory). Five uids forking 30 children each is 150 guest processes,
// about 325 host tasks, in a sandbox of 40 pids: the host's count stays
// at or under the cgroup's bound (the sandbox may end there), and the
// host can start the next sandbox.
func TestPidsBoundAcrossUIDs(t *testing.T) {
	requireRunsc(t)
	rt := testRuntime(t)
	ctx := t.Context()
	const pids = 40
	const bomb = `
import os, sys, time
r, w = os.pipe()
for u in range(5):
    if os.fork() == 0:
        os.setresgid(2000 + u, 2000 + u, 2000 + u)
        os.setresuid(2000 + u, 2000 + u, 2000 + u)
        n = 0
        for i in range(30):
            try:
                c = os.fork()
            except OSError:
                break
            if c == 0:
                time.sleep(1000)
                os._exit(0)
            n += 1
        os.write(w, b"uid %d forked %d\n" % (2000 + u, n))
        time.sleep(1000)
        os._exit(0)
f = os.fdopen(r)
for u in range(5):
    print(f.readline().strip(), flush=True)
print("done", flush=True)
time.sleep(1000)
`
	out, outW := io.Pipe()
	sbx, err := rt.Create(ctx, runtime.Spec{
		Template:  "base",
		Resources: runtime.Resources{Pids: pids},
		Process:   runtime.Process{User: "root", Args: []string{"python3", "-c", bomb}, Stdout: outW, Stderr: outW},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Delete(context.Background())
	cg := filepath.Join("/sys/fs/cgroup/pids", rt.cgroupsPath(sbx.ID()))
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err != nil {
		cg = filepath.Join("/sys/fs/cgroup", rt.cgroupsPath(sbx.ID())) // pure v2
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(cg, name))
		return strings.TrimSpace(string(b))
	}
	limit, err := strconv.Atoi(read("pids.max"))
	if err != nil {
		t.Fatalf("pids.max of the sandbox's cgroup %s is %q: its host tasks are not bounded", cg, read("pids.max"))
	}
	if limit > int(hostPids(pids)) {
		t.Errorf("pids.max %d, over the bound %d for %d pids", limit, hostPids(pids), pids)
	}
	// The host's count, watched while the guest forks: the sandbox's
	// cgroup goes with it if it ends at the bound.
	stop := make(chan struct{})
	most := make(chan int, 1)
	go func() {
		m := 0
		for {
			if n, err := strconv.Atoi(read("pids.current")); err == nil && n > m {
				m = n
			}
			select {
			case <-stop:
				most <- m
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	go func() {
		sbx.Wait(context.Background())
		outW.Close()
	}()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		t.Logf("guest: %s", sc.Text())
		if sc.Text() == "done" {
			break
		}
	}
	close(stop)
	if m := <-most; m > limit {
		t.Errorf("the sandbox had %d host tasks, over its pids.max %d", m, limit)
	} else {
		t.Logf("host tasks: at most %d seen, pids.max %d", m, limit)
	}
	st, err := sbx.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the sandbox is %s (%+v)", st.State, st.Exit)
	sbx.Delete(ctx)
	// The host is fine: the next sandbox starts and runs.
	next, err := rt.Create(ctx, runtime.Spec{Template: "base", Resources: runtime.Resources{Pids: pids}, Process: runtime.Process{Args: []string{"true"}}})
	if err != nil {
		t.Fatalf("the next sandbox: %v", err)
	}
	defer next.Delete(context.Background())
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if es, err := next.Wait(wctx); err != nil || es.Code != 0 {
		t.Errorf("the next sandbox's true: %+v, %v", es, err)
	}
}
