package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"

	"github.com/hutch-sandbox/hutch/internal/runtime"
)

// cgroupParent is where sandboxes' cgroups live in every hierarchy.
const cgroupParent = "/hutch"

// cpuPeriod is the CFS period used for CPU quotas, in microseconds.
const cpuPeriod = 100000

// sandboxCgroup returns the manager of a sandbox's cgroups, which exist
// only once joinCgroup has run. opencontainers/cgroups handles pure v2,
// pure v1, and hybrid hosts (v1 controllers plus the v2 "unified" tree,
// which it joins too so cgroup.kill and cgroup.freeze work).
func sandboxCgroup(id string, res runtime.Resources) (cgroups.Manager, error) {
	r := &cgroups.Resources{
		// Hutch makes no device nodes and user namespaces cannot; the only
		// devices in a sandbox are the handful bind-mounted on purpose.
		SkipDevices: true,
	}
	if res.MemoryBytes > 0 {
		r.Memory = res.MemoryBytes
		r.MemorySwap = res.MemoryBytes // memory+swap: no swap on top of the limit
	}
	if res.CPUs > 0 {
		r.CpuPeriod = cpuPeriod
		r.CpuQuota = int64(res.CPUs * cpuPeriod)
	}
	if res.Pids > 0 {
		r.PidsLimit = &res.Pids
	}
	cg := &cgroups.Cgroup{Path: filepath.Join(cgroupParent, id), Resources: r}
	m, err := newManager(cg, nil)
	if err != nil {
		return nil, fmt.Errorf("cgroup manager: %w", err)
	}
	return m, nil
}

// joinCgroup creates the sandbox's cgroups, moves pid into them and sets
// their limits.
func joinCgroup(m cgroups.Manager, pid int) error {
	cg, err := m.GetCgroups()
	if err != nil {
		return err
	}
	if err := m.Apply(pid); err != nil {
		return fmt.Errorf("create cgroups: %w", err)
	}
	if err := m.Set(cg.Resources); err != nil {
		return fmt.Errorf("set cgroup limits: %w", err)
	}
	return nil
}

// loadCgroup rebuilds a manager from paths saved in a sandbox record.
func loadCgroup(paths map[string]string) (cgroups.Manager, error) {
	return newManager(&cgroups.Cgroup{Resources: &cgroups.Resources{SkipDevices: true}}, paths)
}

// newManager picks the cgroupfs driver for this host, as the library's
// manager.New does without its systemd driver (which would link D-Bus and
// the net package into every sandbox's init and slow its start).
func newManager(cg *cgroups.Cgroup, paths map[string]string) (cgroups.Manager, error) {
	if cgroups.IsCgroup2UnifiedMode() {
		return fs2.NewManager(cg, paths[""])
	}
	return fs.NewManager(cg, paths)
}

// destroyCgroup kills whatever is left in the cgroups and removes them.
func destroyCgroup(m cgroups.Manager) error {
	// cgroup.kill (v2, or the unified tree on hybrid hosts) takes every
	// process down at once, including any that raced with the pid
	// namespace's teardown.
	if p := m.Path(""); p != "" {
		if err := os.WriteFile(filepath.Join(p, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroup.kill: %w", err)
		}
	}
	var err error
	// Tasks may take a moment to leave after being killed.
	for i := 0; i < 100; i++ {
		if err = m.Destroy(); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroups: %w", err)
}
