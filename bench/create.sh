#!/bin/sh
# Hutch's create → first command benchmark: `Sandbox.create()` then
# `commands.run('true')` through the official E2B JS SDK against `hutch
# serve`, and the same through Hutch's Go SDK (package sdk, in the
# harness), next to runc, crun and podman starting a container and exec'ing
# /bin/true in it; one at a time, then 50 at once.
# Installs the peers from Debian when missing, builds hutch and the base
# template, prepares the OCI bundle under /var/cache/hutch/bench, builds the
# harness (bench/create), starts its own `hutch serve` on a free loopback
# port with its own data directory, with no warm pool (every create a cold
# start) and, when hutch has one, a second with its default warm pool, runs
# the harness with the arguments given (e.g. ./bench/create.sh -n 200 -c 50)
# and always stops the servers and removes their sandboxes afterwards.
# As root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

HUTCH_TEMPLATES=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
HUTCH=/usr/local/bin/hutch
export HUTCH_TEMPLATES

need_root
if ! command -v node >/dev/null; then
	echo "bench: node is required (the Hutch side runs the official E2B JS SDK)" >&2
	exit 1
fi
if ! [ -d test/e2bjs/js/node_modules/e2b ]; then
	echo "==> installing the E2B JS SDK (test/e2bjs/js, npm ci)"
	(cd test/e2bjs/js && npm ci --no-audit --no-fund)
fi
install_peers runc crun podman
setup_hutch
build_harness create
echo "==> OCI bundle in $CACHE"
write_bundle "$CACHE/bundle-idle" "$CACHE/bundle/rootfs" '"/bin/sleep", "infinity"'

# Two servers, each with its own state (sandboxes' uids must traverse to
# their layers): one that starts every sandbox on demand (--warm 0: the
# cold path) and, when this hutch has a warm pool, one with its default
# pool (what `hutch serve` does out of the box).
COLD_DATA=$CACHE/serve
WARM_DATA=$CACHE/serve-warm
serve_help=$("$HUTCH" serve --help 2>/dev/null || true)
warm_n=0
if echo "$serve_help" | grep -q -e '--warm'; then
	warm_n=$(echo "$serve_help" | sed -n 's/.*--warm int.*(default \([0-9][0-9]*\)).*/\1/p')
	warm_n=${warm_n:-0}
fi
# Sandboxes with loopback only, like the peers' containers (no network
# namespace set-up on the host: no links, nftables or IP forwarding, and no
# traffic anywhere), as the SDK test suite runs serve.
net_args=""
if echo "$serve_help" | grep -q -e '--network '; then
	net_args="--network=false"
fi
mkdir -p "$COLD_DATA" "$WARM_DATA"
chmod 0711 "$COLD_DATA" "$WARM_DATA"

# remove_sandboxes DATA: sandboxes outlive a server by design; remove those
# of a data directory (a killed earlier run's, or this run's).
remove_sandboxes() {
	ids=$(HUTCH_DATA_DIR=$1 "$HUTCH" ps -q 2>/dev/null || true)
	if [ -n "$ids" ]; then
		echo "==> removing $(echo "$ids" | wc -l) sandboxes left in $1"
		echo "$ids" | HUTCH_DATA_DIR=$1 xargs "$HUTCH" rm
	fi
}
remove_sandboxes "$COLD_DATA"
remove_sandboxes "$WARM_DATA"

pids=""
cleanup() {
	for pid in $pids; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in $pids; do
		wait "$pid" 2>/dev/null || true
	done
	pids=""
	remove_sandboxes "$COLD_DATA"
	remove_sandboxes "$WARM_DATA"
}
trap 'cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh key per run, given to the servers rather than made by them, so
# that nothing is printed; it is in no file (the stores keep its hash).
E2B_API_KEY=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
export E2B_API_KEY

# start_serve_tracked DATA ARGS...: start_serve (bench/lib.sh: a free
# loopback port, waits for GET /health, sets addr), with the server
# stopped by cleanup.
start_serve_tracked() {
	start_serve "$@"
	pids="$pids $serve_pid"
}

# shellcheck disable=SC2086 # net_args is a list of words
if [ "$warm_n" -gt 0 ]; then
	start_serve_tracked "$COLD_DATA" --warm 0 $net_args
	cold_url=http://$addr
	start_serve_tracked "$WARM_DATA" $net_args
	warm_url=http://$addr
	# Let the pool fill before anything is measured: its sandboxes are in
	# `hutch ps` from their start; give their envd 2 s more to come up.
	tries=0
	while [ "$(HUTCH_DATA_DIR=$WARM_DATA "$HUTCH" ps -q | wc -l)" -lt "$warm_n" ] && [ "$tries" -lt 300 ]; do
		tries=$((tries + 1))
		sleep 0.1
	done
	sleep 2
	warm_args="-warm-url $warm_url -warm $warm_n -warm-data $WARM_DATA"
else
	# No pool in this hutch: every create is a cold start.
	start_serve_tracked "$COLD_DATA" $net_args
	cold_url=http://$addr
	warm_args=""
fi

# Not exec: the trap stops the servers and removes sandboxes afterwards.
# shellcheck disable=SC2086 # warm_args is a list of words
"$CACHE/create" -dir "$CACHE" -rootfs "$HUTCH_TEMPLATES/base/rootfs" \
	-script "$PWD/bench/create/create.mjs" -serve-args "$net_args" -hutch "$HUTCH" \
	-cold-url "$cold_url" $warm_args "$@"
