package escape

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// serveMarker starts a web server on 0.0.0.0:port in sbx answering mark,
// and waits until it answers inside.
func serveMarker(t *testing.T, sbx *sdk.Sandbox, port int, mark string) {
	t.Helper()
	if _, err := sbx.Files.Write(t.Context(), "/tmp/www/index.html", []byte(mark), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.Commands.Start(t.Context(), fmt.Sprintf("python3 -m http.server %d --bind 0.0.0.0 --directory /tmp/www", port), &sdk.RunOptions{Timeout: sdk.NoTimeout}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if out := run(t, sbx, "user", fmt.Sprintf("curl -s -m 2 http://127.0.0.1:%d/", port)); out == mark {
			return
		}
		if i > 100 {
			t.Fatal("the sandbox's web server never answered")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// addressOf is sbx's IPv4 address on its link.
func addressOf(t *testing.T, sbx *sdk.Sandbox) string {
	t.Helper()
	out := py(t, sbx, "user", `
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(("192.0.2.1", 9))
print("addr:", s.getsockname()[0])
`)
	a := results(out)["addr"]
	if net.ParseIP(a) == nil {
		t.Fatalf("no address: %s", out)
	}
	return a
}

// rawRequest sends req as is to the server and returns the status line
// and everything the server answered (bounded).
func (s *suite) rawRequest(t *testing.T, req string) (status, all string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	c, err := s.ns.DialContext(ctx, "tcp", s.srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	b, _ := io.ReadAll(io.LimitReader(c, 1<<20))
	all = string(b)
	status, _, _ = strings.Cut(all, "\r\n")
	return status, all
}

// get sends an HTTP request to the server with the headers given.
func (s *suite) get(t *testing.T, host string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.srv.URL()+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := s.srv.Client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// networkAttempts go for the network: the host's services, the
// neighbours, the sandbox's own link, and the server's port tunnel.
var networkAttempts = []attempt{
	{"host-services", "network", func(t *testing.T, s *suite, b string) {
		// A service of the host, on every address of the namespace the
		// server runs in (the sandbox link's far end among them), and
		// the server's own API.
		mark := unique("host-service")
		var ln net.Listener
		if err := s.ns.Do(func() error {
			var err error
			ln, err = net.Listen("tcp", ":0")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, mark) }))
		port := ln.Addr().(*net.TCPAddr).Port
		_, apiPort, _ := net.SplitHostPort(s.srv.Addr)
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := py(t, sbx, "root", fmt.Sprintf(`
import urllib.request
gw = None
for l in open("/proc/net/route").read().splitlines()[1:]:
    f = l.split()
    if f[1] == "00000000":
        gw = socket.inet_ntoa(int(f[2], 16).to_bytes(4, "little"))
print("gateway:", gw)
for host in filter(None, [gw, "127.0.0.1", "10.200.0.1", "169.254.169.254", "172.17.0.1"]):
    for port in (%d, %s):
        try:
            print(f"{host}:{port}:", urllib.request.urlopen(f"http://{host}:{port}/health", timeout=3).read()[:200])
        except Exception as e:
            print(f"{host}:{port}: refused ({type(e).__name__})")
`, port, apiPort))
		absent(t, out, mark, `"status"`, "ok")
		if g := results(out)["gateway"]; g == "" {
			t.Logf("no default route:\n%s", out)
		}
	}},
	{"neighbour-network", "network", func(t *testing.T, s *suite, b string) {
		n := s.sandbox(t, b, sdk.CreateOptions{})
		mark := unique("neighbour-page")
		serveMarker(t, n, 8000, mark)
		addr := addressOf(t, n)
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		out := run(t, sbx, "root", fmt.Sprintf("curl -s -m 3 http://%s:8000/; echo rc=$?", addr))
		absent(t, out, mark)
	}},
	scriptAttempt("link-changes", "network", `
import fcntl, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
def ifreq(name, fmt, *v):
    return struct.pack("16s" + fmt, name.encode(), *v) + b"\0" * 16
attempt("set-mtu", lambda: fcntl.ioctl(s, 0x8922, ifreq("lo", "i", 1280)))        # SIOCSIFMTU
attempt("set-lo-down", lambda: fcntl.ioctl(s, 0x8914, ifreq("lo", "H", 0)))       # SIOCSIFFLAGS
addr = struct.pack("HH4s8s", socket.AF_INET, 0, socket.inet_aton("10.200.255.254"), b"")
attempt("set-address", lambda: fcntl.ioctl(s, 0x8916, struct.pack("16s", b"lo") + addr))  # SIOCSIFADDR
attempt("set-hwaddr", lambda: fcntl.ioctl(s, 0x8924, struct.pack("16sH6s", b"lo", 1, b"\x02\0\0\0\0\1") + b"\0" * 8))
`, "set-mtu", "set-lo-down", "set-address", "set-hwaddr"),
	{"tunnel-connect", "the port tunnel", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		mark := unique("tunnel-page")
		serveMarker(t, sbx, 8000, mark)
		addr := addressOf(t, sbx)
		for _, target := range []string{addr + ":8000", "127.0.0.1:8000", "10.200.0.1:80", "169.254.169.254:80", s.srv.Addr} {
			for _, hdr := range []string{"E2b-Sandbox-Id: " + sbx.ID + "\r\nE2b-Sandbox-Port: 8000\r\n", "", "Host: 8000-" + sbx.ID + "." + hutchtest.TestDomain + "\r\n"} {
				req := "CONNECT " + target + " HTTP/1.1\r\n" + hdr
				if !strings.Contains(hdr, "Host:") {
					req += "Host: " + target + "\r\n"
				}
				req += "\r\nGET / HTTP/1.0\r\n\r\n"
				status, all := s.rawRequest(t, req)
				if strings.Contains(status, " 200") || strings.Contains(all, mark) {
					t.Errorf("CONNECT %s with %q: %s", target, hdr, status)
				}
			}
		}
	}},
	{"tunnel-absolute-uri", "the port tunnel", func(t *testing.T, s *suite, b string) {
		// A proxy's request form, naming the sandbox's address (or the
		// server's loopback) instead of a sandbox: the server is no proxy.
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		mark := unique("abs-page")
		serveMarker(t, sbx, 8000, mark)
		addr := addressOf(t, sbx)
		for _, u := range []string{"http://" + addr + ":8000/", "http://127.0.0.1:8000/", "http://8000-" + sbx.ID + "." + hutchtest.TestDomain + "@" + addr + ":8000/"} {
			status, all := s.rawRequest(t, "GET "+u+" HTTP/1.1\r\nHost: "+strings.TrimPrefix(strings.TrimSuffix(u, "/"), "http://")+"\r\nConnection: close\r\n\r\n")
			if strings.Contains(all, mark) {
				t.Errorf("GET %s reached the sandbox's service: %s", u, status)
			}
		}
	}},
	{"tunnel-host-tricks", "the port tunnel", func(t *testing.T, s *suite, b string) {
		// Host names that contain a sandbox's name but are not the
		// server's to route: none reaches the private service.
		sbx := s.sandbox(t, b, sdk.CreateOptions{Network: &sdk.Network{AllowPublicTraffic: new(false)}})
		mark := unique("private-page")
		serveMarker(t, sbx, 8000, mark)
		h := "8000-" + sbx.ID + "." + hutchtest.TestDomain
		for _, host := range []string{h, h + ".evil.test", "evil.test." + h, h + ":80", strings.ToUpper(h), h + ".", "8000-" + sbx.ID + "." + hutchtest.TestDomain + "%00.evil", "0x1f40-" + sbx.ID + "." + hutchtest.TestDomain, "08000-" + sbx.ID + "." + hutchtest.TestDomain} {
			code, body := s.get(t, host, nil)
			if strings.Contains(body, mark) {
				t.Errorf("Host %q reached the private service without its token (%d)", host, code)
			}
		}
		// Headers naming it, with the Host of another sandbox.
		other := s.sandbox(t, b, sdk.CreateOptions{})
		code, body := s.get(t, "8000-"+other.ID+"."+hutchtest.TestDomain, map[string]string{"E2b-Sandbox-Id": sbx.ID, "E2b-Sandbox-Port": "8000", "E2b-Traffic-Access-Token": other.TrafficAccessToken})
		if strings.Contains(body, mark) {
			t.Errorf("another sandbox's Host and token reached the private service (%d)", code)
		}
	}},
	{"tunnel-traffic-token", "the port tunnel", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{Network: &sdk.Network{AllowPublicTraffic: new(false)}})
		other := s.sandbox(t, b, sdk.CreateOptions{Network: &sdk.Network{AllowPublicTraffic: new(false)}})
		mark := unique("private-page")
		serveMarker(t, sbx, 8000, mark)
		h := "8000-" + sbx.ID + "." + hutchtest.TestDomain
		for _, tc := range []struct {
			name, token string
			reach       bool
		}{
			{"no token", "", false}, {"a wrong token", "nope", false}, {"another sandbox's", other.TrafficAccessToken, false},
			{"the envd token", sbx.EnvdAccessToken, false}, {"the token with a suffix", sbx.TrafficAccessToken + "x", false},
			{"the right token", sbx.TrafficAccessToken, true},
		} {
			hdr := map[string]string{}
			if tc.token != "" {
				hdr["E2b-Traffic-Access-Token"] = tc.token
			}
			code, body := s.get(t, h, hdr)
			if got := strings.Contains(body, mark); got != tc.reach {
				t.Errorf("%s: reached %v (%d), want %v", tc.name, got, code, tc.reach)
			}
		}
	}},
	{"tunnel-envd-without-token", "the port tunnel", func(t *testing.T, s *suite, b string) {
		sbx := s.sandbox(t, b, sdk.CreateOptions{})
		if _, err := sbx.Files.Write(t.Context(), "/tmp/private", []byte(s.secret+"-inside"), nil); err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/files?path=/tmp/private", "/envs", "/files?path=/tmp/private&username=root"} {
			status, all := s.rawRequest(t, "GET "+path+" HTTP/1.1\r\nHost: 49983-"+sbx.ID+"."+hutchtest.TestDomain+"\r\nConnection: close\r\n\r\n")
			if !strings.Contains(status, " 401") || strings.Contains(all, "-inside") {
				t.Errorf("GET %s of envd without its token: %s", path, status)
			}
		}
		// A Connect call without the token, with a forged one.
		for _, tok := range []string{"", "X-Access-Token: forged\r\n"} {
			body := `{"process":{"cmd":"/bin/sh","args":["-c","id"]}}`
			env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
			status, _ := s.rawRequest(t, "POST /process.Process/Start HTTP/1.1\r\nHost: 49983-"+sbx.ID+"."+hutchtest.TestDomain+"\r\n"+tok+
				"Content-Type: application/connect+json\r\nConnection: close\r\nContent-Length: "+fmt.Sprint(len(body)+5)+"\r\n\r\n"+string(env)+body)
			if !strings.Contains(status, " 401") {
				t.Errorf("Process.Start %q: %s, want 401", tok, status)
			}
		}
	}},
}
