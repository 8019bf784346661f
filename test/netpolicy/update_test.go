package netpolicy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// streamPy connects to HOST:PORT, introduces itself as ID and logs what it
// receives to LOG: "data N" per read (N ticks), then "eof" or "error ...".
const streamPy = `import socket, sys
host, port, sid, log = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
with open(log, "a", buffering=1) as f:
    try:
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(("id %s\n" % sid).encode())
        s.settimeout(None)
    except Exception as e:
        f.write("error %s\n" % e)
        sys.exit(1)
    while True:
        try:
            d = s.recv(4096)
        except Exception as e:
            f.write("error %s\n" % e)
            break
        if not d:
            f.write("eof\n")
            break
        f.write("data %d\n" % d.count(b"\n"))
`

// startStream starts a raw TCP stream from the sandbox to addr:streamPort;
// its log is /tmp/<sid>.log.
func (w *world) startStream(t *testing.T, id, addr, sid string) {
	t.Helper()
	w.run(t, id, "cat > /tmp/stream.py <<'EOF'\n"+streamPy+"EOF\n")
	w.spawn(t, id, "", fmt.Sprintf("python3 /tmp/stream.py %s %d %s /tmp/%s.log", addr, streamPort, sid, sid))
}

// startHTTPStream starts `curl -N http://NAME/stream?id=SID` in the
// sandbox (through the egress proxy when the sandbox has domain rules);
// its log is /tmp/<sid>.log, ending with "exit N" when curl ends.
func (w *world) startHTTPStream(t *testing.T, id, name, sid string) {
	t.Helper()
	w.spawn(t, id, "", fmt.Sprintf("sh -c 'curl -sSN http://%s/stream?id=%s >/tmp/%s.log 2>&1; echo exit $? >>/tmp/%s.log'", name, sid, sid, sid))
}

var dataRE = regexp.MustCompile(`(?m)^data (\d+)$`)

// received returns how many ticks the sandbox logged for a stream, and
// the log's last line.
func (w *world) received(t *testing.T, id, sid string) (int, string) {
	t.Helper()
	out := w.run(t, id, "cat /tmp/"+sid+".log").Stdout
	n := 0
	if m := dataRE.FindAllStringSubmatch(out, -1); m != nil {
		for _, x := range m {
			k, _ := strconv.Atoi(x[1])
			n += k
		}
	} else {
		n = strings.Count(out, "tick ")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return n, lines[len(lines)-1]
}

// waitTicking waits until the internet has sent a few ticks of each stream
// and the sandbox got them.
func (w *world) waitTicking(t *testing.T, id string, sids ...string) {
	t.Helper()
	for _, sid := range sids {
		ok := waitFor(t, "stream "+sid+" running", 30*time.Second, func() (bool, string) {
			ticks, ended, err := w.streams.state(sid)
			got, last := w.received(t, id, sid)
			return ticks >= 3 && !ended && got >= 3, fmt.Sprintf("server sent %d (ended %v %v), sandbox got %d, last %q", ticks, ended, err, got, last)
		})
		if !ok {
			t.FailNow()
		}
	}
}

// checkCut waits until the server side of stream cut has ended while keep
// goes on ticking, and checks the sandbox got nothing of cut since.
func (w *world) checkCut(t *testing.T, id, cut, keep string) {
	t.Helper()
	if !waitFor(t, "the denied connection cut", 30*time.Second, func() (bool, string) {
		ticks, ended, err := w.streams.state(cut)
		return ended, fmt.Sprintf("the server sent %d ticks and goes on (%v)", ticks, err)
	}) {
		return
	}
	_, _, why := w.streams.state(cut)
	t.Logf("the denied connection ended on the server's side: %v", why)
	got, _ := w.received(t, id, cut)
	keepTicks, _, _ := w.streams.state(keep)
	keepGot, _ := w.received(t, id, keep)
	// The connection still allowed keeps going, at the server and in the
	// sandbox.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ticks, ended, err := w.streams.state(keep)
		n, last := w.received(t, id, keep)
		if ended {
			t.Errorf("the connection the new rules still allow was cut too: the server's side ended (%v) after %d ticks, the sandbox's log ends %q", err, ticks, last)
			break
		}
		if ticks >= keepTicks+5 && n >= keepGot+5 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the connection the new rules still allow stalled: the server sent %d ticks, the sandbox got %d (%d before), its log ends %q", ticks, n, keepGot, last)
			break
		}
	}
	if again, last := w.received(t, id, cut); again != got {
		t.Errorf("the sandbox received %d more ticks of the cut connection (last %q)", again-got, last)
	}
}

