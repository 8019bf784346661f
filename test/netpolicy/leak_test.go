package netpolicy

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cyclePolicies are what the create/kill cycles use, in turn.
var cyclePolicies = []struct {
	name  string
	opts  opts
	proxy bool // web traffic goes through the egress proxy
	net   bool // has a network
}{
	{"default", opts{}, false, true},
	{"domain-allow-list", opts{"network": map[string]any{"allowOut": []string{"allowed.test"}, "denyOut": []string{"0.0.0.0/0"}}}, true, true},
	{"no-internet", opts{"allowInternetAccess": false}, false, false},
	{"cidr-deny-list", opts{"network": map[string]any{"denyOut": []string{"198.51.100.0/24"}}}, false, true},
}

// TestCreateKillCyclesLeaveNothing: 100 sandboxes of every kind of policy
// are created and killed, four at a time; some talk to the internet
// (DNS, a finished request, and a connection still open when they are
// killed). Afterwards the host holds nothing of them: no link, no firewall
// chain, set or element, no conntrack entry of the sandbox range, no
// socket of the egress proxy to or from the sandbox range.
func TestCreateKillCyclesLeaveNothing(t *testing.T) {
	w := newWorld(t)
	const cycles, workers = 100, 4
	var (
		mu      sync.Mutex
		next    int
		failed  []string
		talked  int
		wg      sync.WaitGroup
		started = time.Now()
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		failed = append(failed, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= cycles || len(failed) > 5
				mu.Unlock()
				if stop {
					return
				}
				p := cyclePolicies[i%len(cyclePolicies)]
				id, err := w.tryCreate(p.opts)
				if err != nil {
					fail("cycle %d (%s): create: %v", i, p.name, err)
					continue
				}
				if i%5 == 0 && p.net {
					if err := w.talk(id, p.proxy); err != nil {
						fail("cycle %d (%s): traffic: %v", i, p.name, err)
					} else {
						mu.Lock()
						talked++
						mu.Unlock()
					}
				}
				var r struct{ Killed bool }
				if err := w.sdk.call("kill", map[string]any{"sandboxId": id}, &r); err != nil || !r.Killed {
					fail("cycle %d (%s): kill %s: %v %v", i, p.name, id, r.Killed, err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d create/kill cycles (%d with traffic) in %v", cycles, talked, time.Since(started).Round(time.Millisecond))
	for _, f := range failed {
		t.Error(f)
	}
	if len(failed) > 0 {
		t.FailNow()
	}

	// A last round whose addresses no later sandbox takes: four at once,
	// each killed with a connection open (direct and through the egress
	// proxy), so what they leave cannot be cleaned up by a successor.
	var last []string
	for _, p := range []int{0, 1, 0, 1} {
		id, err := w.tryCreate(cyclePolicies[p].opts)
		if err != nil {
			t.Fatal(err)
		}
		last = append(last, id)
		if err := w.talk(id, cyclePolicies[p].proxy); err != nil {
			t.Fatalf("last round (%s): %v", cyclePolicies[p].name, err)
		}
	}
	for _, id := range last {
		w.kill(t, id)
	}

	if ids := w.list(t); len(ids) != 0 {
		t.Errorf("Sandbox.list after the cycles: %v", ids)
	}
	if rs := w.srv.RuntimeSandboxes(); len(rs) != 0 {
		t.Errorf("runtime sandboxes after the cycles: %v", rs)
	}
	// Links go off the kill path, and a namespace's teardown is the
	// kernel's work: give them a moment before calling what is left a leak.
	var st hostState
	waitFor(t, "nothing of the sandboxes left on the host", 10*time.Second, func() (bool, string) {
		st = w.inspect(t)
		clean := len(st.links) == 0 && len(st.chains) == 0 && len(st.sets) == 0 && st.dispatch == 0 && st.caps == 0 && st.proxied == 0
		return clean, fmt.Sprintf("links %v, chains %d, sets %d, dispatch %d, caps %d, proxied %d", st.links, len(st.chains), len(st.sets), st.dispatch, st.caps, st.proxied)
	})
	if !st.table {
		t.Error("the hutch table is gone while hutch serve runs")
	}
	if len(st.conntrack) > 0 {
		// Grouped by kind, an example of each: established flows stay for
		// days, and a new sandbox given the same address inherits them.
		kinds := map[string][]string{}
		var order []string
		for _, f := range st.conntrack {
			fl := strings.Fields(f)
			k := fl[0]
			if fl[0] == "tcp" {
				k += " " + fl[1]
			}
			if kinds[k] == nil {
				order = append(order, k)
			}
			kinds[k] = append(kinds[k], f)
		}
		sort.Strings(order)
		var lines []string
		for _, k := range order {
			lines = append(lines, fmt.Sprintf("%d× %s, e.g. %s", len(kinds[k]), k, kinds[k][0]))
		}
		t.Errorf("%d conntrack entries of the sandbox range (%s) outlive their sandboxes (network.Manager.Detach leaves them):\n\t%s",
			len(st.conntrack), sandboxRange, strings.Join(lines, "\n\t"))
	}
	if socks := w.rangeSockets(t); len(socks) > 0 {
		t.Errorf("%d sockets of hutch serve (the egress proxy) to or from the sandbox range outlive their sandboxes:\n\t%s",
			len(socks), strings.Join(socks[:min(len(socks), 8)], "\n\t"))
	}

	t.Run("reused-address", func(t *testing.T) { testReusedAddress(t, w) })
}

// testReusedAddress: a sandbox killed with a connection open, then a new
// sandbox given the same address. Nothing of the old connection may reach
// the new sandbox: the peer's packets must not be let in as "replies".
func testReusedAddress(t *testing.T, w *world) {
	a, err := w.tryCreate(nil)
	if err != nil {
		t.Fatal(err)
	}
	addrA, _ := w.sandboxAddr(t, a)
	sid := "reuse-" + randomName()
	w.startStream(t, a, webAddr, sid)
	w.waitTicking(t, a, sid)
	w.kill(t, a)
	// Either the connection died with the sandbox, or it lingers: the
	// server keeps sending into the void.
	ticks, _, _ := w.streams.state(sid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n, ended, _ := w.streams.state(sid)
		if ended || n >= ticks+10 {
			break
		}
	}
	if _, ended, why := w.streams.state(sid); ended {
		t.Logf("the connection ended with its sandbox (%v): nothing left to reach a successor", why)
		return
	}
	t.Logf("the connection of the killed sandbox %s (%s) lingers: the server goes on sending", a, addrA)
	b := w.create(t, nil)
	addrB, _ := w.sandboxAddr(t, b)
	if addrB != addrA {
		t.Logf("the new sandbox got %s, not %s: no reuse to test", addrB, addrA)
		return
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, ended, why := w.streams.state(sid); ended {
			t.Errorf("packets of the killed sandbox's connection were let into the new sandbox %s at the same address %s, "+
				"whose kernel reset it (%v): the killed sandbox's conntrack entry still passes them as replies", b, addrB, why)
			return
		}
	}
}

// talk makes a sandbox use the network: a lookup, a finished request and a
// stream left open (the sandbox is killed with it open).
func (w *world) talk(id string, proxied bool) error {
	sid := "cycle-" + randomName()
	var cmd string
	if proxied {
		cmd = fmt.Sprintf("getent hosts allowed.test && curl -sS -m 10 http://allowed.test/ && (curl -sSN http://allowed.test/stream?id=%s >/dev/null 2>&1 &) ", sid)
	} else {
		cmd = fmt.Sprintf(`getent hosts allowed.test && curl -sS -m 10 http://%s/ && (python3 -c '
import socket, time
s = socket.create_connection(("%s", %d), timeout=10)
s.sendall(b"id %s\n")
while s.recv(4096):
    pass
' >/dev/null 2>&1 &)`, webAddr, webAddr, streamPort, sid)
	}
	var r cmdResult
	if err := w.sdk.call("run", map[string]any{"sandboxId": id, "cmd": cmd, "timeoutMs": 60_000}, &r); err != nil {
		return err
	}
	if r.ExitCode != 0 || !strings.Contains(r.Stdout, "served-by") {
		return fmt.Errorf("exit %d: %s%s", r.ExitCode, r.Stdout, r.Stderr)
	}
	// Killed with the stream open: wait until it is.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ticks, _, _ := w.streams.state(sid); ticks >= 2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the stream %s never started", sid)
		}
	}
}

// rangeSockets lists the TCP sockets of the host namespace (where only
// hutch serve and the tests' own clients live) with an end in the sandbox
// range, but those in TIME_WAIT (no process holds them).
func (w *world) rangeSockets(t *testing.T) []string {
	t.Helper()
	pid := w.srv.Pid()
	if pid == 0 {
		t.Fatal("hutch serve is not running")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := netip.MustParsePrefix(sandboxRange)
	states := map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
		"06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 4 || fl[3] == "06" || fl[3] == "0A" {
			continue
		}
		local, remote := procAddr(fl[1]), procAddr(fl[2])
		if rng.Contains(local.Addr()) || rng.Contains(remote.Addr()) {
			out = append(out, fmt.Sprintf("%s %s -> %s", states[fl[3]], local, remote))
		}
	}
	sort.Strings(out)
	return out
}

// procAddr parses /proc/net/tcp's "0100007F:0BB8".
func procAddr(s string) netip.AddrPort {
	h, p, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(h)
	if !ok || err != nil || len(b) != 4 {
		return netip.AddrPort{}
	}
	port, _ := strconv.ParseUint(p, 16, 16)
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]}), uint16(port))
}

