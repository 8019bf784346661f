// Command hutch-sandbox is what runs inside Hutch's sandboxes: each
// sandbox's init (PID 1) and its envd. It is the part of hutch that a
// sandbox needs and nothing else, so that the two processes every sandbox
// starts load a third of hutch's code and run none of its CLI, store or
// protocol adapters' package initialisation (about half the CPU of each
// start; bench/README.md, issue 16). hutch uses it when it is installed
// beside hutch and was built from the same source (see
// native.FindSandboxBinary), and runs itself in sandboxes otherwise.
// It is not for people to run.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hutch-sandbox/hutch/internal/envd"
	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

func main() {
	// A sandbox's init is this binary executed as "hutch-init"; it must
	// take over before anything else runs (see native.Init).
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
	if len(os.Args) < 2 || os.Args[1] != "envd" {
		fmt.Fprintln(os.Stderr, "hutch-sandbox runs inside Hutch's sandboxes (as their init, and as `hutch-sandbox envd`); it is not for people to run")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	err := envd.Main(ctx, os.Args[2:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hutch-sandbox:", err)
		os.Exit(1)
	}
}
