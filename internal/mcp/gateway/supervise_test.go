package gateway

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSuperviseRestarts: a gateway that exits is started again, each time
// with the socket (test/mcp's TestCatalogImages checks that the port
// stays held in a sandbox while it is down), and Supervise ends with its
// context.
func TestSuperviseRestarts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	ln.Close()
	if err != nil {
		t.Fatal(err)
	}
	starts := filepath.Join(t.TempDir(), "starts")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Each start finds the socket at ListenerFD, as a listener.
		done <- Supervise(ctx, SuperviseOptions{Command: []string{"/bin/sh", "-c", "test -S /proc/self/fd/4 || test -e /proc/self/fd/4 && echo started >> " + starts + "; exit 3"}, Listener: f})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(starts)
		if strings.Count(string(b), "started") >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("started %q times in 10 s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Supervise: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Supervise did not end with its context")
	}
}
