package sdk_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestPorts: reaching a server inside a sandbox through `hutch serve`
// with Sandbox.PortRequest, and the edge proxy's 502s.
func TestPorts(t *testing.T) {
	e := startServer(t)
	ctx := t.Context()
	pub := e.sandbox(t, sdk.CreateOptions{})
	priv := e.sandbox(t, sdk.CreateOptions{Network: &sdk.Network{AllowPublicTraffic: new(false)}})

	// do sends a request to port of sbx and returns the status and body.
	do := func(t *testing.T, sbx *sdk.Sandbox, port int, path string, edit func(*http.Request)) (int, string) {
		t.Helper()
		req, err := sbx.PortRequest(ctx, http.MethodGet, port, path, nil)
		must(t, err, "PortRequest")
		if edit != nil {
			edit(req)
		}
		resp, err := sbx.HTTPClient().Do(req)
		must(t, err, "request to port")
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		must(t, err, "reading the response")
		return resp.StatusCode, string(b)
	}
	const page = "hello from inside the sandbox\n"
	serve := func(t *testing.T, sbx *sdk.Sandbox) {
		t.Helper()
		_, err := sbx.Files.Write(ctx, "/tmp/www/hello.txt", []byte(page), nil)
		must(t, err, "Write")
		_, err = sbx.Commands.Start(ctx, "python3 -m http.server 8000 --directory /tmp/www", &sdk.RunOptions{Timeout: sdk.NoTimeout})
		must(t, err, "Start the HTTP server")
		var code int
		var body string
		waitFor(t, 20*time.Second, func() string { return fmt.Sprintf("the HTTP server on port 8000 (last answer %d %q)", code, body) }, func() bool {
			code, body = do(t, sbx, 8000, "/hello.txt", nil)
			return code == http.StatusOK
		})
		if body != page {
			t.Errorf("GET /hello.txt on port 8000: %q", body)
		}
	}

	t.Run("an HTTP server in the sandbox", func(t *testing.T) {
		serve(t, pub)
		if code, body := do(t, pub, 8000, "/", nil); code != http.StatusOK {
			t.Errorf("GET / on port 8000: %d %q", code, body)
		}
		if code, _ := do(t, pub, 8000, "/missing.txt", nil); code != http.StatusNotFound {
			t.Errorf("GET /missing.txt: %d, want the server's 404", code)
		}
		// Host(port) names the same port for host-based routing.
		if want := fmt.Sprintf("8000-%s.%s", pub.ID, hutchtest.TestDomain); pub.Host(8000) != want {
			t.Errorf("Host(8000) = %q, want %q", pub.Host(8000), want)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL()+"/hello.txt", nil)
		must(t, err, "NewRequest")
		req.Host = pub.Host(8000)
		resp, err := http.DefaultClient.Do(req)
		must(t, err, "GET by Host")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != page {
			t.Errorf("GET by Host %s: %d %q", req.Host, resp.StatusCode, b)
		}
	})

	t.Run("a closed port answers 502", func(t *testing.T) {
		code, body := do(t, pub, 9999, "/", nil)
		if code != http.StatusBadGateway {
			t.Fatalf("closed port: %d %q, want 502", code, body)
		}
		var msg struct {
			SandboxID string `json:"sandboxId"`
			Port      int    `json:"port"`
			Message   string `json:"message"`
		}
		if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.SandboxID != pub.ID || msg.Port != 9999 {
			t.Errorf("closed port: body %q", body)
		}
	})

	t.Run("a private sandbox's ports need its traffic token", func(t *testing.T) {
		if priv.TrafficAccessToken == "" {
			t.Fatal("a sandbox without public traffic has no TrafficAccessToken")
		}
		if pub.TrafficAccessToken != "" {
			t.Errorf("a public sandbox has a TrafficAccessToken %q", pub.TrafficAccessToken)
		}
		// PortRequest sends the token.
		serve(t, priv)
		for name, edit := range map[string]func(*http.Request){
			"without the token": func(r *http.Request) { r.Header.Del("E2b-Traffic-Access-Token") },
			"a wrong token":     func(r *http.Request) { r.Header.Set("E2b-Traffic-Access-Token", "nope") },
		} {
			if code, body := do(t, priv, 8000, "/hello.txt", edit); code != http.StatusForbidden {
				t.Errorf("%s: %d %q, want 403", name, code, body)
			}
		}
		info, err := priv.GetInfo(ctx)
		must(t, err, "GetInfo")
		if info.Network == nil || info.Network.AllowPublicTraffic == nil || *info.Network.AllowPublicTraffic {
			t.Errorf("GetInfo network %+v, want allowPublicTraffic false", info.Network)
		}
	})

	t.Run("a killed sandbox's ports answer 502", func(t *testing.T) {
		must(t, priv.Kill(ctx), "Kill")
		if code, body := do(t, priv, 8000, "/hello.txt", nil); code != http.StatusBadGateway {
			t.Errorf("port of a killed sandbox: %d %q, want 502", code, body)
		}
	})
}
