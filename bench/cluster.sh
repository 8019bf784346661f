#!/bin/sh
# Hutch's cluster benchmark (issue 21): create throughput of `hutch serve
# --cluster` with 1, 2 and 3 nodes side by side (and one hutch serve
# without --cluster for reference): creates/s, create latency
# p50/p95/p99, each node's CPU and the machine's, a ratio calibrated for
# the nodes sharing this machine's CPUs, how many creates placement sent
# on to another node; then the routing hop: envd and API round trips to a
# sandbox sent to its node directly and through another node. See
# bench/cluster/main.go.
#
# Each node is a host of its own: a network namespace with a veth pair to
# a bridge in the harness's namespace (10.98.0.x/24), its own data dir,
# cluster certificate (hutch cluster ca / issue) and, on 1 and 3 nodes,
# an embedded etcd voter each (at 2 nodes the second node is an etcd
# client of the first; -voters all makes it a voter too). Uses
# /usr/local/bin/hutch when it is this checkout's or builds hutch and
# hutch-sandbox into /var/cache/hutch/bench/cluster-bin, needs the base
# template (scripts/setup.sh), builds the harness (bench/cluster), then
# re-executes itself in a network namespace of its own (unshare --net:
# no route out; the hosts' namespaces are made from there), where the
# harness runs every step with fresh data dirs under
# /var/tmp/hutch-bench-cluster and removes their sandboxes and dirs
# afterwards. Arguments go to the harness, e.g. ./bench/cluster.sh
# -creates 400 -c 16 or -nodes 1,3 -plain=false. About two minutes. As
# root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

if [ -z "${HUTCH_BENCH_CLUSTER_NETNS:-}" ]; then
	need_root
	install_peers iproute2 util-linux
	hutch_binaries "$CACHE/cluster-bin"
	templates=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
	if ! "$HUTCH" --templates "$templates" template inspect base >/dev/null 2>&1; then
		echo "bench: no base template in $templates (run scripts/setup.sh)" >&2
		exit 1
	fi
	build_harness cluster
	export HUTCH
	in_own_netns HUTCH_BENCH_CLUSTER_NETNS ./bench/cluster.sh "$@"
fi
own_netns_ready HUTCH_BENCH_CLUSTER_NETNS bench/cluster.sh

ROOT=/var/tmp/hutch-bench-cluster
mkdir -p "$ROOT"
# Sandboxes' uids must traverse to their layers under the data dirs.
chmod 0711 "$ROOT"

# A fresh key per run, given to every node; it is in no file.
E2B_API_KEY=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
export E2B_API_KEY

exec "$CACHE/cluster" -hutch "$HUTCH" -dir "$ROOT" \
	-netns "its own, made by bench/cluster.sh (unshare --net): no route out" "$@"
