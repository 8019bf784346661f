package native

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"

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
	return limitTCPMemory(m, cg.Resources.Memory)
}

// limitTCPMemory bounds a sandbox's TCP socket buffers on cgroup v1, where
// the kernel charges them to a memory cgroup only once its
// memory.kmem.tcp.limit_in_bytes is set (they have a counter of their own
// there); without it a sandbox could park any amount of host memory in
// connections nobody reads. Cgroup v2 charges socket memory with the rest
// by default. opencontainers/cgroups leaves this file alone, so it is
// written here. The limit is a quarter of the sandbox's memory limit
// (TCPMemory), not all of it: the kernel also counts every socket buffer
// host-wide against net.ipv4.tcp_mem, a few percent of the host's memory,
// and five 512 MiB sandboxes each queueing their limit pushed it past its
// hard ceiling, stalling the host's own connections (review 2, A9).
func limitTCPMemory(m cgroups.Manager, memory int64) error {
	limit := TCPMemory(memory)
	if limit <= 0 || cgroups.IsCgroup2UnifiedMode() {
		return nil
	}
	dir := m.Path("memory")
	if dir == "" {
		return nil
	}
	err := os.WriteFile(filepath.Join(dir, "memory.kmem.tcp.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("limit TCP memory: %w", err)
	}
	return nil
}

// TCPMemory is how much socket buffer memory a sandbox with the given
// memory limit may hold on a cgroup v1 host: a quarter of it (what a
// thousand connections moving data at full speed use), 0 for no limit.
// The gvisor backend bounds runsc's host sockets with it too.
func TCPMemory(memory int64) int64 {
	if memory <= 0 {
		return 0
	}
	return memory / 4
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

// ensureCgroupMounts makes the host's cgroup hierarchies visible in this
// process's mount namespace when none is: `ip netns exec` (and other
// tools) give a command a mount namespace with a fresh /sys, which has
// nothing under /sys/fs/cgroup. The hierarchies are the kernel's, not the
// mount namespace's: mounting them again with the options PID 1 sees them
// with attaches the very same ones. Nothing is mounted when this namespace
// is PID 1's (the host's own layout is left alone) or already has a
// cgroup mount.
func ensureCgroupMounts() error {
	mine, err := mountinfo.GetMounts(cgroupMountFilter)
	if err != nil {
		return fmt.Errorf("cgroup mounts: %w", err)
	}
	if len(mine) > 0 {
		return nil
	}
	const none = "no cgroup file system is mounted (mount cgroup2 on /sys/fs/cgroup, or the v1 controllers under it)"
	f, err := os.Open("/proc/1/mountinfo")
	if err != nil {
		return fmt.Errorf("%s, and PID 1's mounts cannot be read: %w", none, err)
	}
	defer f.Close()
	all, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return fmt.Errorf("PID 1's mounts: %w", err)
	}
	// Mount ids are host-wide and a new mount namespace copies every mount
	// under a new id: the same root mount id means PID 1's namespace.
	// (/proc/1/ns/mnt is not always readable, even by root.)
	root, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter("/"))
	if err != nil || len(root) == 0 {
		return fmt.Errorf("%s: %v", none, err)
	}
	var theirs []*mountinfo.Info
	for _, m := range all {
		if m.Mountpoint == "/" && m.ID == root[0].ID {
			return errors.New(none)
		}
		in := m.Mountpoint == "/sys/fs/cgroup" || strings.HasPrefix(m.Mountpoint, "/sys/fs/cgroup/")
		if in && (m.FSType == "tmpfs" || m.FSType == "cgroup" || m.FSType == "cgroup2") {
			theirs = append(theirs, m)
		}
	}
	if len(theirs) == 0 {
		return errors.New("no cgroup file system is mounted here or for PID 1")
	}
	// PID 1's order is parents first.
	for _, m := range theirs {
		if err := os.MkdirAll(m.Mountpoint, 0o755); err != nil {
			return fmt.Errorf("cgroup mount point %s: %w", m.Mountpoint, err)
		}
		var data []string
		for _, o := range strings.Split(m.VFSOptions, ",") {
			if o != "rw" && o != "ro" && o != "" {
				data = append(data, o)
			}
		}
		if m.FSType == "tmpfs" {
			data = []string{"mode=755"}
		}
		if err := unix.Mount(m.FSType, m.Mountpoint, m.FSType, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, strings.Join(data, ",")); err != nil {
			return fmt.Errorf("mount %s on %s (as PID 1 has it): %w", m.FSType, m.Mountpoint, err)
		}
		if m.FSType == "tmpfs" {
			// Nothing mounted below it may reach another namespace.
			if err := unix.Mount("", m.Mountpoint, "", unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("make %s private: %w", m.Mountpoint, err)
			}
		}
	}
	// systemd's symlinks (cpu -> cpu,cpuacct and the like).
	if ents, err := os.ReadDir("/proc/1/root/sys/fs/cgroup"); err == nil {
		for _, e := range ents {
			if e.Type()&os.ModeSymlink == 0 {
				continue
			}
			if target, err := os.Readlink("/proc/1/root/sys/fs/cgroup/" + e.Name()); err == nil {
				os.Symlink(target, "/sys/fs/cgroup/"+e.Name())
			}
		}
	}
	return nil
}

func cgroupMountFilter(m *mountinfo.Info) (skip, stop bool) {
	return m.FSType != "cgroup" && m.FSType != "cgroup2", false
}