// testUpdateCuts: updateNetwork denying a range cuts the open connection
// to it, keeps the one to another range, refuses new connections, and
// getInfo reports the new rules.
func testUpdateCuts(t *testing.T, w *world) {
	id := w.create(t, nil)
	cut, keep := "cut-"+randomName(), "keep-"+randomName()
	w.startStream(t, id, webAddr, cut)
	w.startStream(t, id, otherAddr, keep)
	w.waitTicking(t, id, cut, keep)

	w.update(t, id, map[string]any{"denyOut": []string{"203.0.113.0/24"}})
	checkRules(t, w.info(t, id), nil, []string{"203.0.113.0/24"})
	w.checkCut(t, id, cut, keep)
	w.probeAll(t, id, []probe{
		deny("the newly denied range", "http://"+webAddr+"/"),
		deny("the newly denied range, another port", fmt.Sprintf("http://%s:%d/", webAddr, altPort)),
		reach("a range still allowed", "served-by "+otherAddr+":80", "http://"+otherAddr+"/"),
	})
	// By name, after the address checks: the lookup itself must not open
	// the denied range.
	w.probeAll(t, id, []probe{
		{name: "the newly denied range by name", cmd: "curl -sS -m 3 http://allowed.test/", want: refused, why: opensWhy},
	})
}

// testUpdateCutsProxied: for a sandbox with domain rules, an update that no
// longer allows a name closes the proxied connection made for it (the
// client sees its end) and keeps the one made for a name still allowed.
func testUpdateCutsProxied(t *testing.T, w *world) {
	id := w.create(t, opts{"network": map[string]any{"allowOut": []string{"allowed.test", "other.test"}, "denyOut": []string{"0.0.0.0/0"}}})
	cut, keep := "pcut-"+randomName(), "pkeep-"+randomName()
	w.startHTTPStream(t, id, "allowed.test", cut)
	w.startHTTPStream(t, id, "other.test", keep)
	w.waitTicking(t, id, cut, keep)
	addr, _ := w.sandboxAddr(t, id)
	if n := w.proxiedFlows(t, addr); n != 2 {
		t.Errorf("%d established flows of the sandbox redirected to the egress proxy before the update, want 2", n)
	}

	w.update(t, id, map[string]any{"allowOut": []string{"other.test"}, "denyOut": []string{"0.0.0.0/0"}})
	checkRules(t, w.info(t, id), []string{"other.test"}, []string{"0.0.0.0/0"})
	// The proxy re-judges each of its connections by its name and closes
	// the one no longer allowed; the firewall leaves proxied connections to
	// the proxy, so the flow of the one still allowed stays.
	waitFor(t, "the proxy closing the connection no longer allowed", 30*time.Second, func() (bool, string) {
		_, ended, _ := w.streams.state(cut)
		return ended, "the server goes on sending"
	})
	if _, last := w.received(t, id, keep); strings.HasPrefix(last, "exit ") {
		t.Errorf("the egress proxy closed the other.test connection, which the new rules still allow (its client ended: %q): "+
			"Proxy.Recheck judges it without the resolved-address credit an allowed name now needs, "+
			"since Manager.Update has just cleared the sandbox's resolved addresses", last)
	} else if n := w.proxiedFlows(t, addr); n != 1 {
		t.Errorf("%d established flows of the sandbox redirected to the egress proxy after the update, want 1 (the other.test connection): "+
			"the update deleted the conntrack entry of a proxied connection its new rules still allow "+
			"(network.Manager.cut judges a redirected flow by its original destination address, which the deny-all list denies)", n)
	}
	w.checkCut(t, id, cut, keep)
	waitFor(t, "the client of the cut connection sees its end", 30*time.Second, func() (bool, string) {
		_, last := w.received(t, id, cut)
		return strings.HasPrefix(last, "exit "), last
	})
	w.probeAll(t, id, []probe{
		noName("the name no longer allowed", "http://allowed.test/"),
		deny("the name no longer allowed, at its address", "--resolve allowed.test:80:"+webAddr+" http://allowed.test/"),
		deny("the name no longer allowed, at its address, https", "--resolve allowed.test:443:"+webAddr+" -k https://allowed.test/"),
		reach("the name still allowed", "host other.test", "http://other.test/"),
	})
}

// testUpdateOpens: a sandbox created without internet gets a network when
// an update allows it.
func testUpdateOpens(t *testing.T, w *world) {
	id := w.create(t, opts{"allowInternetAccess": false})
	if links := w.links(t, id); !slices.Equal(links, []string{"lo"}) {
		t.Fatalf("links before the update: %v, want only lo", links)
	}
	w.update(t, id, map[string]any{"allowInternetAccess": true})
	if links := w.links(t, id); !slices.Contains(links, "eth0") {
		t.Errorf("links after the update: %v, want eth0", links)
	}
	if i := w.info(t, id); i.AllowInternetAccess == nil || !*i.AllowInternetAccess {
		t.Errorf("getInfo().allowInternetAccess = %v after the update, want true", i.AllowInternetAccess)
	}
	w.probeAll(t, id, []probe{
		reach("public address", "served-by "+webAddr+":80", "http://"+webAddr+"/"),
		reach("by name", "host allowed.test", "http://allowed.test/"),
		deny("cloud metadata", "http://"+metadataAddr+"/"),
		deny("host service", fmt.Sprintf("http://%s:%d/", hostAddr, hostSvcPort)),
	})
}

