#!/bin/sh
# Hutch's side-by-side startup benchmark: installs the peers (bwrap, runc,
# crun, podman) from Debian, builds hutch and the base template, prepares
# the OCI bundles under /var/cache/hutch/bench, then runs the Go harness
# (bench/startup) with the arguments given here, e.g. ./bench/run.sh -n 200.
# As root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench: run as root (every contender needs namespaces and cgroups)" >&2
	exit 1
fi

CACHE=/var/cache/hutch/bench
# Host uid/gid that the OCI containers' root maps to (65536 ids from here):
# the /etc/subuid convention, far below Hutch's own range (2^20 and up).
OCI_HOST_ID=100000
TEMPLATES=${HUTCH_TEMPLATES:-/var/lib/hutch/templates}

# 1. The peers, from Debian's packages.
missing=""
for p in bubblewrap runc crun podman; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "==> installing the peers:$missing"
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
fi

# 2. hutch and the base template (scripts/setup.sh: both cached).
./scripts/setup.sh
# Which Hutch is measured, for the results' header.
HUTCH_BENCH_REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain -- cmd internal go.mod go.sum 2>/dev/null)" ]; then
	HUTCH_BENCH_REV="$HUTCH_BENCH_REV + uncommitted changes"
fi
export HUTCH_BENCH_REV

# 3. The harness, built outside the repository.
GO=$(command -v go || echo /usr/local/go/bin/go)
mkdir -p "$CACHE"
echo "==> building the harness"
CGO_ENABLED=0 "$GO" build -trimpath -o "$CACHE/startup.new" ./bench/startup
mv "$CACHE/startup.new" "$CACHE/startup"

# 4. OCI bundles for runc and crun (podman uses the same rootfs). Their
# rootfs directory stays empty on the host: the harness mounts the base
# template there, read-only and idmapped to OCI_HOST_ID, in a mount
# namespace of its own, for as long as it runs.
echo "==> OCI bundles in $CACHE"
mkdir -p "$CACHE/bundle/rootfs" "$CACHE/bundle-idle"
sed -e 's|@ROOTFS@|rootfs|' -e 's|@ARGS@|"/bin/true"|' -e "s|@HOSTID@|$OCI_HOST_ID|g" \
	bench/oci/config.json.in >"$CACHE/bundle/config.json"
sed -e "s|@ROOTFS@|$CACHE/bundle/rootfs|" -e 's|@ARGS@|"/bin/sleep", "infinity"|' -e "s|@HOSTID@|$OCI_HOST_ID|g" \
	bench/oci/config.json.in >"$CACHE/bundle-idle/config.json"

# 5. Run.
PATH=/usr/local/bin:$PATH
export PATH
exec "$CACHE/startup" -dir "$CACHE" -rootfs "$TEMPLATES/base/rootfs" "$@"
