#!/bin/sh
# Hutch's code interpreter benchmark: p50/p95/p99 of create →
# first RunCode("1+1") of a code-interpreter-v1 sandbox, cold (`hutch
# serve --warm 0`) and from a warm pool (`--warm-template
# code-interpreter-v1=N`), a RunCode round trip in a warm context, and the
# memory of an idle code interpreter sandbox (its memory cgroup, its
# anonymous memory, the PSS of its processes; a base sandbox beside it),
# with E2B's published figures beside them where there are any; see
# bench/codeinterp/main.go for what each row times.
# Uses /usr/local/bin/hutch when it is this checkout's or builds hutch and
# hutch-sandbox into /var/cache/hutch/bench/codeinterp-bin, builds the
# harness (bench/codeinterp), then re-executes itself in a network
# namespace of its own (unshare --net: the host's may have a `hutch serve`
# with networking already, and only one may run per namespace), where it
# starts two servers on free loopback ports, each with a fresh data
# directory under /var/tmp/hutch-bench-codeinterp: `hutch serve --warm 0
# --network=false` and `hutch serve --warm 0 --warm-template
# code-interpreter-v1=N --network=false` (N: -pool, default 2, read
# before the harness's own arguments); runs the harness with the other
# arguments given (e.g. ./bench/codeinterp.sh -n 5 -only cold,rt) and
# always stops the servers and removes their sandboxes afterwards. The
# templates are read from the machine's store (/var/lib/hutch/templates,
# or $HUTCH_TEMPLATES), never written.
# As root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

HUTCH_TEMPLATES=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
export HUTCH_TEMPLATES
POOL=2
if [ "${1:-}" = "-pool" ]; then
	POOL=$2
	shift 2
fi

if [ -z "${HUTCH_BENCH_CODEINTERP_NETNS:-}" ]; then
	need_root
	install_peers iproute2
	hutch_binaries "$CACHE/codeinterp-bin"
	for t in code-interpreter-v1 base; do
		if ! "$HUTCH" --templates "$HUTCH_TEMPLATES" template inspect "$t" >/dev/null 2>&1; then
			echo "bench: no $t template in $HUTCH_TEMPLATES (run scripts/setup.sh)" >&2
			exit 1
		fi
	done
	build_harness codeinterp
	export HUTCH
	in_own_netns HUTCH_BENCH_CODEINTERP_NETNS ./bench/codeinterp.sh -pool "$POOL" "$@"
fi
own_netns_ready HUTCH_BENCH_CODEINTERP_NETNS bench/codeinterp.sh

ROOT=/var/tmp/hutch-bench-codeinterp
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

start_serve "$WARM_DATA" --warm 0 --warm-template "code-interpreter-v1=$POOL" --network=false
pids="$pids $serve_pid"
warm_addr=$addr

# Not exec: the trap stops the servers and removes sandboxes afterwards.
"$CACHE/codeinterp" -url "http://$cold_addr" -warm-url "http://$warm_addr" -warm "$POOL" \
	-warm-data "$WARM_DATA" -hutch "$HUTCH" -serve-args "$serve_args" \
	-netns "its own, made by bench/codeinterp.sh (unshare --net): loopback only, no route out" "$@"
