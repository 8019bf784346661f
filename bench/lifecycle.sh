#!/bin/sh
# Hutch's sandbox lifecycle benchmark: p50/p95/p99 of pause and resume
# (keeping memory, and filesystem only) with 64 and 448 MiB of touched
# memory next to `podman pause`/`unpause` (runc), snapshots with 10 and
# 500 MB of changed files, create from a snapshot vs from a template (with
# and without a warm pool), and fork of 1, 4 and 16, beside the goals of
# the issue; see bench/lifecycle/main.go for what each row times.
# Uses /usr/local/bin/hutch when it is this checkout's or builds hutch and
# hutch-sandbox into /var/cache/hutch/bench/lifecycle-bin, builds the
# harness (bench/lifecycle), then re-executes itself in a network namespace
# of its own (unshare --net: the host's may have a `hutch serve` with
# networking already, and only one may run per namespace), where it starts
# two servers on free loopback ports, each with a fresh data directory
# under /var/tmp/hutch-bench-lifecycle: `hutch serve --warm 0
# --network=false` (every row) and `hutch serve --network=false` with its
# default warm pool (the warm create rows); runs the harness with the
# arguments given (e.g. ./bench/lifecycle.sh -n 10 -only pause) and always
# stops the servers and removes their sandboxes afterwards. The snapshots
# go to the machine's template store (/var/lib/hutch/templates, or
# $HUTCH_TEMPLATES), named hutch-bench-lc-<pid>-…, and are deleted at the
# end.
# As root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

HUTCH_TEMPLATES=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
export HUTCH_TEMPLATES

if [ -z "${HUTCH_BENCH_LIFECYCLE_NETNS:-}" ]; then
	need_root
	install_peers podman iproute2
	hutch_binaries "$CACHE/lifecycle-bin"
	if ! "$HUTCH" --templates "$HUTCH_TEMPLATES" template inspect base >/dev/null 2>&1; then
		echo "bench: no base template in $HUTCH_TEMPLATES (run scripts/setup.sh)" >&2
		exit 1
	fi
	build_harness lifecycle
	export HUTCH
	in_own_netns HUTCH_BENCH_LIFECYCLE_NETNS ./bench/lifecycle.sh "$@"
fi
own_netns_ready HUTCH_BENCH_LIFECYCLE_NETNS bench/lifecycle.sh

ROOT=/var/tmp/hutch-bench-lifecycle
COLD_DATA=$ROOT/serve
WARM_DATA=$ROOT/serve-warm
mkdir -p "$ROOT"
chmod 0711 "$ROOT"
# Fresh data directories (a killed earlier run's sandboxes removed first),
# cleaned up again on exit.
fresh_data "$COLD_DATA" "$WARM_DATA"
servers_cleanup "$COLD_DATA" "$WARM_DATA"

# A fresh key per run, given to the servers; it is in no file.
E2B_API_KEY=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
export E2B_API_KEY

serve_args="--warm 0 --network=false"
# shellcheck disable=SC2086 # serve_args is a list of words
start_serve "$COLD_DATA" $serve_args
pids="$pids $serve_pid"
cold_addr=$addr

warm_n=$("$HUTCH" serve --help 2>/dev/null | sed -n 's/.*--warm int.*(default \([0-9][0-9]*\)).*/\1/p')
warm_n=${warm_n:-0}
start_serve "$WARM_DATA" --network=false
pids="$pids $serve_pid"
warm_addr=$addr
# Let the pool fill before anything is measured.
tries=0
while [ "$(HUTCH_DATA_DIR=$WARM_DATA "$HUTCH" ps -q | wc -l)" -lt "$warm_n" ] && [ "$tries" -lt 300 ]; do
	tries=$((tries + 1))
	sleep 0.1
done

podman_args=""
if command -v podman >/dev/null; then
	podman_args="-podman $(command -v podman)"
fi

# Not exec: the trap stops the servers and removes sandboxes afterwards.
# shellcheck disable=SC2086 # podman_args is a list of words
"$CACHE/lifecycle" -url "http://$cold_addr" -warm-url "http://$warm_addr" -warm "$warm_n" \
	-serve-args "$serve_args" $podman_args \
	-netns "its own, made by bench/lifecycle.sh (unshare --net): loopback only, no route out" "$@"
