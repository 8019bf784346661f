package remotecli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPauseResume: `hutch sandbox pause` freezes a sandbox in place (its
// info says paused, exec cannot reach it, a second pause says so) and
// `hutch sandbox resume` brings it back where it was: a process counting
// in its memory goes on from its count.
func TestPauseResume(t *testing.T) {
	f := newFixture(t)
	id := f.createSandbox(t, "--timeout", "5m")
	f.ok(t, "exec", id, "--", "sh", "-c", `nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' >/dev/null 2>&1 & sleep 0.5`)
	// The counter's number (again, when it caught the file between the
	// shell's truncation and its write).
	count := func() int {
		t.Helper()
		var out string
		for range 20 {
			out = strings.TrimSpace(f.ok(t, "exec", id, "--", "cat", "/tmp/count"))
			if n, err := strconv.Atoi(out); err == nil {
				return n
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("/tmp/count = %q", out)
		return 0
	}
	state := func() string {
		t.Helper()
		var info sandboxInfo
		if err := json.Unmarshal([]byte(f.ok(t, "sandbox", "info", "--json", id)), &info); err != nil {
			t.Fatal(err)
		}
		return info.State
	}
	before := count()
	if out := strings.TrimSpace(f.ok(t, "sandbox", "pause", id)); out != id {
		t.Errorf("sandbox pause printed %q, want the id", out)
	}
	if st := state(); st != "paused" {
		t.Errorf("state after pause: %q", st)
	}
	if r := f.hutch(t, "", "sandbox", "pause", id); r.Code != 0 || !strings.Contains(r.Stderr, "already paused") {
		t.Errorf("a second pause: %s", r)
	}
	wantFailure(t, f.hutch(t, "", "exec", id, "--", "true"), 125, "is paused: resume it with `hutch sandbox resume")
	time.Sleep(1500 * time.Millisecond)
	f.ok(t, "sandbox", "resume", id)
	if st := state(); st != "running" {
		t.Errorf("state after resume: %q", st)
	}
	if after := count(); after < before || after > before+8 {
		t.Errorf("count %d → %d across a 1.5 s pause: not where it was", before, after)
	}
	wantFailure(t, f.hutch(t, "", "sandbox", "pause", "inosuchsandbox00000000"), 1, "inosuchsandbox00000000")
}

// TestKeepBranchComeBack: `hutch sandbox pause --filesystem` keeps the
// files only (a resume boots it again: the files are there, the counter
// is not), `hutch sandbox snapshot` makes a template others start from,
// `hutch snapshot ls|rm` list and delete it, and `hutch sandbox fork`
// prints one id per fork, each with the files.
func TestKeepBranchComeBack(t *testing.T) {
	f := newFixture(t)
	id := f.createSandbox(t, "--timeout", "5m")
	f.ok(t, "exec", id, "--", "sh", "-c", `echo kept > /home/user/f; nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' >/dev/null 2>&1 & sleep 0.3`)

	snap := strings.TrimSpace(f.ok(t, "sandbox", "snapshot", id))
	ls := f.ok(t, "snapshot", "ls", "--sandbox", id)
	if !strings.Contains(ls, snap) {
		t.Errorf("snapshot ls --sandbox %s:\n%s\nwant %s", id, ls, snap)
	}
	copy := f.createSandbox(t, "--template", snap, "--timeout", "2m")
	if got := f.ok(t, "exec", copy, "--", "cat", "/home/user/f"); got != "kept\n" {
		t.Errorf("a sandbox from the snapshot has %q", got)
	}
	f.ok(t, "sandbox", "kill", copy)
	if out := strings.TrimSpace(f.ok(t, "snapshot", "rm", snap)); out != snap {
		t.Errorf("snapshot rm printed %q", out)
	}
	wantFailure(t, f.hutch(t, "", "snapshot", "rm", snap), 1, "no snapshot "+snap)

	forks := strings.Fields(f.ok(t, "sandbox", "fork", id, "--count", "2", "--timeout", "2m"))
	if len(forks) != 2 {
		t.Fatalf("sandbox fork --count 2 printed %q", forks)
	}
	for _, fk := range forks {
		if got := f.ok(t, "exec", fk, "--", "cat", "/home/user/f"); got != "kept\n" {
			t.Errorf("fork %s has %q", fk, got)
		}
		f.ok(t, "sandbox", "kill", fk)
	}
	wantFailure(t, f.hutch(t, "", "sandbox", "fork", id, "--count", "0"), 1, "--count 0: from 1 to 100")

	f.ok(t, "sandbox", "pause", "--filesystem", id)
	f.ok(t, "sandbox", "resume", id)
	if got := f.ok(t, "exec", id, "--", "cat", "/home/user/f"); got != "kept\n" {
		t.Errorf("after a pause of the files: %q", got)
	}
	c1 := f.ok(t, "exec", id, "--", "cat", "/tmp/count")
	time.Sleep(400 * time.Millisecond)
	if c2 := f.ok(t, "exec", id, "--", "cat", "/tmp/count"); c1 != c2 {
		t.Errorf("the counter runs on (%s → %s) after a pause of the files only", strings.TrimSpace(c1), strings.TrimSpace(c2))
	}
}
