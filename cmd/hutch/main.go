// Command hutch runs isolated sandboxes for AI agents. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

func main() {
	// A sandbox's init is this binary re-executed; it must take over before
	// anything else runs (see native.Init).
	if native.IsInit() {
		native.Init() // never returns
	}
	// A gVisor sandbox's shim (on the host) and PID 1 (inside) are this
	// binary too (see package gvisor).
	if gvisor.IsShim() {
		gvisor.Main() // never returns
	}
	if gvisor.IsGuestInit() {
		gvisor.GuestInit() // never returns
	}
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == gatewayName {
		args = append([]string{"mcp", "gateway"}, args...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	code := run(ctx, args)
	stop()
	os.Exit(code)
}
