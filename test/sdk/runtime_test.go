package sdk_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestRuntimeChoice: one server runs sandboxes on both runtimes side by
// side: the default one, and gvisor when a create asks for it (the
// metadata key hutch.runtime, CreateOptions.Runtime); each sandbox's
// metadata says which; a runtime the server does not have is refused
// with the E2B API's 400, naming the ones it has.
func TestRuntimeChoice(t *testing.T) {
	hutchtest.RequireRunsc(t)
	e := startServer(t, "--runtime", "native")
	ctx := t.Context()
	native := e.sandbox(t, sdk.CreateOptions{})
	gv := e.sandbox(t, sdk.CreateOptions{Runtime: "gvisor", Metadata: map[string]string{"k": "v"}})
	for _, c := range []struct {
		sbx     *sdk.Sandbox
		runtime string
		kernel  string
	}{{native, "native", ""}, {gv, "gvisor", "gvisor"}} {
		info, err := c.sbx.GetInfo(ctx)
		must(t, err, "GetInfo")
		if got := info.Metadata[sdk.RuntimeMetadata]; got != c.runtime {
			t.Errorf("%s: metadata %v, want hutch.runtime=%s", c.sbx.ID, info.Metadata, c.runtime)
		}
		uname := run(t, c.sbx, "uname -r", nil).Stdout
		if strings.Contains(uname, "gvisor") != (c.kernel == "gvisor") {
			t.Errorf("%s on %s: uname -r = %q", c.sbx.ID, c.runtime, uname)
		}
	}
	if info, _ := gv.GetInfo(ctx); info.Metadata["k"] != "v" {
		t.Errorf("the creator's metadata is kept beside it: %v", info.Metadata)
	}
	// Listed with it too.
	list, err := e.client.List(sdk.ListOptions{}).NextItems(ctx)
	must(t, err, "List")
	seen := 0
	for _, s := range list {
		if s.SandboxID == gv.ID && s.Metadata[sdk.RuntimeMetadata] == "gvisor" || s.SandboxID == native.ID && s.Metadata[sdk.RuntimeMetadata] == "native" {
			seen++
		}
	}
	if seen != 2 {
		t.Errorf("List does not say each sandbox's runtime: %+v", list)
	}
	_, err = e.client.Create(ctx, sdk.CreateOptions{Runtime: "vmware"})
	var se *sdk.Error
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "gvisor, native") {
		t.Errorf("create on an unknown runtime: %v, want a 400 naming gvisor, native", err)
	}
}

// TestRuntimesAllowed: `--runtimes` keeps every sandbox on the backends
// the operator allows: a request for another is refused with the E2B
// API's 400 naming them, and a default outside them stops the server.
func TestRuntimesAllowed(t *testing.T) {
	hutchtest.RequireRunsc(t)
	e := startServer(t, "--runtime", "gvisor", "--runtimes", "gvisor")
	ctx := t.Context()
	sbx := e.sandbox(t, sdk.CreateOptions{})
	if info, err := sbx.GetInfo(ctx); err != nil || info.Metadata[sdk.RuntimeMetadata] != "gvisor" {
		t.Errorf("default sandbox: %+v, %v; want it on gvisor", info, err)
	}
	_, err := e.client.Create(ctx, sdk.CreateOptions{Runtime: "native"})
	var se *sdk.Error
	if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("create on native with --runtimes gvisor: %v, want a 400 saying it is not allowed", err)
	}
}
