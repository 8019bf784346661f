#!/bin/sh
# boot.sh ROOT CGROUP: boots ROOT's systemd as PID 1 of new pid, mount,
# uts, ipc, net and cgroup namespaces, as a container manager would: the
# throwaway Debian 12 the package test installs the .deb into. Every
# cgroup hierarchy of the host is joined at CGROUP first, so the
# container's cgroup tree (systemd's units, hutch's sandboxes) is that
# subtree, which the test removes afterwards. Runs until killed.
set -eu
root=$1
cg=$2
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
	[ -e "${h}cgroup.procs" ] || continue
	mkdir -p "$h$cg"
	# cpuset: a new cgroup has no cpus nor mems until given its parent's.
	if [ -e "$h$cg/cpuset.cpus" ]; then
		cat "${h}cpuset.cpus" >"$h$cg/cpuset.cpus"
		cat "${h}cpuset.mems" >"$h$cg/cpuset.mems"
	fi
	echo $$ >"$h$cg/cgroup.procs"
done
exec unshare --fork --pid --mount --uts --ipc --net --cgroup --propagation private sh -euc '
root=$1
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
# The host'"'"'s cgroup file systems, as the namespace sees them: rooted at
# the test'"'"'s cgroup.
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
	mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup"
else
	mount -t tmpfs -o mode=755 tmpfs "$root/sys/fs/cgroup"
	for h in /sys/fs/cgroup/*/; do
		n=$(basename "$h")
		mkdir -p "$root/sys/fs/cgroup/$n"
		case $n in
		unified) mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup/$n" ;;
		systemd) mount -t cgroup -o none,name=systemd cgroup "$root/sys/fs/cgroup/$n" ;;
		*) mount -t cgroup -o "$n" cgroup "$root/sys/fs/cgroup/$n" ;;
		esac
	done
fi
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
# pivot_root, not chroot: a chrooted process may not make user
# namespaces (clone fails with EPERM), and hutch'"'"'s sandboxes need them.
cd "$root"
mkdir -p .oldroot
pivot_root . .oldroot
exec env -i container=hutch-test /bin/sh -euc "umount -l /.oldroot && rmdir /.oldroot && exec /lib/systemd/systemd --system"
' sh "$root"
