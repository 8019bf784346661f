#!/bin/sh
# Hutch's runtime benchmark: the gvisor backend (runsc, systrap) beside the
# native one (namespaces, cgroups, seccomp), p50/p95/p99 in one table:
# create → first command (--warm 0 and with the default warm pool), the
# exec round trip, syscall-heavy workloads (import-heavy python, git status
# over 10,000 files, a byte-compile, a find), /files throughput (64 MiB),
# idle memory per sandbox (1 and 50), pause/resume and snapshots with 64,
# 200 and 448 MiB touched (times and checkpoint size on disk) and fork of
# 4, beside the goals of issue 19; see bench/gvisor/main.go for what each
# row times.
# Builds runsc and the base template through scripts/setup.sh when either
# is missing; uses /usr/local/bin/hutch when it is this checkout's or
# builds hutch and hutch-sandbox into /var/cache/hutch/bench/gvisor-bin;
# builds the harness (bench/gvisor), then re-executes itself in a network
# namespace of its own (unshare --net: the host's may have a `hutch serve`
# with networking already), where it starts four servers on free loopback
# ports, each with a fresh data directory under /var/tmp/hutch-bench-gvisor:
# `hutch serve --runtime native --warm 0 --network=false` and the same with
# `--runtime gvisor` (every row but the warm creates), and both runtimes
# with the default warm pool (the warm create rows); runs the harness with
# the arguments given (e.g. ./bench/gvisor.sh -n 5 -only create,exec) and
# always stops the servers and removes their sandboxes afterwards. The
# snapshots go to the machine's template store (/var/lib/hutch/templates,
# or $HUTCH_TEMPLATES), named hutch-bench-gv-<pid>-…, and are deleted by
# the end; their checkpoints are in the servers' data directories.
# As root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

HUTCH_TEMPLATES=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
RUNSC=/usr/local/lib/hutch/runsc
export HUTCH_TEMPLATES

if [ -z "${HUTCH_BENCH_GVISOR_NETNS:-}" ]; then
	need_root
	install_peers iproute2
	if ! [ -x "$RUNSC" ] || ! [ -d "$HUTCH_TEMPLATES/names" ]; then
		echo "==> runsc or the template store is missing: scripts/setup.sh"
		./scripts/setup.sh
	fi
	hutch_binaries "$CACHE/gvisor-bin"
	if ! "$HUTCH" --templates "$HUTCH_TEMPLATES" template inspect base >/dev/null 2>&1; then
		echo "bench: no base template in $HUTCH_TEMPLATES (run scripts/setup.sh)" >&2
		exit 1
	fi
	build_harness gvisor
	# The pinned version, from the module runsc was built from.
	RUNSC_VERSION=$("$GO" version -m "$RUNSC" 2>/dev/null | awk '$1 == "mod" && $2 == "gvisor.dev/gvisor" { print $3 }')
	export HUTCH RUNSC_VERSION
	in_own_netns HUTCH_BENCH_GVISOR_NETNS ./bench/gvisor.sh "$@"
fi
own_netns_ready HUTCH_BENCH_GVISOR_NETNS bench/gvisor.sh

ROOT=/var/tmp/hutch-bench-gvisor
NATIVE_DATA=$ROOT/native
GVISOR_DATA=$ROOT/gvisor
NATIVE_WARM_DATA=$ROOT/native-warm
GVISOR_WARM_DATA=$ROOT/gvisor-warm
RUNSC_ROOT=$ROOT/runsc-do
ALL_DATA="$NATIVE_DATA $GVISOR_DATA $NATIVE_WARM_DATA $GVISOR_WARM_DATA"
mkdir -p "$ROOT"
chmod 0711 "$ROOT"
# unmount_under DIR: unmounts what is left mounted below DIR, deepest
# first: runsc bind-mounts a network namespace at <its --root>/null-netns
# and never unmounts it.
unmount_under() {
	grep -o " $1/[^ ]*" /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
}
# Fresh data directories: a killed earlier run's sandboxes removed first,
# then whatever they left mounted below them.
fresh() {
	if [ -d "$1" ]; then
		remove_sandboxes "$1"
		unmount_under "$1"
		rm -rf --one-file-system "$1" "$1.log"
	fi
	mkdir -p "$1"
	chmod 0711 "$1"
}
for d in $ALL_DATA "$RUNSC_ROOT"; do
	fresh "$d"
done

pids=""
cleanup() {
	for pid in $pids; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in $pids; do
		wait "$pid" 2>/dev/null || true
	done
	pids=""
	for d in $ALL_DATA; do
		remove_sandboxes "$d"
	done
	unmount_under "$ROOT"
	# The data directories go (their checkpoints can be gigabytes); their
	# logs stay beside them until the next run. Not while anything is
	# still mounted below one: that could be a template's layer.
	for d in $ALL_DATA "$RUNSC_ROOT"; do
		if grep -q " $d/" /proc/self/mountinfo; then
			echo "warning: $d still has mounts below it; left as it is" >&2
		else
			rm -rf --one-file-system "$d"
		fi
	done
	left=$(pgrep -f -- "$ROOT/" || true)
	if [ -n "$left" ]; then
		echo "warning: processes of this run left (shims, runsc): $(echo "$left" | tr '\n' ' ')" >&2
	fi
}
trap 'cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh key per run, given to the servers; it is in no file.
E2B_API_KEY=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
export E2B_API_KEY

cold_args="--warm 0 --network=false"
# shellcheck disable=SC2086 # cold_args is a list of words
start_serve "$NATIVE_DATA" --runtime native $cold_args
pids="$pids $serve_pid"
native_addr=$addr
# shellcheck disable=SC2086
start_serve "$GVISOR_DATA" --runtime gvisor $cold_args
pids="$pids $serve_pid"
gvisor_addr=$addr

warm_n=$("$HUTCH" serve --help 2>/dev/null | sed -n 's/.*--warm int.*(default \([0-9][0-9]*\)).*/\1/p')
warm_n=${warm_n:-0}
start_serve "$NATIVE_WARM_DATA" --runtime native --network=false
pids="$pids $serve_pid"
native_warm_addr=$addr
start_serve "$GVISOR_WARM_DATA" --runtime gvisor --network=false
pids="$pids $serve_pid"
gvisor_warm_addr=$addr

# Not exec: the trap stops the servers and removes sandboxes afterwards.
"$CACHE/gvisor" \
	-native-url "http://$native_addr" -gvisor-url "http://$gvisor_addr" \
	-native-warm-url "http://$native_warm_addr" -gvisor-warm-url "http://$gvisor_warm_addr" -warm "$warm_n" \
	-native-data "$NATIVE_DATA" -gvisor-data "$GVISOR_DATA" \
	-native-warm-data "$NATIVE_WARM_DATA" -gvisor-warm-data "$GVISOR_WARM_DATA" \
	-runsc "$RUNSC" -runsc-version "${RUNSC_VERSION:-unknown}" -runsc-root "$RUNSC_ROOT" \
	-serve-args "$cold_args" \
	-netns "its own, made by bench/gvisor.sh (unshare --net): loopback only, no route out" "$@"
