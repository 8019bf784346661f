package envd_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envd"
)

// TestHandlerTokenBeforeEverything: with an access token set, every
// request on every listener needs it before anything else happens, CONNECT
// included; only the control socket serves /init and CONNECT at all, and
// /init cannot replace the token without knowing it.
func TestHandlerTokenBeforeEverything(t *testing.T) {
	srv := envd.New(envd.Options{DefaultUser: "user"})
	srv.State().SetToken("the-token")
	api, control := srv.Handler(false), srv.Handler(true)
	tests := []struct {
		name    string
		h       http.Handler
		method  string
		target  string
		token   string
		want    int
		wantMsg string
	}{
		{"api CONNECT without token", api, "CONNECT", "127.0.0.1:8000", "", 401, "unauthorized"},
		{"api CONNECT with a wrong token", api, "CONNECT", "127.0.0.1:8000", "nope", 401, "unauthorized"},
		{"api CONNECT with the token", api, "CONNECT", "127.0.0.1:8000", "the-token", 405, "CONNECT is not served here"},
		{"api /init without token", api, "POST", "/init", "", 401, "unauthorized"},
		{"api /init with the token", api, "POST", "/init", "the-token", 404, ""},
		{"api //init without token", api, "POST", "//init", "", 401, "unauthorized"},
		{"api process.List without token", api, "POST", "/process.Process/List", "", 401, "unauthorized"},
		{"api /health open", api, "GET", "/health", "", 204, ""},
		{"api /auth with the token", api, "GET", "/auth", "the-token", 204, ""},
		{"api /auth without token", api, "GET", "/auth", "", 401, "unauthorized"},
		{"api /auth with a wrong token", api, "GET", "/auth", "the-tokeN", 401, "unauthorized"},
		{"api /envs without token", api, "GET", "/envs", "", 401, "unauthorized"},
		{"control CONNECT without token", control, "CONNECT", "127.0.0.1:8000", "", 401, "unauthorized"},
		{"control CONNECT to a closed port with the token", control, "CONNECT", "127.0.0.1:1", "the-token", 502, "not open"},
		{"control CONNECT off the loopback with the token", control, "CONNECT", "10.0.0.1:80", "the-token", 403, "loopback only"},
		{"control /init without token", control, "POST", "/init", "", 401, "unauthorized"},
		{"control /init with a wrong token", control, "POST", "/init", "nope", 401, "unauthorized"},
		{"control /health open", control, "GET", "/health", "", 204, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, "http://envd"+tt.target, strings.NewReader(`{"accessToken":"pwned"}`))
			if tt.method == "CONNECT" {
				req = httptest.NewRequest("CONNECT", tt.target, nil)
				req.Host = tt.target
				req.URL.Path = ""
			}
			if tt.token != "" {
				req.Header.Set("X-Access-Token", tt.token)
			}
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, req)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.wantMsg) {
				t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.target, rec.Code, rec.Body.String(), tt.want, tt.wantMsg)
			}
			// envd's own refusals are its one REST error body.
			if tt.want >= 400 && tt.wantMsg != "" {
				var body struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Code != tt.want || rec.Header().Get("Content-Type") != "application/json" {
					t.Errorf("%s %s: error body %q (%s), want {\"code\":%d,…} as application/json", tt.method, tt.target, rec.Body.String(), rec.Header().Get("Content-Type"), tt.want)
				}
			}
			if got := srv.State().Token(); got != "the-token" {
				t.Fatalf("the access token became %q", got)
			}
		})
	}
	// The token's holder, on the control socket, may set the defaults.
	req := httptest.NewRequest("POST", "http://envd/init", strings.NewReader(`{"envVars":{"A":"1"}}`))
	req.Header.Set("X-Access-Token", "the-token")
	rec := httptest.NewRecorder()
	control.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Errorf("/init with the token on the control socket: %d %s", rec.Code, rec.Body)
	}
}

// TestTunnelEndsWhenTheServiceHangs: a service that neither reads nor
// closes holds a tunnel only for the linger time after the host side has
// gone, not for ever (review 3: such a service kept every tunnel, and envd
// ran out of descriptors).
func TestTunnelEndsWhenTheServiceHangs(t *testing.T) {
	svc := hangingService(t)
	s := envd.New(envd.Options{TunnelLinger: 100 * time.Millisecond})
	var active atomic.Int32
	h := s.Handler(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	for range 20 {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		target := svc.Addr().String()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		c.Write([]byte("request the service never reads"))
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for active.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels still open 10 s after their clients left", active.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTunnelsBounded: tunnels past MaxTunnels are answered 503, so the
// clients of a public port cannot use up envd's descriptors (review 4: a
// client with no key held 3300 tunnels to a service that never answered,
// and envd could no longer start a command); one that ends frees its slot.
func TestTunnelsBounded(t *testing.T) {
	svc := hangingService(t)
	srv := httptest.NewServer(envd.New(envd.Options{MaxTunnels: 3}).Handler(true))
	defer srv.Close()
	connect := func() (net.Conn, int) {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		target := svc.Addr().String()
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		return c, resp.StatusCode
	}
	var held []net.Conn
	for i := range 3 {
		c, code := connect()
		if code != http.StatusOK {
			t.Fatalf("tunnel %d: %d", i, code)
		}
		held = append(held, c)
	}
	c, code := connect()
	c.Close()
	if code != http.StatusServiceUnavailable {
		t.Errorf("a tunnel past the cap: %d, want 503", code)
	}
	// A tunnel closed both ways gives its slot back.
	held[0].(*net.TCPConn).SetLinger(0)
	held[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, code := connect()
		c.Close()
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no slot after a tunnel ended: %d", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range held[1:] {
		c.Close()
	}
}

// hangingService listens on loopback and holds every connection it
// accepts without reading or closing it, until the test ends.
func hangingService(t *testing.T) net.Listener {
	t.Helper()
	svc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return svc
}

// TestAuthWithoutToken: a sandbox without an access token answers GET
// /auth with 204 whatever is sent, so servers in it that ask envd (the
// code interpreter) let every request through, as envd itself does.
func TestAuthWithoutToken(t *testing.T) {
	api := envd.New(envd.Options{DefaultUser: "user"}).Handler(false)
	for _, token := range []string{"", "anything"} {
		req := httptest.NewRequest("GET", "http://envd/auth", nil)
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, req)
		if rec.Code != 204 {
			t.Errorf("GET /auth with token %q: %d %q, want 204", token, rec.Code, rec.Body.String())
		}
	}
}
