#!/bin/sh
# Hutch's TLS benchmark: what serving TLS costs, p50/p95/p99 side by side
# in one run, with the same client against the same sandbox: plain
# HTTP/1.1 to `hutch serve` by address (E2B_API_URL mode); Hutch's own TLS
# (--domain hutch.localhost --tls-self-signed, port 443) over HTTP/1.1 and
# HTTP/2; nginx terminating TLS with HTTP/2 in front of `hutch serve
# --domain` on plain HTTP, with docs/tls.md's configuration and with
# upstream connections kept alive. Sections: envd's GET /health and a
# Connect Stat on a kept-alive connection, a new connection with its
# handshake, 1 MiB up and down through /files, Start of /bin/true; then
# requests/s with 32 at once (one HTTP/2 connection or 32 HTTP/1.1 ones)
# and the CPU per request of each server. See bench/tls/main.go.
# Installs Debian's nginx when it is missing (and says so), uses
# /usr/local/bin/hutch when it is this checkout's or builds hutch and
# hutch-sandbox into /var/cache/hutch/bench/tls-bin, builds the harness
# (bench/tls), then re-executes itself in a network namespace of its own
# (unshare --net: loopback only, so that the servers can have ports 443
# and 3000 whatever the host runs), where the harness starts the servers
# one at a time with a fresh data directory under
# /var/tmp/hutch-bench-tls; it always stops them and removes the sandbox
# afterwards. Arguments go to the harness, e.g. ./bench/tls.sh -n 500
# -only plain,tls-h2. Names under .localhost are not resolved: the client
# dials the loopback address itself. As root. Not part of the test suite.
# See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

if [ -z "${HUTCH_BENCH_TLS_NETNS:-}" ]; then
	need_root
	install_peers nginx iproute2
	hutch_binaries "$CACHE/tls-bin"
	templates=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
	if ! "$HUTCH" --templates "$templates" template inspect base >/dev/null 2>&1; then
		echo "bench: no base template in $templates (run scripts/setup.sh)" >&2
		exit 1
	fi
	build_harness tls
	export HUTCH
	in_own_netns HUTCH_BENCH_TLS_NETNS ./bench/tls.sh "$@"
fi
own_netns_ready HUTCH_BENCH_TLS_NETNS bench/tls.sh

ROOT=/var/tmp/hutch-bench-tls
DATA=$ROOT/serve
mkdir -p "$ROOT"
chmod 0711 "$ROOT"
# A fresh data directory: a killed earlier run's sandbox removed first.
if [ -d "$DATA" ]; then
	remove_sandboxes "$DATA"
	rm -rf "$DATA"
fi
mkdir -p "$DATA"
chmod 0711 "$DATA"
trap 'remove_sandboxes "$DATA"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh key per run, given to the servers; it is in no file.
E2B_API_KEY=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
export E2B_API_KEY

# Not exec: the trap removes the sandbox afterwards.
"$CACHE/tls" -hutch "$HUTCH" -nginx "$(command -v nginx || echo /usr/sbin/nginx)" -data "$DATA" -dir "$ROOT" \
	-netns "its own, made by bench/tls.sh (unshare --net): loopback only, no route out" "$@"
