// Package backends makes the runtime.Set a Hutch process runs sandboxes
// with: the native backend always, gVisor's where runsc is installed. The
// server (internal/serve) and the local CLI (cmd/hutch) open it here, so
// both see every sandbox of a data dir, whichever backend runs it.
package backends

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/hutch-sandbox/hutch/internal/errdefs"
	"github.com/hutch-sandbox/hutch/internal/fault"
	"github.com/hutch-sandbox/hutch/internal/runtime"
	"github.com/hutch-sandbox/hutch/internal/runtime/gvisor"
	"github.com/hutch-sandbox/hutch/internal/runtime/native"
	"github.com/hutch-sandbox/hutch/internal/template"
)

// Names are the backends there are, whether or not this host has them.
var Names = []string{native.Name, gvisor.Name}

// Options say what to open.
type Options struct {
	// DataDir, Templates and SandboxBinary are the backends' own (see
	// native.Options).
	DataDir       string
	Templates     *template.Store
	SandboxBinary string
	// Default is the backend sandboxes run on unless told ("" is native).
	Default string
	// Faults are the fault points armed (a test hook, package fault).
	Faults fault.Points
	// Logger is told which backends are missing and why; nil for none.
	Logger *slog.Logger
}

// Open makes the backends this host has into a Set, and returns the
// native one too (what only it does: Reachable, DataDir). A default the
// host lacks is an error wrapping errdefs.ErrUnavailable; another backend
// the host lacks is left out, and said so to the logger.
func Open(opts Options) (*runtime.Set, *native.Runtime, error) {
	if opts.Default == "" {
		opts.Default = native.Name
	}
	known := false
	for _, n := range Names {
		known = known || n == opts.Default
	}
	if !known {
		return nil, nil, fmt.Errorf("runtime %q: want one of %v: %w", opts.Default, Names, errdefs.ErrInvalidArgument)
	}
	nrt, err := native.New(native.Options{DataDir: opts.DataDir, Templates: opts.Templates, SandboxBinary: opts.SandboxBinary, Faults: opts.Faults})
	if err != nil {
		return nil, nil, err
	}
	set := map[string]runtime.Runtime{native.Name: nrt}
	grt, err := gvisor.New(gvisor.Options{DataDir: opts.DataDir, Templates: opts.Templates, Native: nrt, SandboxBinary: opts.SandboxBinary})
	switch {
	case err == nil:
		set[gvisor.Name] = grt
	case opts.Default == gvisor.Name:
		return nil, nil, fmt.Errorf("the gvisor runtime: %w", err)
	case opts.Logger != nil && !errors.Is(err, errdefs.ErrUnavailable):
		opts.Logger.Warn("the gvisor runtime is not available", "err", err)
	case opts.Logger != nil:
		opts.Logger.Info("the gvisor runtime is not available", "why", err.Error())
	}
	s, err := runtime.NewSet(opts.Default, set)
	if err != nil {
		return nil, nil, err
	}
	return s, nrt, nil
}
