#!/bin/sh
# Hutch's long runs (issue 23): one command each.
#   ./bench/soak.sh churn    10,000 sandboxes created, used (a command, a
#                            file written and read back) and killed over
#                            30 min, 8 at a time at most
#   ./bench/soak.sh clients  200 concurrent SDK clients for 10 min, each
#                            with a long-lived sandbox and cycles of
#                            create / command / file / kill
# then the leak checks (mounts, loop devices, cgroups, processes, veth
# links, addresses, nftables, conntrack, uid ranges, files under the data
# dir, serve's fds and goroutines, sandboxes and database records): each
# class is printed with what it left behind, and the exit code is 0 only
# when no operation failed and every class counts 0. Flags after the mode
# go to the harness (bench/soak/main.go), e.g.
#   ./bench/soak.sh churn -n 1000 -duration 5m
#   ./bench/soak.sh clients -clients 50 -duration 1m -json /tmp/r.json
# Uses /usr/local/bin/hutch when it is this checkout's or builds hutch and
# hutch-sandbox into /var/cache/hutch/bench/soak-bin, builds the harness,
# and runs it in a network namespace of its own (ip netns add
# hutch-soak-<pid>; only one serve with networking may run per namespace,
# and the host's may have one), where it starts `hutch serve` with
# networking, --warm 4 and a fresh data directory under /var/tmp/hutch-soak
# (removed when nothing leaked), the templates at /var/lib/hutch/templates
# (or $HUTCH_TEMPLATES), read only. The runs hold the machine: on a shared
# one, run them under `flock /var/tmp/hutch-heavy.lock`.
# As root. Not part of the test suite (test/soak runs a bounded one). See
# bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

if [ $# -lt 1 ] || { [ "$1" != churn ] && [ "$1" != clients ]; }; then
	echo "usage: bench/soak.sh churn|clients [harness flags]" >&2
	exit 2
fi
mode=$1
shift

need_root
install_peers iproute2
HUTCH_TEMPLATES=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
hutch_binaries "$CACHE/soak-bin"
if ! "$HUTCH" --templates "$HUTCH_TEMPLATES" template inspect base >/dev/null 2>&1; then
	echo "bench: no base template in $HUTCH_TEMPLATES (run scripts/setup.sh)" >&2
	exit 1
fi
build_harness soak

ns=hutch-soak-$$
ip netns add "$ns"
trap 'ip netns delete "$ns" 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ip netns exec "$ns" ip link set lo up
# Not exec: the trap deletes the namespace afterwards. The harness stops
# its serve and removes its sandboxes itself.
ip netns exec "$ns" "$CACHE/soak" -hutch "$HUTCH" -templates "$HUTCH_TEMPLATES" "$@" "$mode"
