// Package harness holds what the benchmark programs share: running in a
// private mount namespace, the OCI peers' idmapped rootfs, a cgroup-v1-only
// view for crun, peer versions and how busy the machine is.
package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// envInNS marks the re-executed harness that runs in its own mount
// namespace.
const envInNS = "HUTCH_BENCH_IN_MOUNTNS"

// InMountNS reports whether this is the re-executed harness, in its own
// mount namespace.
func InMountNS() bool { return os.Getenv(envInNS) == "1" }

// ReexecInMountNS runs this program again in a private mount namespace and
// returns its exit status. Every mount the harness makes (the peers' rootfs)
// lives and dies with that namespace: nothing is left mounted on the host,
// whatever happens to the harness.
func ReexecInMountNS() int {
	// With CLONE_NEWNS in Unshareflags, Go also makes / MS_REC|MS_PRIVATE in
	// the child, so no mount propagates back to the host.
	return Reexec(envInNS, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS})
}

// Reexec runs this program again with env=1 in its environment and attr
// (new namespaces) and returns its exit status. SIGINT and SIGTERM are
// passed on, so the child cleans up and reports rather than dying before
// it (Ctrl-C reaches it twice, which is harmless).
func Reexec(env string, attr *syscall.SysProcAttr) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: re-exec in new namespaces: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}

// MountIdmapped mounts src read-only at dst, with its ids shifted by the
// user namespace mapping 0..size-1 to hostID..hostID+size-1: files owned by
// root on disk appear owned by the container's root (host uid hostID), as
// Hutch does for its own template mount. Without it, the OCI peers'
// container root could not create mount points in its overlay (podman) and
// would see every file as owned by nobody.
func MountIdmapped(src, dst string, hostID, size int) error {
	// A throwaway process holds the user namespace whose mapping we want.
	holder := exec.Command("/bin/sleep", "60")
	holder.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: size}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostID, Size: size}},
	}
	if err := holder.Start(); err != nil {
		return fmt.Errorf("user namespace for the idmapped rootfs: %w", err)
	}
	defer func() {
		holder.Process.Kill()
		holder.Wait()
	}()
	userns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", holder.Process.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(userns)
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID, Userns_fd: uint64(userns)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// LegacyCgroupNS is one OS thread in a further private mount namespace in
// which the cgroup2 "unified" mount at /sys/fs/cgroup/unified is detached.
// crun 1.8 refuses hybrid hosts whose cgroup2 tree has any controller
// (here: hugetlb); without that mount it sees a plain cgroup v1 host and
// applies every limit through the v1 controllers, as runc does. Commands
// started from this thread inherit its mount namespace, so the set-up costs
// nothing per run.
type LegacyCgroupNS struct {
	reqs chan func()
}

// NewLegacyCgroupNS starts the namespace's thread; Close ends it.
func NewLegacyCgroupNS() (*LegacyCgroupNS, error) {
	ns := &LegacyCgroupNS{reqs: make(chan func())}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread, whose mount namespace differs from
		// the rest of the process, exits with this goroutine.
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			var st unix.Statfs_t
			if unix.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
				err = unix.Unmount("/sys/fs/cgroup/unified", unix.MNT_DETACH)
			}
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range ns.reqs {
			f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("mount namespace without the cgroup2 tree: %w", err)
	}
	return ns, nil
}

// Do runs f on the namespace's thread and waits for it.
func (ns *LegacyCgroupNS) Do(f func()) {
	done := make(chan struct{})
	ns.reqs <- func() { f(); close(done) }
	<-done
}

// Close ends the namespace's thread.
func (ns *LegacyCgroupNS) Close() { close(ns.reqs) }
