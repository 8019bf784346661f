#!/bin/sh
# Hutch's OpenSandbox protocol benchmark: what serving OpenSandbox's execd
# on the host by translating each call into calls to the sandbox's envd
# (internal/osbexecd) costs, against E2B's path to the same sandboxes
# (docs/opensandbox.md). Against one `hutch serve --network=false` of this
# checkout at a time, first with --warm 0, then with its default warm
# pool, on free loopback ports with data directories of their own under
# /var/tmp/hutch-bench-osb: create → first command through OpenSandbox's
# Python SDK and E2B's (and from Go without an SDK), then, in one running
# sandbox, a command round trip and files of 4 KiB and 1 MiB written and
# read back through each SDK, and the same command and files as raw
# execd and envd calls from Go; both paths take turns, p50/p95/p99 side by
# side with the difference. See bench/opensandbox/main.go.
# Uses /usr/local/bin/hutch when it is this checkout's or builds hutch and
# hutch-sandbox into /var/cache/hutch/bench/osb-bin; the SDKs are the
# pinned ones of test/opensandbox/requirements.txt (opensandbox 1.1.1) and
# test/e2bpy/requirements.txt (e2b), in the venvs the tests use
# (/var/cache/hutch/venv, made the first time; that needs PyPI). Builds
# the harness (bench/opensandbox), kills the sandboxes through the API and
# stops the servers, and removes whatever a killed run left. Arguments go
# to the harness, e.g. ./bench/opensandbox.sh -n 50 -n-create 20 (a quick
# check) or -only cmd,raw. As root. Not part of the test suite. See
# bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

need_root
hutch_binaries "$CACHE/osb-bin"
templates=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}
export HUTCH_TEMPLATES="$templates"
if ! "$HUTCH" --templates "$templates" template inspect base >/dev/null 2>&1; then
	echo "bench: no base template in $templates (run scripts/setup.sh)" >&2
	exit 1
fi
python_venv test/opensandbox/requirements.txt
OSB_PYTHON=$PYTHON
python_venv test/e2bpy/requirements.txt
E2B_PYTHON=$PYTHON
# serve's default warm pool: the harness waits for its refills.
warm_n=$("$HUTCH" serve --help 2>/dev/null | sed -n 's/.*--warm int.*(default \([0-9][0-9]*\)).*/\1/p')
build_harness opensandbox

ROOT=/var/tmp/hutch-bench-osb
DATAS="$ROOT/serve-cold $ROOT/serve-warm"
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
trap 'cleanup' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A fresh key per run, given to the servers; it is in no file.
E2B_API_KEY=e2b_$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
export E2B_API_KEY

# Not exec: the trap removes what is left afterwards.
"$CACHE/opensandbox" -hutch "$HUTCH" -dir "$ROOT" -templates "$templates" -warm "${warm_n:-4}" \
	-osb-python "$OSB_PYTHON" -e2b-python "$E2B_PYTHON" -worker "$PWD/bench/opensandbox/worker.py" "$@"
