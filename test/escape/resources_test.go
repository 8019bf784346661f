package escape

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// leftoverAttempts leave things behind for the sandbox that comes next
// (from the warm pool, on a reused uid range or address) and look for
// what the host keeps of a sandbox once it is gone.
var leftoverAttempts = []attempt{
	{"leftovers-for-the-next-sandbox", "leftovers", func(t *testing.T, s *suite, b string) {
		mark := unique("left")
		a := s.sandbox(t, b, sdk.CreateOptions{})
		out := run(t, a, "root", fmt.Sprintf(`for d in /tmp /dev/shm /var/tmp /run /home/user; do echo x > $d/%[1]s; done
ipcmk -M 4096 >/dev/null; ipcmk -Q >/dev/null
setsid nohup sleep 86395 </dev/null >/dev/null 2>&1 &
python3 -c 'import socket,os,time
s=socket.socket(socket.AF_UNIX); s.bind("\0%[1]s"); s.listen()
if os.fork(): os._exit(0)
os.setsid(); time.sleep(86395)' </dev/null >/dev/null 2>&1 &
sleep 0.5; ipcs -m | grep -c 0x; grep -c %[1]s /proc/net/unix`, mark))
		t.Logf("left behind:\n%s", out)
		if err := a.Kill(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The next sandboxes: one from the warm pool (native's base),
		// others on what a's going freed.
		for range 3 {
			n := s.sandbox(t, b, sdk.CreateOptions{})
			seen := run(t, n, "root", fmt.Sprintf(`ls /tmp /dev/shm /var/tmp /run /home/user 2>/dev/null | grep %[1]s
echo "shm: $(ipcs -m | grep -c 0x)"; echo "queues: $(ipcs -q | grep -c 0x)"
grep %[1]s /proc/net/unix; pgrep -f 'sleep 8639[5]' && echo sleeper; echo checked`, mark))
			want(t, seen, "checked", "shm: 0", "queues: 0")
			absent(t, seen, mark, "sleeper")
		}
	}},
	{"leftovers-on-the-host", "leftovers", func(t *testing.T, s *suite, b string) {
		// Once killed, nothing of the sandbox stays on the host: no
		// process of its uids, no cgroup, no file or mount naming it.
		a := s.sandbox(t, b, sdk.CreateOptions{})
		uidMap := run(t, a, "root", "cat /proc/self/uid_map")
		run(t, a, "root", "setsid nohup sleep 86394 </dev/null >/dev/null 2>&1 & dd if=/dev/zero of=/tmp/fill bs=1M count=8 2>/dev/null; true")
		if err := a.Kill(t.Context()); err != nil {
			t.Fatal(err)
		}
		var left []string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			left = hostTraces(s.srv.DataDir, a.ID)
			if b == "native" {
				left = append(left, processesOfRange(uidMap)...)
			}
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("the host keeps what sandbox %s had: %q", a.ID, left)
		}
	}},
}

// hostTraces are the host's files, cgroups and mounts that name id.
func hostTraces(dataDir, id string) []string {
	var left []string
	filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), id) {
			left = append(left, p)
		}
		return nil
	})
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/hutch/" + id + "*")
	cgs2, _ := filepath.Glob("/sys/fs/cgroup/hutch/" + id + "*")
	left = append(append(left, cgs...), cgs2...)
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(mi), "\n") {
			if strings.Contains(l, id) {
				left = append(left, "mount "+l)
			}
		}
	}
	return left
}

// processesOfRange are host processes whose uid falls in the outer range
// of uidMap (a /proc/<pid>/uid_map as the sandbox read it).
func processesOfRange(uidMap string) []string {
	f := strings.Fields(uidMap)
	if len(f) < 3 {
		return []string{"no uid map: " + uidMap}
	}
	lo, _ := strconv.Atoi(f[1])
	n, _ := strconv.Atoi(f[2])
	var left []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		st, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if g := strings.Fields(l); len(g) > 1 && g[0] == "Uid:" {
				if u, _ := strconv.Atoi(g[1]); u >= lo && u < lo+n && lo > 0 {
					cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
					left = append(left, fmt.Sprintf("pid %s uid %d %q", e.Name(), u, cmd))
				}
			}
		}
	}
	return left
}

