package faults

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// rssMiB is the resident memory of process pid, in MiB.
func rssMiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb >> 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestOOMStorm: many sandboxes allocating past their memory limit at once
// (each command wants twice its sandbox's 512 MiB): the server answers
// throughout and its memory stays bounded; each command is killed, not the
// sandbox, or the sandbox is reported gone — never listed running and
// dead; a sandbox that allocates nothing is unaffected.
func TestOOMStorm(t *testing.T) {
	const storm = 10
	ctx := context.Background()
	e := newEnv(t, "native")
	e.start("")
	quiet := e.sandbox(t)
	var sbs []*sdk.Sandbox
	for range storm {
		sbs = append(sbs, e.sandbox(t))
	}
	before := rssMiB(t, e.srv.Pid())

	results := make([]error, storm)
	var wg sync.WaitGroup
	for i, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// tail keeps a line without end whole: it grows to 1 GiB.
			_, results[i] = sb.Commands.Run(ctx, "head -c 1G /dev/zero | tail > /dev/null", &sdk.RunOptions{Timeout: 5 * time.Minute})
		}()
	}
	// The server answers while the storm goes on.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	health, peak := 0, before
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := http.Get(e.srv.URL() + "/health")
		if err != nil {
			t.Fatalf("the server does not answer during the storm: %v", err)
		}
		resp.Body.Close()
		health++
		peak = max(peak, rssMiB(t, e.srv.Pid()))
	}
	t.Logf("server RSS: %d MiB before, %d MiB at most during the storm (%d health checks answered)", before, peak, health)
	// Bounded: the storm's gigabytes are the sandboxes', none the server's.
	if peak > before+128 {
		t.Errorf("the server's memory grew from %d MiB to %d MiB in the storm", before, peak)
	}
	killed := 0
	for i, err := range results {
		var exit *sdk.CommandExitError
		switch {
		case err == nil:
			t.Errorf("sandbox %s: allocating 1 GiB under a 512 MiB limit succeeded", sbs[i].ID)
		case asExit(err, &exit):
			killed++
		default:
			t.Logf("sandbox %s: the command ended with %v", sbs[i].ID, err)
		}
	}
	t.Logf("%d of %d commands killed by the OOM killer, their sandboxes running", killed, storm)
	var acked []string
	listed := e.list(t)
	for _, sb := range sbs {
		if _, ok := listed[sb.ID]; ok {
			acked = append(acked, sb.ID)
		}
	}
	e.consistent(t, append(acked, quiet.ID), nil)
}

// asExit reports whether err is a command's non-zero exit, and sets *exit.
func asExit(err error, exit **sdk.CommandExitError) bool {
	return errors.As(err, exit)
}
