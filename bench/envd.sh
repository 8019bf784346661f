#!/bin/sh
# Hutch's envd benchmark: command round trips in a running sandbox (envd's
# process.Process/Start) next to runc exec and crun exec into running
# containers, and /files upload and download throughput. Installs runc and
# crun from Debian when missing, builds the base template, prepares the OCI
# bundle under /var/cache/hutch/bench, builds the harness (bench/envd) and
# runs it with the arguments given here, e.g. ./bench/envd.sh -n 500.
# As root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench: run as root (sandboxes and containers need namespaces and cgroups)" >&2
	exit 1
fi

CACHE=/var/cache/hutch/bench
# Host uid/gid that the OCI containers' root maps to, as in bench/run.sh.
OCI_HOST_ID=100000

# 1. The peers, from Debian's packages.
missing=""
for p in runc crun; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "==> installing the peers:$missing"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
fi

# 2. The base template (scripts/setup.sh: cached; it also builds hutch).
./scripts/setup.sh
HUTCH_BENCH_REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain -- cmd internal api go.mod go.sum 2>/dev/null)" ]; then
	HUTCH_BENCH_REV="$HUTCH_BENCH_REV + uncommitted changes"
fi
export HUTCH_BENCH_REV

# 3. The harness, built outside the repository. It is also the sandbox's
# init and envd, so it is envd as built from this checkout.
GO=$(command -v go || echo /usr/local/go/bin/go)
mkdir -p "$CACHE"
echo "==> building the harness"
CGO_ENABLED=0 "$GO" build -trimpath -o "$CACHE/envd.new" ./bench/envd
mv "$CACHE/envd.new" "$CACHE/envd"

# 4. The OCI bundle of the running containers (sleep infinity), the same
# as bench/run.sh's bundle-idle; its rootfs directory stays empty on the
# host (the harness mounts the template there in its own mount namespace).
echo "==> OCI bundle in $CACHE"
mkdir -p "$CACHE/bundle/rootfs" "$CACHE/bundle-idle"
sed -e "s|@ROOTFS@|$CACHE/bundle/rootfs|" -e 's|@ARGS@|"/bin/sleep", "infinity"|' -e "s|@HOSTID@|$OCI_HOST_ID|g" \
	bench/oci/config.json.in >"$CACHE/bundle-idle/config.json"

# 5. Run.
exec "$CACHE/envd" -dir "$CACHE" "$@"