// resourceAttempts exhaust each limit: the sandbox stops at its own, the
// host, the server and the neighbours go on.
var resourceAttempts = []attempt{
	{"memory", "resources", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		res, err := sbx.Commands.Run(t.Context(), `python3 -c 'x = []
while True: x.append(bytearray(64 << 20))'`, &sdk.RunOptions{Timeout: 2 * time.Minute})
		t.Logf("the hog: %+v %v", res, err)
		if res != nil && res.ExitCode == 0 {
			t.Errorf("the hog finished: it never met the limit")
		}
		s.serverHealthy(t)
		// The OOM killer takes the hog natively; gVisor's kernel may
		// end the whole sandbox, which the API then reports gone.
		if ok, _ := sbx.IsRunning(t.Context()); ok || b == "native" {
			alive(t, sbx)
		}
	}},
	{"pids", "resources", func(t *testing.T, s *suite, b string) {
		n := s.sandbox(t, b, sdk.CreateOptions{})
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		h := startPy(t, sbx, "root", `
kids = []
while len(kids) < 100000:
    try:
        p = os.fork()
    except OSError as e:
        print("fork:", errno.errorcode[e.errno]); break
    if p == 0:
        time.sleep(30); os._exit(0)
    kids.append(p)
print("forked:", len(kids))
for p in kids:
    os.kill(p, 9)
`)
		h.Wait(t.Context())
		s.hostAlive(t)
		alive(t, n)
		endedOrAnswers(t, b, sbx, h.Stdout(), "fork: EAGAIN")
	}},
	{"disk", "resources", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := run(t, sbx, "root", `fallocate -l 4G /tmp/big 2>&1; rm -f /tmp/big; dd if=/dev/zero of=/tmp/big bs=1M count=4096 2>&1 | tail -2; ls -la /tmp/big; rm -f /tmp/big`)
		if !strings.Contains(out, "No space left") {
			t.Errorf("4 GiB fit in a 512 MiB sandbox:\n%s", out)
		}
		alive(t, sbx)
	}},
	{"inodes", "resources", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		h := startPy(t, sbx, "root", `
os.makedirs("/tmp/i", exist_ok=True)
n = 0
try:
    while n < 300000:
        os.close(os.open(f"/tmp/i/{n}", os.O_CREAT | os.O_WRONLY)); n += 1
    print("stopped: never")
except OSError as e:
    print("stopped:", errno.errorcode[e.errno])
print("files:", n)
`)
		h.Wait(t.Context())
		if !endedOrAnswers(t, b, sbx, h.Stdout(), "stopped: ENOSPC") {
			run(t, sbx, "root", "rm -rf /tmp/i")
		}
	}},
	{"descriptors", "resources", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", `
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
print("limit:", soft, hard)
attempt("raise-hard", resource.setrlimit, resource.RLIMIT_NOFILE, (hard + 1, hard + 1))
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fds = []
try:
    while len(fds) < 10000000:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print("open:", errno.errorcode[e.errno])
print("opened:", len(fds))
`)
		want(t, out, "open: EMFILE")
		refused(t, b, out, "raise-hard")
		s.serverHealthy(t)
		alive(t, sbx)
	}},
	{"terminals", "resources", func(t *testing.T, s *suite, b string) {
		n := s.sandbox(t, b, sdk.CreateOptions{})
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		const grab = `
fds = []
try:
    while len(fds) < 100000:
        fds.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
except OSError as e:
    print("ptmx:", errno.errorcode[e.errno])
print("ptys:", len(fds))
`
		before := hostPtys(t)
		h := startPy(t, sbx, "root", grab+"\ntime.sleep(120)")
		for i := 0; !strings.Contains(h.Stdout(), "ptys:") && i < 300; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("%s", h.Stdout())
		// Natively ptys come from the host's pool, so the sandbox meets
		// a bound of its own; gVisor's are its kernel's, in its memory.
		if b == "native" && !strings.Contains(h.Stdout(), "ptmx: ") {
			t.Errorf("the sandbox opened terminals without end: %s", h.Stdout())
		}
		if grew := hostPtys(t) - before; grew > 4096 {
			t.Errorf("the host's pty pool grew by %d", grew)
		}
		out := py(t, n, "user", `attempt("neighbour-ptmx", lambda: os.close(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)))`)
		want(t, out, "neighbour-ptmx: OK")
	}},
	{"inotify-and-queues", "resources", func(t *testing.T, s *suite, b string) {
		// Kernel budgets counted per host user: a sandbox spending its
		// all leaves its neighbour's.
		n := s.sandbox(t, b, sdk.CreateOptions{})
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		const grab = `
fds = []
while len(fds) < 100000:
    r = libc.inotify_init1(0)
    if r < 0:
        print("inotify:", errno.errorcode[ctypes.get_errno()]); break
    fds.append(r)
