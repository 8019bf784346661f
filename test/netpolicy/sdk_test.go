package netpolicy

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// callTimeout bounds one request to the SDK driver.
const callTimeout = 2 * time.Minute

// driver is driver.mjs running in the host namespace (where the API
// listens), driving the official SDK.
type driver struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer

	mu      sync.Mutex
	next    int
	pending map[int]chan reply
	dead    chan struct{}
}

type reply struct {
	ID     int             `json:"id"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// startDriver starts the SDK driver; it stops when the test ends.
func startDriver(t *testing.T, w *world) *driver {
	t.Helper()
	dir := hutchtest.JSPackage(t, hutchtest.E2BJS)
	script, err := filepath.Abs("driver.mjs")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", fmt.Sprintf("--net=/proc/%d/fd/%d", os.Getpid(), int(w.host)), "--", "node", script)
	cmd.Dir = dir
	api := fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "E2B_API_URL="+api, "E2B_SANDBOX_URL="+api, "E2B_API_KEY="+hutchtest.TestKey, "NETPOLICY_E2B_DIR="+dir)
	d := &driver{t: t, cmd: cmd, stderr: &tailBuffer{max: 200}, pending: map[int]chan reply{}, dead: make(chan struct{})}
	cmd.Stderr = d.stderr
	if d.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var r reply
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue
			}
			d.mu.Lock()
			ch := d.pending[r.ID]
			delete(d.pending, r.ID)
			d.mu.Unlock()
			if ch != nil {
				ch <- r
			}
		}
		cmd.Wait()
		close(d.dead)
	}()
	t.Cleanup(func() {
		d.stdin.Close()
		select {
		case <-d.dead:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-d.dead
		}
		if t.Failed() && strings.TrimSpace(d.stderr.String()) != "" {
			t.Logf("SDK driver's stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

// call sends one request and decodes its result into out (may be nil).
func (d *driver) call(op string, args, out any) error {
	d.mu.Lock()
	d.next++
	id := d.next
	ch := make(chan reply, 1)
	d.pending[id] = ch
	line, _ := json.Marshal(map[string]any{"id": id, "op": op, "args": args})
	_, err := d.stdin.Write(append(line, '\n'))
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: driver: %w", op, err)
	}
	select {
	case r := <-ch:
		if !r.OK {
			return fmt.Errorf("%s: %s", op, r.Error)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-d.dead:
		return fmt.Errorf("%s: the SDK driver exited:\n%s", op, d.stderr.String())
	case <-time.After(callTimeout):
		return fmt.Errorf("%s: no answer in %v", op, callTimeout)
	}
}

// opts are Sandbox.create's options (allowInternetAccess, network, ...).
type opts map[string]any

// create makes a sandbox through the SDK; it is killed when t ends.
func (w *world) create(t *testing.T, o opts) string {
	t.Helper()
	id, err := w.tryCreate(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.sdk.call("kill", map[string]any{"sandboxId": id}, nil) })
	return id
}

func (w *world) tryCreate(o opts) (string, error) {
	if o == nil {
		o = opts{}
	}
	var r struct{ SandboxID string }
	err := w.sdk.call("create", map[string]any{"opts": o}, &r)
	return r.SandboxID, err
}

func (w *world) kill(t *testing.T, id string) {
	t.Helper()
	var r struct{ Killed bool }
	if err := w.sdk.call("kill", map[string]any{"sandboxId": id}, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Killed {
		t.Errorf("kill %s: not found", id)
	}
}

// cmdResult is a finished command.
type cmdResult struct {
	ExitCode int
	Stdout   string
	Stderr   string
}

// run runs a shell command in the sandbox as its default user.
func (w *world) run(t *testing.T, id, cmd string) cmdResult {
	t.Helper()
	return w.runAs(t, id, "", cmd)
}

func (w *world) runAs(t *testing.T, id, user, cmd string) cmdResult {
	t.Helper()
	var r cmdResult
	args := map[string]any{"sandboxId": id, "cmd": cmd, "timeoutMs": 60_000}
	if user != "" {
		args["user"] = user
	}
	if err := w.sdk.call("run", args, &r); err != nil {
		t.Fatalf("run %q in %s: %v", cmd, id, err)
	}
	return r
}

// spawn starts a command that keeps running in the sandbox.
func (w *world) spawn(t *testing.T, id, user, cmd string) {
	t.Helper()
	args := map[string]any{"sandboxId": id, "cmd": cmd}
	if user != "" {
		args["user"] = user
	}
	if err := w.sdk.call("spawn", args, nil); err != nil {
		t.Fatalf("spawn %q in %s: %v", cmd, id, err)
	}
}

// update is sbx.updateNetwork(network).
func (w *world) update(t *testing.T, id string, network map[string]any) {
	t.Helper()
	if err := w.sdk.call("update", map[string]any{"sandboxId": id, "network": network}, nil); err != nil {
		t.Fatalf("updateNetwork(%v) of %s: %v", network, id, err)
	}
}

// sandboxInfo is the part of getInfo the tests read.
type sandboxInfo struct {
	SandboxID           string
	AllowInternetAccess *bool
	Network             *struct {
		AllowOut []string
		DenyOut  []string
	}
}

func (w *world) info(t *testing.T, id string) sandboxInfo {
	t.Helper()
	var i sandboxInfo
	if err := w.sdk.call("info", map[string]any{"sandboxId": id}, &i); err != nil {
		t.Fatalf("getInfo of %s: %v", id, err)
	}
	return i
}

// list returns the ids Sandbox.list reports.
func (w *world) list(t *testing.T) []string {
	t.Helper()
	var r struct{ IDs []string }
	if err := w.sdk.call("list", nil, &r); err != nil {
		t.Fatal(err)
	}
	return r.IDs
}

// checkRules fails t unless getInfo reports exactly these rules.
func checkRules(t *testing.T, i sandboxInfo, allow, deny []string) {
	t.Helper()
	var gotAllow, gotDeny []string
	if i.Network != nil {
		gotAllow, gotDeny = i.Network.AllowOut, i.Network.DenyOut
	}
	if strings.Join(gotAllow, ",") != strings.Join(allow, ",") || strings.Join(gotDeny, ",") != strings.Join(deny, ",") {
		t.Errorf("getInfo().network = allowOut %q denyOut %q, want allowOut %q denyOut %q", gotAllow, gotDeny, allow, deny)
	}
}

// The sandbox's own view of its network.

var (
	inetRE  = regexp.MustCompile(`inet (\d+\.\d+\.\d+\.\d+)/`)
	routeRE = regexp.MustCompile(`default via (\d+\.\d+\.\d+\.\d+)`)
)

// sandboxAddr returns the sandbox's eth0 address and its gateway.
func (w *world) sandboxAddr(t *testing.T, id string) (addr, gateway string) {
	t.Helper()
	r := w.run(t, id, "ip -4 -o addr show dev eth0; ip -4 route show default")
	a, g := inetRE.FindStringSubmatch(r.Stdout), routeRE.FindStringSubmatch(r.Stdout)
	if a == nil || g == nil {
		t.Fatalf("sandbox %s: no address or default route:\n%s%s", id, r.Stdout, r.Stderr)
	}
	return a[1], g[1]
}

// links returns the names of the sandbox's network interfaces.
func (w *world) links(t *testing.T, id string) []string {
	t.Helper()
	r := w.run(t, id, "ip -o link show")
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			names = append(names, strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	return names
}

// Probes: many attempts at once from one sandbox, each a shell command
// whose output and exit status are judged.

type expect int

const (
	// served: exit 0 and the output names the expected server.
	served expect = iota
	// refused: no test server answered (the output names none).
	refused
	// unresolved: the name did not resolve (curl's exit 6, getent's 2),
	// and no server answered.
	unresolved
)

func (e expect) String() string {
	return [...]string{"served", "refused", "unresolved"}[e]
}

type probe struct {
	name   string
	cmd    string
	want   expect
	marker string // for served: what the output must contain
	// why explains a refusal the test asserts beyond its own name (bugs).
	why string
}

type probeResult struct {
	rc  int
	out string
}

// curl, reach and deny build probes; timeouts: dropped packets only show
// as a timeout, so refusals wait a few seconds (a slow machine can only
// make a refusal look likelier, never a reach: the served probes next to
// them show the world answers).
func reach(name, marker, curlArgs string) probe {
	return probe{name: name, cmd: "curl -sS -m 15 " + curlArgs, want: served, marker: marker}
}

func deny(name, curlArgs string) probe {
	return probe{name: name, cmd: "curl -sS -m 3 " + curlArgs, want: refused}
}

func noName(name, curlArgs string) probe {
	return probe{name: name, cmd: "curl -sS -m 10 " + curlArgs, want: unresolved}
}

// probeAll runs the probes at once in the sandbox and checks each.
func (w *world) probeAll(t *testing.T, id string, probes []probe) {
	t.Helper()
	results := w.runProbes(t, id, probes)
	for i, p := range probes {
		r := results[i]
		ok := false
		switch p.want {
		case served:
			ok = r.rc == 0 && strings.Contains(r.out, p.marker)
		case refused:
			ok = !strings.Contains(r.out, "served-by")
		case unresolved:
			ok = (r.rc == 6 || r.rc == 2) && !strings.Contains(r.out, "served-by")
		}
		verdict := "ok"
		if !ok {
			verdict = "FAIL"
			why := ""
			if p.why != "" {
				why = "\n\t" + p.why
			}
			want := p.want.String()
			if p.want == served {
				want += " (" + p.marker + ")"
			}
			t.Errorf("%s: %s: want %s; got exit %d: %q%s", p.name, p.cmd, want, r.rc, r.out, why)
		}
		t.Logf("probe %-4s %-50s want %-10s exit %-3d %s", verdict, p.name, p.want, r.rc, firstLine(r.out))
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}

func (w *world) runProbes(t *testing.T, id string, probes []probe) []probeResult {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("d=$(mktemp -d); cd \"$d\"\n")
	for i, p := range probes {
		fmt.Fprintf(&sb, "{ ( %s ) >o%d 2>&1 </dev/null; echo $? >r%d; } &\n", p.cmd, i, i)
	}
	sb.WriteString("wait\n")
	fmt.Fprintf(&sb, "for i in $(seq 0 %d); do echo \"@@probe $i $(cat r$i)\"; cat o$i; echo; done\n", len(probes)-1)
	sb.WriteString("cd /; rm -rf \"$d\"\n")
	r := w.run(t, id, sb.String())
	results := make([]probeResult, len(probes))
	for i := range results {
		results[i].rc = -1
	}
	cur := -1
	var out strings.Builder
	flush := func() {
		if cur >= 0 && cur < len(results) {
			results[cur].out = strings.TrimSpace(out.String())
		}
		out.Reset()
	}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if rest, ok := strings.CutPrefix(line, "@@probe "); ok {
			flush()
			f := strings.Fields(rest)
			cur = -1
			if len(f) == 2 {
				i, err1 := strconv.Atoi(f[0])
				rc, err2 := strconv.Atoi(f[1])
				if err1 == nil && err2 == nil && i < len(results) {
					cur, results[i].rc = i, rc
				}
			}
			continue
		}
		out.WriteString(line + "\n")
	}
	flush()
	for i, res := range results {
		if res.rc < 0 {
			t.Fatalf("probe %q gave no result; the script's output:\n%s\n%s", probes[i].name, r.Stdout, r.Stderr)
		}
	}
	return results
}

// waitFor polls cond until it holds or the deadline passes; what it
// returns last is reported on failure.
func waitFor(t *testing.T, what string, d time.Duration, cond func() (bool, string)) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: not after %v (%s)", what, d, state)
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func randomName() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// dnsPy asks one A query of SERVER:53 over udp or tcp and prints
// "rcode N answers M" and the addresses answered: it shows who answers a
// sandbox's DNS, whatever server it names.
const dnsPy = `import random, socket, struct, sys
name, server, proto = sys.argv[1], sys.argv[2], sys.argv[3]
q = struct.pack(">HHHHHH", random.randint(0, 65535), 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
if proto == "udp":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(q, (server, 53))
    r = s.recv(4096)
else:
    s = socket.create_connection((server, 53), timeout=5)
    s.sendall(struct.pack(">H", len(q)) + q)
    n = struct.unpack(">H", s.recv(2))[0]
    r = b""
    while len(r) < n:
        r += s.recv(n - len(r))
def skip(o):
    while True:
        l = r[o]
        if l == 0:
            return o + 1
        if l >= 0xC0:
            return o + 2
        o += 1 + l
rcode, qd, an = r[3] & 15, struct.unpack(">H", r[4:6])[0], struct.unpack(">H", r[6:8])[0]
o = 12
for _ in range(qd):
    o = skip(o) + 4
out = []
for _ in range(an):
    o = skip(o)
    t, c, ttl, ln = struct.unpack(">HHIH", r[o:o + 10])
    o += 10
    if t == 1 and ln == 4:
        out.append("answer " + socket.inet_ntoa(r[o:o + 4]))
    o += ln
print("rcode %d answers %d %s" % (rcode, an, " ".join(out)))
`

// installDNSProbe writes dnsPy to /tmp/dnsq.py in the sandbox.
func (w *world) installDNSProbe(t *testing.T, id string) {
	t.Helper()
	w.run(t, id, "cat > /tmp/dnsq.py <<'EOF'\n"+dnsPy+"EOF\n")
}

// dnsProbe asks name of server over proto; served when the output holds
// marker ("answer ADDR", "rcode 3 ").
func dnsProbe(name, qname, server, proto, marker string) probe {
	return probe{name: name, cmd: fmt.Sprintf("python3 /tmp/dnsq.py %s %s %s", qname, server, proto), want: served, marker: marker}
}
