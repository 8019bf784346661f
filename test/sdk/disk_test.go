package sdk_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hutch-sandbox/hutch/internal/template"
	"github.com/hutch-sandbox/hutch/internal/testenv"
	"github.com/hutch-sandbox/hutch/sdk"
)

// TestDiskLimits: every sandbox `hutch serve` makes has a disk and an
// inode limit by default. Writes past them fail inside the sandbox with
// ENOSPC, the host's disk is untouched, and metrics report the limit. A
// template's diskSizeMB replaces the server's default.
func TestDiskLimits(t *testing.T) {
	// df's size and inode count of the sandbox's root.
	dfRoot := func(t *testing.T, sbx *sdk.Sandbox) (size, inodes int64) {
		t.Helper()
		out := run(t, sbx, "df -B1 --output=size / | tail -1; df --output=itotal / | tail -1", nil).Stdout
		f := strings.Fields(out)
		if len(f) != 2 {
			t.Fatalf("df: %q", out)
		}
		size, _ = strconv.ParseInt(f[0], 10, 64)
		inodes, _ = strconv.ParseInt(f[1], 10, 64)
		return size, inodes
	}
	near := func(got, want int64) bool { return got > want*9/10 && got <= want }

	t.Run("default", func(t *testing.T) {
		e := startServer(t)
		sbx := e.sandbox(t, sdk.CreateOptions{})
		size, inodes := dfRoot(t, sbx)
		if onGvisor() {
			inodes = 4 << 30 / (16 << 10) // gVisor's overlay counts no inodes (see "past the limit")
		}
		if !near(size, 4<<30) || inodes != 4<<30/(16<<10) {
			t.Errorf("root: %d bytes, %d inodes; want the default 4 GiB and one inode per 16 KiB", size, inodes)
		}
		info, err := sbx.GetInfo(t.Context())
		must(t, err, "GetInfo")
		if info.DiskSizeMB != 4096 {
			t.Errorf("diskSizeMB = %d, want 4096", info.DiskSizeMB)
		}
	})

	t.Run("past the limit", func(t *testing.T) {
		e := startServer(t, "--disk", "128M")
		sbx := e.sandbox(t, sdk.CreateOptions{})
		res, err := sbx.Commands.Run(t.Context(), "fallocate -l 1G /tmp/big", nil)
		if err == nil || res == nil || !strings.Contains(res.Stderr, "No space left on device") {
			t.Errorf("fallocate 1G on a 128M disk: %v, %+v; want ENOSPC", err, res)
		}
		run(t, sbx, "rm -f /tmp/big", nil)
		// On gvisor the writable layer lives in gVisor's memory-backed
		// overlay: its files are bounded by the memory limit, not by
		// inodes (docs/runtime.md).
		if !onGvisor() {
			out := run(t, sbx, `python3 -c '
import os, errno
n = 0
try:
    while True:
        open("/tmp/f%d" % n, "w").close(); n += 1
except OSError as e:
    print(n, errno.errorcode[e.errno])'`, nil).Stdout
			f := strings.Fields(out)
			if n, _ := strconv.Atoi(f[0]); len(f) != 2 || f[1] != "ENOSPC" || n > 128<<20/(16<<10) {
				t.Errorf("empty files until an error: %q, want at most %d then ENOSPC", out, 128<<20/(16<<10))
			}
		}
		// The host holds no more than the limit for the sandbox.
		args := []string{"-s", "-B1", filepath.Join(e.srv.DataDir, "sandboxes", sbx.ID)}
		if onGvisor() {
			// Not into the template's layers, which a gvisor sandbox's
			// root mounts on the host (bind mounts: the same file system).
			args = []string{"-s", "-x", "-B1", "--exclude=lower", "--exclude=rootfs", filepath.Join(e.srv.DataDir, "gvisor", "sandboxes", sbx.ID)}
		}
		du, err := exec.Command("du", args...).Output()
		must(t, err, "du")
		if n, _ := strconv.ParseInt(strings.Fields(string(du))[0], 10, 64); n > 128<<20 {
			t.Errorf("the sandbox's directory takes %d bytes on the host, more than its 128 MiB limit", n)
		}
		// Metrics report the limit (the first sample is taken at create).
		var m []sdk.Metric
		waitFor(t, 15*time.Second, func() string { b, _ := json.Marshal(m); return "a metric with the disk limit: " + string(b) }, func() bool {
			m, err = sbx.GetMetrics(t.Context(), sdk.MetricsOptions{})
			return err == nil && len(m) > 0 && near(m[len(m)-1].DiskTotal, 128<<20)
		})
	})

	t.Run("a template's diskSizeMB", func(t *testing.T) {
		// A private template store: base's layers hard-linked into it,
		// as a template "small" with a disk size of its own.
		store := t.TempDir()
		os.Chmod(store, 0o755)
		base, err := template.Open(testenv.TemplatesDir()).Get("base")
		must(t, err, "base")
		must(t, os.MkdirAll(filepath.Join(store, "layers"), 0o700), "mkdir")
		for i, id := range base.Layers {
			if out, err := exec.Command("cp", "-al", filepath.Dir(base.LowerDirs()[i]), filepath.Join(store, "layers", id)).CombinedOutput(); err != nil {
				t.Fatalf("cp -al: %v: %s", err, out)
			}
		}
		cfg := base.Config
		cfg.DiskSizeMB = 96
		_, err = template.Open(store).Commit("small", nil, base.Layers, cfg)
		must(t, err, "commit small")
		t.Setenv("HUTCH_TEMPLATES", store)
		e := startServer(t)
		sbx := e.sandbox(t, sdk.CreateOptions{Template: "small"})
		if size, _ := dfRoot(t, sbx); !near(size, 96<<20) {
			t.Errorf("root of a diskSizeMB 96 template: %d bytes", size)
		}
		info, err := sbx.GetInfo(t.Context())
		must(t, err, "GetInfo")
		if info.DiskSizeMB != 96 {
			t.Errorf("diskSizeMB = %d, want 96", info.DiskSizeMB)
		}
	})
}
