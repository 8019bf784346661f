package localcli

// TestLimit* check a sandbox's resource limits from both sides: what the
// process inside runs into (the OOM kill and hutch's report of it, fork
// failing with EAGAIN) and what the host's cgroup files say (memory.limit,
// pids.max/pids.current/pids.peak/pids.events, the CFS quota and the
// throttling counter), and that the host and a neighbour sandbox carry on.
// Cgroup files are found through /proc/<init pid>/cgroup, so the tests run
// on cgroup v1, hybrid and pure v2 hosts alike. Nothing here measures time:
// waits are for conditions, with generous deadlines.
//
// TestLimitRefused checks that limits Hutch cannot honour, unknown
// templates and unrunnable commands are refused with docker's exit statuses
// (125, 126, 127), one clear message and nothing left behind.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// memoryHog allocates 4 MiB chunks whose every byte is written, printing
// the running total in MiB, until the kernel kills it.
const memoryHog = `
import sys
chunks = []
while True:
    chunks.append(b"\x01" * (4 << 20))
    print(len(chunks) * 4, flush=True)
`

func TestLimitMemory(t *testing.T) {
	name := "oom-" + randHex(t)
	t.Cleanup(func() { removeSandbox(t, name) })
	r := hutch(t, "", "run", "--name", name, "--memory", "64M", "--", "python3", "-c", memoryHog)
	if r.Code != 137 {
		t.Errorf("exit code %d, want 137 (OOM-killed)\n%v", r.Code, r)
	}
	if !strings.Contains(r.Stderr, "ran out of memory") || !strings.Contains(r.Stderr, "OOM-killed") || !strings.Contains(r.Stderr, "64M") {
		t.Errorf("stderr does not say the sandbox ran out of its 64M and was OOM-killed:\n%s", r.Stderr)
	}
	out := outLines(r.Stdout)
	if len(out) == 0 {
		t.Fatalf("the hog allocated nothing before it died:\n%v", r)
	}
	// Everything the process held counts against the limit: its last report
	// must be below it.
	if last, err := strconv.Atoi(out[len(out)-1]); err != nil || last >= 64 {
		t.Errorf("last allocation reported %q MiB, want < 64", out[len(out)-1])
	}
	st, ok := sandboxStatus(t, name)
	if !ok || st.Exit == nil || st.Exit.Code != 137 || !st.Exit.OOMKilled {
		t.Errorf("hutch ps --json: got %+v, want exited 137 with oomKilled", st)
	}
	if ps := hutch(t, "", "ps"); !strings.Contains(ps.Stdout, name) || !strings.Contains(ps.Stdout, "exited (137) oom") {
		t.Errorf("hutch ps does not mark %s as exited (137) oom:\n%s", name, ps.Stdout)
	}

	// The host is fine: the next sandbox runs normally.
	if r := sh(t, "echo still fine"); r.Code != 0 || r.Stdout != "still fine\n" {
		t.Errorf("sandbox after the OOM kill: %v", r)
	}
}

// forkBomb forks children that sleep until fork fails, reports how far it
// got and how many tasks the sandbox holds, then waits for its stdin to
// close (children keep the count up meanwhile). It is bounded: at most 1000
// forks.
const forkBomb = `
import os, sys, time
forked, err = 0, "none"
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.strerror
        break
    if pid == 0:
        time.sleep(3600)
        os._exit(0)
    forked += 1
tasks = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            tasks += len(os.listdir(f"/proc/{p}/task"))
        except OSError:
            pass
print(f"forked={forked} tasks={tasks} error={err}", flush=True)
sys.stdin.read()
`

// echoLoop answers each line of stdin with "pong <line>".
const echoLoop = `
import sys
for line in sys.stdin:
    print("pong", line.strip(), flush=True)
`

// background is a `hutch run -i` running in the background with its stdin
// and stdout at hand.
type background struct {
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer  // hutch's own stderr, read once done is closed
	done   chan struct{} // closed when hutch has exited, with err set
	err    error
}

// startBackground starts `hutch run --rm -i --name name flags -- argv` and
// makes sure it is gone when the test ends.
func startBackground(t *testing.T, name string, flags []string, argv ...string) *background {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	args := append([]string{"run", "--rm", "-i", "--name", name}, flags...)
	args = append(args, "--")
	cmd := hutchCmd(ctx, append(args, argv...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b := &background{stdin: stdin, stdout: bufio.NewReader(stdout), done: make(chan struct{})}
	cmd.Stderr = &b.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.err = cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-b.done:
		case <-time.After(20 * time.Second):
			removeSandbox(t, name)
			<-b.done
		}
		cancel()
		if b.stderr.Len() > 0 {
			t.Logf("hutch run %s stderr: %s", name, b.stderr.String())
		}
		removeSandbox(t, name)
	})
	return b
}

