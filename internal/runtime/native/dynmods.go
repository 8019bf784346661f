package native

import (
	"fmt"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// FavorDynMods turns on cgroup2's favordynmods on this host, when the
// kernel has it (Linux 6.0+) and it is not on yet, and reports whether it
// is on. Every sandbox start moves its init into its cgroups, and each
// such move waits for the kernel's cgroup_threadgroup_rwsem, which by
// default costs an RCU grace period per move (per hierarchy on cgroup v1):
// 5-10 ms of a 30 ms sandbox start on this project's machines. With
// favordynmods the lock stays in its slow-reader mode, and moves cost
// microseconds while forks and exits host-wide take a slightly slower
// path (the kernel's documented trade-off). The lock is global, so setting
// the option on the one cgroup2 mount serves every hierarchy, v1 ones of a
// hybrid host included. The mount's other options are kept as they are.
func FavorDynMods() (bool, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return false, fmt.Errorf("cgroup mounts: %w", err)
	}
	if len(mounts) == 0 {
		return false, nil // v1 only: nothing to set it on
	}
	m := mounts[0]
	opts := strings.Split(m.VFSOptions, ",")
	for _, o := range opts {
		if o == "favordynmods" {
			return true, nil
		}
	}
	fd, err := unix.Fspick(unix.AT_FDCWD, m.Mountpoint, unix.FSPICK_CLOEXEC)
	if err != nil {
		return false, fmt.Errorf("fspick %s: %w", m.Mountpoint, err)
	}
	defer unix.Close(fd)
	// A reconfiguration sets cgroup2's flags to exactly those given: the
	// current ones are given again (rw/ro is the mount's, not a flag).
	for _, o := range append(opts, "favordynmods") {
		if o == "" || o == "rw" || o == "ro" {
			continue
		}
		if err := unix.FsconfigSetFlag(fd, o); err != nil {
			return false, fmt.Errorf("cgroup2 option %s: %w", o, err)
		}
	}
	if err := unix.FsconfigReconfigure(fd); err != nil {
		return false, fmt.Errorf("reconfigure %s: %w", m.Mountpoint, err)
	}
	return true, nil
}
