// Package e2bjs runs the official E2B JavaScript SDK's tests (the JS
// package in js/, pinned) against a real envd in a real sandbox: the SDK
// in debug mode (no control plane) with E2B_SANDBOX_URL pointing at a
// local TCP proxy to the sandbox's host socket; and against a real
// `hutch serve`, as a user points the SDK at it.
package e2bjs

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/envdtest"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

func TestMain(m *testing.M) { envdtest.Main(m) }

// nodeTimeout bounds the whole `node --test` run.
const nodeTimeout = 5 * time.Minute

func TestE2BJSSDK(t *testing.T) {
	dir := jsPackage(t)
	s := envdtest.Start(t)
	addr := proxy(t, s.SocketPath)
	if err := runNode(t, dir, "E2B_SANDBOX_URL=http://"+addr, "E2B_DEBUG=true"); err != nil {
		t.Errorf("node --test failed: %v\nenvd log:\n%s", err, s.Log())
	}
}

// TestE2BJSSDKThroughServe runs the same suite against a real `hutch serve`
// (the built binary), as a user would point the SDK at it: E2B_API_URL and
// E2B_SANDBOX_URL at its one listener, and an e2b_ key.
func TestE2BJSSDKThroughServe(t *testing.T) {
	dir := jsPackage(t)
	s := startServe(t)
	if err := runNode(t, dir, s.SDKEnv()...); err != nil {
		t.Errorf("node --test through hutch serve failed: %v", err)
	}
}

// gvisorFiles are the suite's files run against a server whose sandboxes
// run on the gvisor runtime as well (TestE2BJSSDKOnGvisor): commands,
// files, terminals and watches (what envd does, now behind gVisor's
// kernel and the link on its stdin), and checkpoint.test.mjs, which only
// gvisor passes (memory kept on disk). The rest (lifecycle, ports, pause
// and snapshots of files, volumes, templates) is the control plane's,
// the same whatever the runtime, and runs on native only: CI's two cores
// have room for one full pass.
var gvisorFiles = []string{"commands.test.mjs", "files.test.mjs", "pty.test.mjs", "watch.test.mjs", "checkpoint.test.mjs"}

// TestE2BJSSDKOnGvisor runs gvisorFiles against `hutch serve --runtime
// gvisor`.
func TestE2BJSSDKOnGvisor(t *testing.T) {
	dir := jsPackage(t)
	hutchtest.RequireRunsc(t)
	s := startServe(t, "--runtime", "gvisor")
	t.Setenv("E2BJS_FILES", strings.Join(gvisorFiles, " "))
	if err := runNode(t, dir, append(s.SDKEnv(), "HUTCH_RUNTIME=gvisor")...); err != nil {
		t.Errorf("node --test through hutch serve --runtime gvisor failed: %v", err)
	}
}

// tlsFiles are the suite's files run against a server reached over TLS by
// its domain (TestE2BJSSDKOverTLS): every call of theirs goes to
// https://api.<domain> or https://49983-<id>.<domain>, over HTTP/2 where
// the SDK offers it (its envd client does), with Connect streams, uploads
// and WebSockets of terminals among them.
var tlsFiles = []string{"commands.test.mjs", "files.test.mjs", "pty.test.mjs", "watch.test.mjs"}

// TestE2BJSSDKOverTLS runs tlsFiles against `hutch serve --domain
// hutch.localhost --tls-self-signed` on port 443 of a network namespace,
// the SDK configured as a remote user's is: E2B_DOMAIN, E2B_API_KEY and
// the server's CA in NODE_EXTRA_CA_CERTS, nothing else.
func TestE2BJSSDKOverTLS(t *testing.T) {
	dir := jsPackage(t)
	s := hutchtest.StartDomainServe(t, hutchBin.Path(t), hutchtest.DomainTestDomain)
	t.Setenv("E2BJS_FILES", strings.Join(tlsFiles, " "))
	if err := runNodeIn(t, dir, s.NS.Wrap(), s.DomainEnv()...); err != nil {
		t.Errorf("node --test over TLS to %s failed: %v", s.URL(), err)
	}
}

// jsPackage returns test/e2bjs/js (package.json, package-lock.json and
// the *.test.mjs files) with its packages installed. Every test here
// starts with it and runs sandboxes, so it checks for root first.
func jsPackage(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t, "sandboxes: namespaces, cgroups and mounts")
	return hutchtest.JSPackage(t, hutchtest.E2BJS)
}

// runNode runs node's test runner in dir with env added.
func runNode(t *testing.T, dir string, env ...string) error {
	t.Helper()
	return runNodeIn(t, dir, nil, env...)
}

// runNodeIn is runNode with node run under wrap (nsenter into a network
// namespace).
func runNodeIn(t *testing.T, dir string, wrap []string, env ...string) error {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	args := []string{"--test", "--test-reporter=spec"}
	// E2BJS_FILES (space-separated, relative to test/e2bjs/js) runs only those
	// test files.
	args = append(args, strings.Fields(os.Getenv("E2BJS_FILES"))...)
	argv := append(append(append([]string{}, wrap...), node), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1"), env...)
	// node --test runs each file in a child process: kill the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out := hutchtest.LogWriter(t, "node: ")
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	err = cmd.Run()
	out.Close()
	if cmd.Process != nil {
		// Stray children of a failed run must not outlive the test.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("node --test took %v", time.Since(start).Round(time.Millisecond))
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return err
}

// proxy forwards TCP connections on a loopback port to the unix socket and
// returns the port's address. Everything is torn down when the test ends.
func proxy(t *testing.T, sock string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		closed bool
		wg     sync.WaitGroup
	)
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			c.Close()
			return false
		}
		conns[c] = struct{}{}
		return true
	}
	untrack := func(c net.Conn) {
		mu.Lock()
		delete(conns, c)
		mu.Unlock()
		c.Close()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !track(c) {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer untrack(c)
				u, err := net.Dial("unix", sock)
				if err != nil {
					t.Logf("proxy: dial %s: %v", sock, err)
					return
				}
				if !track(u) {
					return
				}
				defer untrack(u)
				done := make(chan struct{}, 2)
				pipe := func(dst, src net.Conn) {
					io.Copy(dst, src)
					// Pass half-closes on so each side sees EOF.
					if cw, ok := dst.(interface{ CloseWrite() error }); ok {
						cw.CloseWrite()
					}
					done <- struct{}{}
				}
				go pipe(u, c)
				go pipe(c, u)
				<-done
				<-done
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