// readLine reads one line of the background command's output.
func (b *background) readLine(t *testing.T) string {
	t.Helper()
	line, err := b.stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("reading the sandbox's output: %v (got %q)", err, line)
	}
	return strings.TrimSpace(line)
}

func TestLimitPids(t *testing.T) {
	// A neighbour started before the bomb, answering on its stdin.
	nb := startBackground(t, "nb-"+randHex(t), nil, "python3", "-u", "-c", echoLoop)
	fmt.Fprintln(nb.stdin, "before")
	if got := nb.readLine(t); got != "pong before" {
		t.Fatalf("neighbour before the fork bomb: got %q, want %q", got, "pong before")
	}

	id := "bomb-" + randHex(t)
	bomb := startBackground(t, id, []string{"--pids", "64"}, "python3", "-c", forkBomb)
	report := bomb.readLine(t)
	t.Logf("fork bomb: %s", report)
	var forked, tasks int
	var errText string
	if _, err := fmt.Sscanf(report, "forked=%d tasks=%d error=", &forked, &tasks); err != nil {
		t.Fatalf("fork bomb report %q: %v", report, err)
	}
	_, errText, _ = strings.Cut(report, "error=")
	if errText != "Resource temporarily unavailable" {
		t.Errorf("fork failed with %q, want %q (EAGAIN from the pids cgroup)", errText, "Resource temporarily unavailable")
	}
	if tasks > 64 {
		t.Errorf("the sandbox holds %d tasks, want <= 64", tasks)
	}
	if forked < 16 {
		t.Errorf("forked %d processes before the limit, want a good part of 64", forked)
	}

	// The host's view while the bomb's children are all alive.
	pid := initPid(t, id)
	max := hutchtest.CgroupFile(t, pid, id, "pids", "pids.max", "pids.max")
	if got := readTrim(t, max); got != "64" {
		t.Errorf("%s = %q, want 64", max, got)
	}
	cur := hutchtest.CgroupFile(t, pid, id, "pids", "pids.current", "pids.current")
	if n, err := strconv.Atoi(readTrim(t, cur)); err != nil || n > 64 || n <= forked {
		t.Errorf("%s = %d (%v), want more than the %d forked children and <= 64", cur, n, err, forked)
	}
	peak := hutchtest.CgroupFile(t, pid, id, "pids", "pids.peak", "pids.peak")
	if b, err := os.ReadFile(peak); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err != nil || n > 64 {
			t.Errorf("%s = %q, want <= 64", peak, b)
		}
	} else {
		t.Logf("no %s on this kernel", peak)
	}
	events := hutchtest.CgroupFile(t, pid, id, "pids", "pids.events", "pids.events")
	if f := strings.Fields(readTrim(t, events)); len(f) < 2 || f[0] != "max" || f[1] == "0" {
		t.Errorf("%s = %q, want a non-zero max count (forks refused)", events, f)
	}

	// The neighbour still answers and new sandboxes start.
	fmt.Fprintln(nb.stdin, "after")
	if got := nb.readLine(t); got != "pong after" {
		t.Errorf("neighbour after the fork bomb: got %q, want %q", got, "pong after")
	}
	if r := sh(t, "echo fine"); r.Code != 0 || r.Stdout != "fine\n" {
		t.Errorf("a new sandbox during the fork bomb: %v", r)
	}

	// Ending the bomb's first process takes all its children with it.
	bomb.stdin.Close()
	select {
	case <-bomb.done:
		if bomb.err != nil {
			t.Errorf("fork bomb sandbox: %v", bomb.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the fork bomb's sandbox did not end after its first process was told to")
	}
	if _, ok := sandboxStatus(t, id); ok {
		t.Errorf("sandbox %s still listed after --rm", id)
	}
}

func TestLimitCPU(t *testing.T) {
	id := detachSandbox(t, []string{"--cpus", "0.2"}, "/bin/sh", "-c", "while :; do :; done")
	pid := initPid(t, id)
	var stat string
	if hutchtest.CgroupV2() {
		f := hutchtest.CgroupFile(t, pid, id, "cpu", "", "cpu.max")
		if got := readTrim(t, f); got != "20000 100000" {
			t.Errorf("%s = %q, want %q", f, got, "20000 100000")
		}
		stat = hutchtest.CgroupFile(t, pid, id, "cpu", "", "cpu.stat")
	} else {
		for file, want := range map[string]string{"cpu.cfs_quota_us": "20000", "cpu.cfs_period_us": "100000"} {
			f := hutchtest.CgroupFile(t, pid, id, "cpu", file, "")
			if got := readTrim(t, f); got != want {
				t.Errorf("%s = %q, want %q", f, got, want)
			}
		}
		stat = hutchtest.CgroupFile(t, pid, id, "cpu", "cpu.stat", "")
	}
	// A busy loop at a fifth of a CPU is throttled within a few periods; the
	// deadline only stops a broken limit from hanging the test.
	deadline := time.Now().Add(30 * time.Second)
	for {
		throttled := -1
		for _, l := range outLines(readTrim(t, stat)) {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "nr_throttled" {
				throttled, _ = strconv.Atoi(f[1])
			}
		}
		if throttled < 0 {
			t.Fatalf("%s has no nr_throttled:\n%s", stat, readTrim(t, stat))
		}
		if throttled > 0 {
			t.Logf("%s: nr_throttled %d", stat, throttled)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nr_throttled still 0 with a busy loop under --cpus 0.2", stat)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, ok := sandboxStatus(t, id); !ok || st.State != "running" {
		t.Errorf("throttled sandbox: got %+v, want running", st)
	}
}

func TestLimitRefused(t *testing.T) {
	before := sandboxDirs(t)
	tests := []struct {
		name     string
		flags    []string
		argv     []string
		wantCode int
		wantErr  string // in the single stderr line
	}{
		{"memory 1K", []string{"--memory", "1K"}, []string{"true"}, 125, "memory limit 1024 bytes is below the minimum of 16 MiB"},
		{"memory negative", []string{"--memory", "-64M"}, []string{"true"}, 125, `--memory: invalid size "-64M"`},
		{"memory not a size", []string{"--memory", "lots"}, []string{"true"}, 125, `--memory: invalid size "lots"`},
		{"cpus below minimum", []string{"--cpus", "0.001"}, []string{"true"}, 125, "cpu limit 0.001 is below the minimum of 0.01"},
		{"cpus negative", []string{"--cpus", "-1"}, []string{"true"}, 125, "cpu limit -1 is below the minimum"},
		{"cpus 1000", []string{"--cpus", "1000"}, []string{"true"}, 125, "cpu limit 1000 exceeds the host's"},
		{"pids 1", []string{"--pids", "1"}, []string{"true"}, 125, "pids limit 1 is below the minimum of 16"},
		{"pids negative", []string{"--pids", "-5"}, []string{"true"}, 125, "pids limit -5 is below the minimum"},
		{"unknown template", []string{"--template", "no-such-template"}, []string{"true"}, 125, `template "no-such-template"`},
		{"command not found", nil, []string{"no-such-command"}, 127, `"no-such-command": executable file not found in $PATH`},
		{"path not found", nil, []string{"/no/such/file"}, 127, `"/no/such/file": no such file or directory`},
		{"not executable", nil, []string{"/etc/passwd"}, 126, `"/etc/passwd": permission denied`},
		{"directory", nil, []string{"/tmp"}, 126, `"/tmp": permission denied`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := runSandbox(t, tc.flags, tc.argv...)
			if r.Code != tc.wantCode {
				t.Errorf("exit code %d, want %d\n%v", r.Code, tc.wantCode, r)
			}
			if !strings.Contains(r.Stderr, tc.wantErr) {
				t.Errorf("stderr %q does not say %q", r.Stderr, tc.wantErr)
			}
			if n := len(outLines(r.Stderr)); n != 1 {
				t.Errorf("stderr has %d lines, want one clear message:\n%s", n, r.Stderr)
			}
		})
	}
	// 0 is documented as "no limit" for --memory, --cpus and --pids
	// (`hutch run --help`), so it is accepted rather than refused.
	t.Run("zero means no limit", func(t *testing.T) {
		r := runSandbox(t, []string{"--memory", "0", "--cpus", "0", "--pids", "0"}, "/bin/sh", "-c", "echo ok")
		if r.Code != 0 || r.Stdout != "ok\n" {
			t.Errorf("got %v, want exit 0 and ok", r)
		}
	})
	if after := sandboxDirs(t); !slices.Equal(after, before) {
		t.Errorf("sandbox directories before %v, after %v: refused runs left something behind", before, after)
	}
}

// TestLimitTCPMemory: TCP socket buffers count against a sandbox's memory
// limit (on cgroup v1 they have a counter of their own, which Hutch sets
// to a quarter of it, since the host's net.ipv4.tcp_mem counts them too):
// data parked in loopback connections nobody reads cannot take the host's
// memory. The hog queues until sends would block (or it is killed for
// memory, as on cgroup v2).
func TestLimitTCPMemory(t *testing.T) {
	const hog = `
import socket, sys, time
ln = socket.socket(); ln.bind(("127.0.0.1", 0)); ln.listen(512)
port = ln.getsockname()[1]
conns, total = [], 0
chunk = b"x" * 65536
for i in range(200):
    c = socket.create_connection(("127.0.0.1", port)); s, _ = ln.accept()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    c.setblocking(False)
    conns.append((c, s))
    deadline = time.time() + 2
    while time.time() < deadline:
        try:
            total += c.send(chunk)
        except BlockingIOError:
            break
    if total > 600 << 20:
        break
print("queued_mib", total >> 20, flush=True)
`
	r := runSandbox(t, []string{"--memory", "64M"}, "python3", "-c", hog)
	t.Logf("%v", r)
	if r.Code == 137 {
		return // killed at the limit: bounded
	}
	var mib int
	if _, err := fmt.Sscanf(strings.TrimSpace(r.Stdout), "queued_mib %d", &mib); err != nil {
		t.Fatalf("the hog's output: %v", r)
	}
	if mib > 64/4+4 { // a page or so of slack per connection
		t.Errorf("a 64 MiB sandbox queued %d MiB in TCP buffers, over its quarter", mib)
	}
}

// TestLimitUnchargedSocketQueues: the replies netlink and ICMP ("ping")
// sockets queue are charged to no cgroup, so a sandbox that never reads
// them could park host memory far past its limit (review 2, A11: +6 GB of
// kernel memory in a 256 MiB sandbox whose memory counter showed 4 MiB).
// The sandbox's init kills whoever holds the fullest queues once they
// pass a quarter of the memory limit: each filler here must die with
// SIGKILL long before the 512 MiB it would stop at by itself, only the
// children holding the queues when a parent spreads them over processes,
// and everything when the sockets sit in flight in a unix socket, held by
// no process.
func TestLimitUnchargedSocketQueues(t *testing.T) {
	const prelude = `
import os, socket, struct, sys, time
STOP = 512 << 20
def queued():
    t = 0
    for name in ("netlink",):
        for line in open("/proc/self/net/" + name).readlines()[1:]:
            t += int(line.split()[4])
    for name in ("icmp", "icmp6"):
        for line in open("/proc/self/net/" + name).readlines()[1:]:
            t += int(line.split()[4].split(":")[1], 16)
    return t
def report(i):
    q = queued()
    print("queued_mib %d" % (q >> 20), flush=True)
    if q > STOP:
        print("not stopped", flush=True)
        sys.exit(0)
dump = struct.pack("=IHHII", 32, 18, 0x301, 1, 0) + bytes(16)  # RTM_GETLINK, NLM_F_DUMP
def netlink():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    for _ in range(1500):
        try:
            s.send(dump)
        except OSError:
            break
    return s
`
	for _, tc := range []struct{ name, code string }{
		{"netlink", `
keep = []
for i in range(100000):
    keep.append(netlink())
    if i % 20 == 0: report(i)
`},
		{"netlink in children", `
kids = []
for i in range(60):
    pid = os.fork()
    if pid == 0:
        keep = [netlink() for _ in range(20)]
        time.sleep(3600)
    kids.append(pid)
    report(i)
    time.sleep(0.05)
killed = 0
for pid in kids:
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        pass
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st) and os.WTERMSIG(st) == 9:
        killed += 1
print("children killed %d" % killed)
`},
		{"netlink in flight", `
a, b = socket.socketpair()
for i in range(100000):
    s = netlink()
    socket.send_fds(a, [b"x"], [s.fileno()])
    s.close()
    if i % 20 == 0: report(i)
`},
		{"ping", `
# The namespace takes ICMP in at 16 MB/s (icmplimit.go), so the guard
# sees the queues well before they reach an eighth of the usual stop.
STOP = 64 << 20
echo = struct.pack("!BBHHH", 8, 0, 0, 0, 0) + bytes(8000)
keep = []
for i in range(100000):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    for _ in range(300):
        s.sendto(echo, ("127.0.0.1", 0))
    keep.append(s)
    if i % 5 == 0: report(i)
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runSandbox(t, []string{"--memory", "64M"}, "python3", "-c", prelude+tc.code)
			lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
			t.Logf("exit %d, %d reports, last %q, stderr %q", r.Code, len(lines), lines[len(lines)-1], r.Stderr)
			switch {
			case strings.Contains(r.Stdout, "not stopped"):
				t.Errorf("the filler was not stopped: %v", r)
			case strings.Contains(r.Stdout, "children killed"):
				// The parent holds no queue and lives; its children die.
				if r.Code != 0 || strings.Contains(r.Stdout, "children killed 0\n") {
					t.Errorf("want the parent to see its children killed: %v", r)
				}
			case r.Code != 137:
				t.Errorf("want the filler killed (137): %v", r)
			}
		})
	}
}