// TestServeKilledAndRestarted: kill -9 of hutch serve while sandboxes run
// and creates are in flight; meanwhile two sandboxes die. The firewall
// keeps confining the survivors while no server runs; after a restart
// the survivors keep their policies (addresses, names, no network), the
// dead ones' links, chains and sets are gone, and so is everything of
// the creates the kill cut short.
func TestServeKilledAndRestarted(t *testing.T) {
	w := newWorld(t)
	denyList := opts{"network": map[string]any{"denyOut": []string{"198.51.100.0/24"}}}
	domainList := opts{"network": map[string]any{"allowOut": []string{"allowed.test"}, "denyOut": []string{"0.0.0.0/0"}}}
	keepDeny := w.create(t, denyList)
	keepDomain := w.create(t, domainList)
	keepNone := w.create(t, opts{"allowInternetAccess": false})
	dies := w.create(t, nil)
	diesDomain := w.create(t, opts{"network": map[string]any{"allowOut": []string{"other.test"}}})

	// Creates in flight, four at a time, until the server dies.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var made []string
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				id, err := w.tryCreate(nil)
				if err != nil {
					return
				}
				mu.Lock()
				made = append(made, id)
				mu.Unlock()
			}
		})
	}
	waitFor(t, "creates under way", 60*time.Second, func() (bool, string) {
		n := len(w.srv.RuntimeSandboxes())
		return n >= 5+6, fmt.Sprintf("%d runtime sandboxes", n)
	})
	w.srv.Stop(syscall.SIGKILL)
	close(stop)
	wg.Wait()

	// No server: the kernel keeps confining the sandboxes.
	down := w.inspect(t)
	for _, id := range []string{keepDeny, keepDomain, dies, diesDomain} {
		if !slices.Contains(down.chains, "sbx-"+id) || !slices.Contains(down.chains, "cap-"+id) || down.linkOf(id) == "" {
			t.Errorf("with no server running, sandbox %s lost its link or chain (chains %v)", id, down.chains)
		}
	}
	// Two sandboxes die while no server runs.
	for _, st := range w.srv.RuntimeSandboxes() {
		if st.ID == dies || st.ID == diesDomain {
			if err := syscall.Kill(st.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.srv.Start()

	api := w.list(t)
	sort.Strings(api)
	for _, id := range []string{keepDeny, keepDomain, keepNone} {
		if !slices.Contains(api, id) {
			t.Errorf("sandbox %s is gone after the restart", id)
		}
	}
	for _, id := range []string{dies, diesDomain} {
		if slices.Contains(api, id) {
			t.Errorf("sandbox %s, dead, is listed after the restart", id)
		}
	}
	// A sandbox whose envd died during the kill leaves the store at once
	// and the runtime when its removal ends, which may be just after
	// serve answers: the two agree once it has.
	waitFor(t, "the API and the runtime to list the same sandboxes", 10*time.Second, func() (bool, string) {
		var runtimeIDs []string
		for _, st := range w.srv.RuntimeSandboxes() {
			runtimeIDs = append(runtimeIDs, st.ID)
		}
		sort.Strings(runtimeIDs)
		return slices.Equal(api, runtimeIDs), fmt.Sprintf("after the restart the API lists %v but the runtime has %v", api, runtimeIDs)
	})
	mu.Lock()
	t.Logf("%d creates finished before the kill; %d sandboxes after the restart", len(made), len(api))
	mu.Unlock()

	// Exactly the listed sandboxes with a network have links, chains and
	// sets; the dead and the half-made have none.
	var wantChains, wantSets []string
	wantLinks := map[string]bool{}
	for _, id := range api {
		if id == keepNone {
			continue
		}
		wantChains = append(wantChains, "cap-"+id, "sbx-"+id)
		wantSets = append(wantSets, "res-"+id)
		wantLinks[id] = true
	}
	sort.Strings(wantChains)
	sort.Strings(wantSets)
	waitFor(t, "the host holds exactly the running sandboxes' networks", 10*time.Second, func() (bool, string) {
		st := w.inspect(t)
		var aliases []string
		for _, a := range st.links {
			aliases = append(aliases, a)
		}
		sort.Strings(aliases)
		ok := len(aliases) == len(wantLinks) && slices.Equal(st.chains, wantChains) && slices.Equal(st.sets, wantSets) &&
			st.dispatch == len(wantLinks) && st.caps == len(wantLinks) && st.proxied == 1
		for _, a := range aliases {
			ok = ok && wantLinks[a]
		}
		return ok, fmt.Sprintf("links of %v, chains %v, sets %v, dispatch %d, caps %d, proxied %d; want links of %d sandboxes, chains %v, %d proxied",
			aliases, st.chains, st.sets, st.dispatch, st.caps, st.proxied, len(wantLinks), wantChains, 1)
	})

	// The survivors' policies are in force, as getInfo still reports.
	checkRules(t, w.info(t, keepDeny), nil, []string{"198.51.100.0/24"})
	checkRules(t, w.info(t, keepDomain), []string{"allowed.test"}, []string{"0.0.0.0/0"})
	w.probeAll(t, keepDeny, []probe{
		reach("public address", "served-by "+webAddr+":80", "http://"+webAddr+"/"),
		reach("by name", "host allowed.test", "http://allowed.test/"),
		deny("the denied range", "http://"+otherAddr+"/"),
		deny("cloud metadata", "http://"+metadataAddr+"/"),
	})
	w.probeAll(t, keepDomain, []probe{
		reach("allowed name, http", "host allowed.test", "http://allowed.test/"),
		reach("allowed name, https", "sni allowed.test", "-k https://allowed.test/"),
		noName("other name", "http://other.test/"),
		deny("other name on the allowed address", "--resolve other.test:80:"+webAddr+" http://other.test/"),
		deny("another address", "http://"+otherAddr+"/"),
	})
	if links := w.links(t, keepNone); !slices.Equal(links, []string{"lo"}) {
		t.Errorf("links of the sandbox without internet after the restart: %v", links)
	}

	// Killing them all leaves nothing.
	for _, id := range api {
		w.kill(t, id)
	}
	waitFor(t, "nothing of the sandboxes left on the host", 10*time.Second, func() (bool, string) {
		st := w.inspect(t)
		clean := len(st.links) == 0 && len(st.chains) == 0 && len(st.sets) == 0 && st.dispatch == 0 && st.caps == 0 && st.proxied == 0
		return clean, fmt.Sprintf("links %v, chains %v, sets %v, dispatch %d, caps %d, proxied %d", st.links, st.chains, st.sets, st.dispatch, st.caps, st.proxied)
	})
}
