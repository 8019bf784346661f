package mcp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestStdioHygiene: `hutch mcp --transport stdio` writes nothing but
// newline-delimited JSON-RPC on standard output, answers each request
// once, reports a key the server refuses as a tool error (not a crash),
// and exits 0 when its standard input closes (spec: stdio transport).
func TestStdioHygiene(t *testing.T) {
	f := newFixture(t)
	cmd := exec.Command(f.bin, "mcp", "--transport", "stdio", "--api-url", f.srv.URL(), "--api-key", "e2b_"+strings.Repeat("0", 40))
	cmd.Env = f.env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()

	requests := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hygiene","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sandbox_list","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"ping"}`,
	}
	// One request at a time, each answered before the next, then EOF.
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 16<<20)
	answers := map[float64]map[string]any{}
	for _, req := range requests {
		if _, err := io.WriteString(stdin, req+"\n"); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(req, `"id"`) {
			continue
		}
		if !lines.Scan() {
			t.Fatalf("no answer to %s; stderr:\n%s", req, stderr.String())
		}
		var msg map[string]any
		if err := json.Unmarshal(lines.Bytes(), &msg); err != nil || msg["jsonrpc"] != "2.0" {
			t.Fatalf("stdout line is not JSON-RPC 2.0 (%v): %q", err, lines.Text())
		}
		id, _ := msg["id"].(float64)
		if _, dup := answers[id]; dup || id == 0 {
			t.Fatalf("unexpected message for %s: %s", req, lines.Text())
		}
		answers[id] = msg
	}
	stdin.Close()
	exited := make(chan error, 1)
	go func() {
		rest, _ := io.ReadAll(stdout)
		if s := strings.TrimSpace(string(rest)); s != "" {
			t.Errorf("stdout after the last answer: %q", s)
		}
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("hutch mcp exited with %v after stdin closed; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("hutch mcp still runs 5s after its stdin closed")
	}

	if v := answers[1]["result"].(map[string]any)["protocolVersion"]; v != "2025-11-25" {
		t.Errorf("initialize: protocolVersion %v", v)
	}
	call, _ := answers[3]["result"].(map[string]any)
	if call == nil || call["isError"] != true {
		t.Fatalf("sandbox_list with a refused key: want an isError result, got %v", answers[3])
	}
	text, _ := json.Marshal(call["content"])
	if !strings.Contains(strings.ToLower(string(text)), "key") {
		t.Errorf("sandbox_list with a refused key: the error does not mention the key: %s", text)
	}
	t.Logf("sandbox_list with a refused key: %s", text)
	if s := stderr.String(); s != "" {
		t.Logf("stderr:\n%s", s)
	}
}

// TestInsecureNoAuthLoopbackOnly: --insecure-no-auth is refused on an
// address other machines could reach, before anything listens.
func TestInsecureNoAuthLoopbackOnly(t *testing.T) {
	b := bin.Path(t)
	// 192.0.2.1 (TEST-NET-1) is no interface's: even a server that
	// wrongly accepted the flag could not listen there.
	for _, addr := range []string{"192.0.2.1:3001", ":3001"} {
		cmd := exec.Command(b, "mcp", "--transport", "http", "--listen", addr, "--insecure-no-auth", "--api-key", "e2b_"+strings.Repeat("0", 40), "--api-url", "http://127.0.0.1:9")
		cmd.Env = hutchtest.CleanEnv()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(out.String(), "loopback") {
				t.Errorf("--listen %s --insecure-no-auth: %v, %q; want a refusal naming loopback", addr, err, out.String())
			}
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("--listen %s --insecure-no-auth was accepted: it served without auth on a non-loopback address", addr)
		}
	}
}
