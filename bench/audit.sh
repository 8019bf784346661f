#!/bin/sh
# Hutch's audit trail benchmark: what recording costs (docs/audit.md).
# Two `hutch serve --network=false` of this checkout on free loopback
# ports, each with its own data directory and its default warm pool, one
# with the audit trail (the default) and one with --no-audit; the harness
# runs the same operations through Hutch's Go SDK on both, alternately
# (Commands.Run("true") and a 4 KiB Files.Write in a running sandbox,
# SetTimeout on it, Create → Kill) and prints p50/p95/p99 on and off side
# by side. Then, in the harness, audit.Log's throughput into a fresh
# database, the writer's batch commits, the database's size per 100k
# events, and GET /events latency against a third `hutch serve` on a
# database of 100,000 events of 100 sandboxes. See bench/audit/main.go.
# Uses /usr/local/bin/hutch when it is this checkout's or builds hutch and
# hutch-sandbox into /var/cache/hutch/bench/audit-bin, builds the harness
# (bench/audit), and works in /var/tmp/hutch-bench-audit (fresh each run:
# the writer's fsyncs hit the disk hutch's data dir is on by default); it
# kills the sandboxes through the API and stops the servers, and removes
# whatever a killed run left. Arguments go to the harness, e.g.
# ./bench/audit.sh -n 50 -n-create 10 -events 20000 (a quick check) or
# -only cmd,timeout. As root. Not part of the test suite. See
# bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

need_root
hutch_binaries "$CACHE/audit-bin"
templates=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
export HUTCH_TEMPLATES="$templates"
if ! "$HUTCH" --templates "$templates" template inspect base >/dev/null 2>&1; then
	echo "bench: no base template in $templates (run scripts/setup.sh)" >&2
	exit 1
fi
# serve's default warm pool: the harness waits for its refills.
warm_n=$("$HUTCH" serve --help 2>/dev/null | sed -n 's/.*--warm int.*(default \([0-9][0-9]*\)).*/\1/p')
build_harness audit

ROOT=/var/tmp/hutch-bench-audit
DATAS="$ROOT/serve-audit $ROOT/serve-no-audit $ROOT/events"
mkdir -p "$ROOT"
chmod 0711 "$ROOT"
# cleanup: sandboxes outlive a server by design; the harness kills its
# own through the API, this removes what a killed run left.
cleanup() {
	for d in $DATAS; do
		[ -d "$d" ] && remove_sandboxes "$d"
	done
	return 0
}
cleanup
for d in $DATAS "$ROOT/writer-log" "$ROOT/writer-single"; do
	rm -rf "$d" "$d.log"
done
trap 'cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh key per run, given to the servers; it is in no file.
E2B_API_KEY=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
export E2B_API_KEY

# Not exec: the trap removes what is left afterwards.
"$CACHE/audit" -hutch "$HUTCH" -dir "$ROOT" -templates "$templates" -warm "${warm_n:-4}" "$@"