// testUpdateCloses: allowInternetAccess false cuts what is open and
// refuses everything after.
func testUpdateCloses(t *testing.T, w *world) {
	id := w.create(t, nil)
	cut := "close-" + randomName()
	w.startStream(t, id, webAddr, cut)
	w.waitTicking(t, id, cut)
	w.update(t, id, map[string]any{"allowInternetAccess": false})
	if i := w.info(t, id); i.AllowInternetAccess == nil || *i.AllowInternetAccess {
		t.Errorf("getInfo().allowInternetAccess = %v after the update, want false", i.AllowInternetAccess)
	}
	waitFor(t, "the open connection cut", 30*time.Second, func() (bool, string) {
		ticks, ended, err := w.streams.state(cut)
		return ended, fmt.Sprintf("the server sent %d ticks and goes on (%v)", ticks, err)
	})
	w.probeAll(t, id, []probe{
		deny("public address", "http://"+webAddr+"/"),
		deny("another range", "http://"+otherAddr+"/"),
		{name: "lookup", cmd: "timeout 10 getent hosts allowed.test", want: refused},
	})
}

// testUpdateReplaces: the SDK documents updateNetwork as replacing the
// whole egress configuration, "fields that are omitted are cleared on the
// server" (e2b 2.51.0, SandboxApi.updateNetwork; the API's
// SandboxNetworkUpdateConfig: "Omitting a field clears it"). A sandbox
// created with an allow list, updated with a deny list only, no longer has
// the allow list.
func testUpdateReplaces(t *testing.T, w *world) {
	id := w.create(t, opts{"network": map[string]any{"allowOut": []string{otherAddr}, "denyOut": []string{"0.0.0.0/0"}}})
	w.probeAll(t, id, []probe{
		reach("allowed address before the update", "served-by "+otherAddr+":80", "http://"+otherAddr+"/"),
		deny("denied address before the update", "http://"+webAddr+"/"),
	})
	w.update(t, id, map[string]any{"denyOut": []string{"198.51.100.0/24"}})
	checkRules(t, w.info(t, id), nil, []string{"198.51.100.0/24"})
	w.probeAll(t, id, []probe{
		{
			name: "the range the update denies", cmd: "curl -sS -m 3 http://" + otherAddr + "/", want: refused,
			why: "the update's body has no allowOut: the old allowOut [198.51.100.7] must be cleared, not kept (and win over the new denyOut)",
		},
		reach("an address the update no longer denies", "served-by "+webAddr+":80", "http://"+webAddr+"/"),
	})
}

// proxiedFlows counts the established conntrack flows from the sandbox at
// addr that were redirected to the egress proxy.
func (w *world) proxiedFlows(t *testing.T, addr string) int {
	n := 0
	for _, f := range w.flows(t) {
		p, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP)
		if ok && p.State == tcpEstablished && f.Forward.SrcIP.String() == addr && f.Reverse.SrcPort == 15380 {
			n++
		}
	}
	return n
}

// testUpdateAudited: the policy a sandbox was created with and each change
// of it are in the audit trail (GET /events, kind network), with the key
// and sandbox behind them.
func testUpdateAudited(t *testing.T, w *world) {
	id := w.create(t, opts{"network": map[string]any{"allowOut": []string{"allowed.test"}, "denyOut": []string{"0.0.0.0/0"}}})
	w.update(t, id, map[string]any{"allowInternetAccess": false})
	req, err := http.NewRequest(http.MethodGet, w.srv.URL()+"/events?kind=network&sandboxID="+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", hutchtest.TestKey)
	resp, err := w.hostClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []struct {
		KeyID, SandboxID, Kind, Action, Outcome string
		Detail                                  map[string]any
	}
	if err := json.NewDecoder(resp.Body).Decode(&events); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /events: %s, %v", resp.Status, err)
	}
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action+"/"+e.Outcome)
		if e.SandboxID != id || e.KeyID == "" || e.Kind != "network" {
			t.Errorf("event %+v: want kind network, sandbox %s and the test key's id", e, id)
		}
	}
	if !slices.Equal(actions, []string{"network.set/ok", "network.update/ok"}) {
		t.Fatalf("network events of %s: %v, want the policy set at create, then the update", id, actions)
	}
	if got := fmt.Sprint(events[0].Detail["allowOut"], events[0].Detail["denyOut"]); got != "[allowed.test] [0.0.0.0/0]" {
		t.Errorf("network.set detail %v: want the create's allowOut and denyOut", events[0].Detail)
	}
	if v, ok := events[1].Detail["allowInternetAccess"].(bool); !ok || v {
		t.Errorf("network.update detail %v: want allowInternetAccess false", events[1].Detail)
	}
}
