package sdk_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
	"github.com/hutch-sandbox/hutch/test/internal/hutchtest"
)

// TestServiceStopKeepsSandboxes: a service manager's stop of hutch serve
// — systemd's, with the unit's KillMode=mixed (packaging/hutch.service):
// SIGTERM to the server, then SIGKILL to everything left in the unit's
// cgroup — leaves the sandboxes running, on each runtime, and the next
// server adopts them. The unit's cgroup here is a cgroup2 directory of the
// test's own and the SIGKILL its cgroup.kill, which is what systemd does
// on the cgroup2 tree it tracks units in (the unified one on a hybrid
// host). On cgroup v1 hosts gvisor sandboxes died this way: runsc's
// processes stayed in the unit's cgroup (issue 22's packaging note).
func TestServiceStopKeepsSandboxes(t *testing.T) {
	root := "/sys/fs/cgroup"
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err == nil {
		root = "/sys/fs/cgroup/unified"
	} else if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		t.Fatalf("no cgroup2 tree at /sys/fs/cgroup or /sys/fs/cgroup/unified: systemd tracks services in one")
	}
	for _, rt := range []string{"native", "gvisor"} {
		t.Run(rt, func(t *testing.T) {
			if rt == "gvisor" {
				hutchtest.RequireRunsc(t)
			}
			b := make([]byte, 4)
			rand.Read(b)
			unit := filepath.Join(root, "hutch-test-unit-"+hex.EncodeToString(b))
			if err := os.Mkdir(unit, 0o755); err != nil {
				t.Fatal(err)
			}
			// Registered first, so run last: after the server's own
			// clean-up has stopped it and removed its sandboxes.
			t.Cleanup(func() {
				os.WriteFile(filepath.Join(unit, "cgroup.kill"), []byte("1"), 0)
				for i := 0; i < 100 && os.Remove(unit) != nil; i++ {
					time.Sleep(20 * time.Millisecond)
				}
			})
			tmp := t.TempDir()
			os.Chmod(filepath.Dir(tmp), 0o711)
			os.Chmod(tmp, 0o711)
			srv := hutchtest.NewServer(t, hutchBin.Path(t), filepath.Join(tmp, "data"))
			srv.Args = []string{"--domain", hutchtest.TestDomain, "--network=false", "--warm", "0", "--runtime", rt}
			// The server starts in the unit's cgroup, as systemd starts a
			// service's main process.
			srv.Wrap = []string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, unit}
			srv.Start()
			ctx := t.Context()
			cfg := sdk.Config{APIKey: hutchtest.TestKey, APIURL: srv.URL()}
			sbx, err := sdk.Create(ctx, sdk.CreateOptions{Config: cfg, Timeout: 10 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sbx.Files.Write(ctx, home+"/state.txt", []byte("before the stop"), nil); err != nil {
				t.Fatal(err)
			}

			// systemctl stop: SIGTERM, then SIGKILL to the rest.
			srv.Stop(syscall.SIGTERM)
			if err := os.WriteFile(filepath.Join(unit, "cgroup.kill"), []byte("1"), 0); err != nil {
				t.Fatalf("cgroup.kill: %v", err)
			}
			waitEmpty(t, unit)

			srv.Start()
			again, err := sdk.Connect(ctx, sbx.ID, sdk.ConnectOptions{Config: cfg})
			if err != nil {
				t.Fatalf("the sandbox after a service stop and start: %v", err)
			}
			if got, err := again.Files.Read(ctx, home+"/state.txt", nil); err != nil || string(got) != "before the stop" {
				t.Errorf("its file after the stop: %q, %v", got, err)
			}
			if res, err := again.Commands.Run(ctx, "echo alive", nil); err != nil || strings.TrimSpace(res.Stdout) != "alive" {
				t.Errorf("a command after the stop: %+v, %v", res, err)
			}
			if err := again.Kill(context.Background()); err != nil && !errors.Is(err, sdk.ErrNotFound) {
				t.Error(err)
			}
		})
	}
}

// waitEmpty waits until the cgroup at dir holds no process.
func waitEmpty(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err == nil && strings.TrimSpace(string(b)) == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left in %s after cgroup.kill: %q (%v)", dir, b, err)
		}
	}
}
