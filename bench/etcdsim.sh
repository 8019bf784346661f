#!/bin/sh
# Hutch's etcd simulation (issue 21, cluster mode): where one etcd cluster
# stops. Builds the harness (bench/etcdsim) into /var/cache/hutch/bench,
# which starts a 3-voter etcd on 127.0.0.1 (embedded members of the etcd
# version in go.mod, one process each, a fresh cluster per run in a
# temporary directory under /var/tmp, on disk rather than a tmpfs /tmp;
# removed afterwards) and simulates N Hutch nodes against it: lease
# renewals every TTL/3, a ~500 B node record rewritten with fresh load
# every 2 s, ranges of all node records and sandbox create txns at fixed
# rates. It prints per operation count, ops/s, p50/p95/p99/max and errors,
# etcd's db size and the CPU of each member and of the simulation, and
# whether the cluster kept up. Arguments go to the harness, e.g.
# ./bench/etcdsim.sh -nodes 5000 -duration 60s, ./bench/etcdsim.sh -sweep
# 500,1000,2000,5000 -duration 20s, or -endpoints http://10.0.0.1:2379 for
# an external etcd (its keys under a prefix of the run's own, removed
# afterwards). Needs no root and no network but loopback (it builds into
# /var/cache/hutch/bench as the other benches do). Not part of the test
# suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

build_harness etcdsim
exec "$CACHE/etcdsim" -dir /var/tmp "$@"
