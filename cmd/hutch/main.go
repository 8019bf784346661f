// Command hutch runs isolated sandboxes for AI agents. See README.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hutch-sandbox/hutch/internal/runtime/native"
)

func main() {
	// A sandbox's init is this binary re-executed; it must take over before
	// anything else runs (see native.Init).
	if native.IsInit() {
		native.Init() // never returns
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
