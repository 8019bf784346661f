#!/bin/sh
# Recipe of Hutch's "base" template: a Debian bookworm root like E2B's base
# image. Run by `hutch template build base` with ROOTFS, MIRROR and
# CACHE set; its text is hashed, so editing it makes the next build rebuild.
set -eu
step() { printf '==> %s\n' "$*"; }

step "debootstrap bookworm (minbase) from $MIRROR"
mkdir -p "$CACHE/debootstrap"
debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap" bookworm "$ROOTFS" "$MIRROR"

# Everything below runs in a private mount namespace so that an interrupted
# build leaves no mounts behind on the host.
step "installing packages inside the root"
mkdir -p "$CACHE/apt-archives/partial"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
unshare --mount --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  mount --bind "$CACHE/apt-archives" "$ROOTFS/var/cache/apt/archives"
  chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive LC_ALL=C sh -eu -c "
      apt-get update -q
      apt-get install -y -q --no-install-recommends \
        bash coreutils procps ca-certificates curl git sudo python3 iproute2 \
        iputils-ping less python-is-python3 python3-pip python3-venv
      apt-get install -y -q --no-install-recommends nodejs npm
      useradd --create-home --uid 1000 --shell /bin/bash user
      echo \"user ALL=(ALL:ALL) NOPASSWD: ALL\" > /etc/sudoers.d/user
      chmod 0440 /etc/sudoers.d/user
      rm -rf /var/lib/apt/lists/*
    "
'
# Sandboxes drop CAP_NET_RAW, and the kernel refuses to execute a file
# whose capabilities ask for one the bounding set lacks (EPERM, even for
# root). ping needs none: it uses ICMP datagram sockets, which every
# sandbox's net.ipv4.ping_group_range opens to all its users.
chroot "$ROOTFS" python3 -c 'import os; os.removexattr("/usr/bin/ping", "security.capability")'
# E2B's base image is python:3.11, where `python` and `pip` are the names
# (python-is-python3 and python3-pip give them here) and pip installs
# packages: Debian marks its Python as managed by apt (PEP 668), which
# makes every `pip install` fail with externally-managed-environment. In a
# sandbox nothing else manages it, so the marker goes.
rm -f "$ROOTFS"/usr/lib/python3*/EXTERNALLY-MANAGED
# Debian's ~/.bash_logout runs clear_console, which fails without a
# console; commands run as bash -l -c (E2B's way) then exit 1 instead of
# their own status under `set -e`. Sandboxes have no console to clear.
for f in "$ROOTFS/etc/skel/.bash_logout" "$ROOTFS/home/user/.bash_logout"; do
  rm -f "$f"
  printf '%s\n' '# ~/.bash_logout: run when a login shell exits; it must not change the exit status.' ':' > "$f"
done
chown 1000:1000 "$ROOTFS/home/user/.bash_logout"
# Every command the SDKs run is a login bash (bash -l -c CMD), and Debian's
# /etc/profile forks id(1) to learn the uid: ~1 ms of each command's start.
# bash knows it already ($EUID); other shells still ask id.
sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/' "$ROOTFS/etc/profile"
grep -q 'EUID:-' "$ROOTFS/etc/profile"
# The sandbox runtime writes these per sandbox.
: > "$ROOTFS/etc/resolv.conf"
: > "$ROOTFS/etc/hostname"
step "done"