print("instances:", len(fds))
`
		h := startPy(t, sbx, "user", grab+"\ntime.sleep(120)")
		for i := 0; !strings.Contains(h.Stdout(), "instances:") && i < 300; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		out := py(t, n, "user", `
ctypes.set_errno(0)
r = libc.inotify_init1(0)
print("neighbour-inotify:", "OK" if r >= 0 else errno.errorcode[ctypes.get_errno()])
`)
		want(t, out, "neighbour-inotify: OK")
	}},
	{"snapshot-of-a-sparse-file", "resources", func(t *testing.T, s *suite, b string) {
		// A file far larger than the sandbox's disk, all hole: a
		// snapshot (written to the shared template store) keeps it
		// small or is refused, never fills the store's disk.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		run(t, sbx, "root", "truncate -s 200G /tmp/sparse && echo end >> /tmp/sparse")
		var before syscall.Statfs_t
		syscall.Statfs(s.templates, &before)
		snap, err := s.client.CreateSnapshot(t.Context(), sbx.ID, sdk.SnapshotOptions{Name: unique("sparse")})
		var after syscall.Statfs_t
		syscall.Statfs(s.templates, &after)
		t.Logf("snapshot: %+v %v", snap, err)
		if err == nil {
			t.Cleanup(func() { s.client.DeleteSnapshot(context.Background(), snap.ID) })
		}
		if used := (int64(before.Bavail) - int64(after.Bavail)) * before.Bsize; used > 2<<30 {
			t.Errorf("the snapshot took %d MiB of the store's disk", used>>20)
		}
		alive(t, sbx)
	}},
}

// endedOrAnswers checks a sandbox after it exhausted a limit with a
// command whose output was out: natively the command met the limit (the
// line wantLine) and the sandbox answers; on gVisor the sandbox may
// instead have ended whole (its kernel, a process of the host, met the
// host's limit) and be reported gone. It says whether it ended.
func endedOrAnswers(t *testing.T, b string, sbx *sdk.Sandbox, out, wantLine string) (ended bool) {
	t.Helper()
	if aliveOrGone(t, sbx) {
		if b == "native" {
			t.Errorf("the sandbox ended: %s", out)
		}
		t.Logf("the sandbox ended whole (gVisor): %s", out)
		return true
	}
	want(t, out, wantLine)
	return false
}

// hostPtys is how many ptys the host's kernel has handed out.
func hostPtys(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/pty/nr")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// serverHealthy fails t unless the server answers its API.
func (s *suite) serverHealthy(t *testing.T) {
	t.Helper()
	if _, err := s.client.GetInfo(t.Context(), "no-such-sandbox"); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("the server does not answer as it should: %v", err)
	}
}
