#!/bin/sh
# Hutch's envd benchmark: command round trips in a running sandbox (envd's
# process.Process/Start) next to runc exec and crun exec into running
# containers, and /files upload and download throughput. Installs runc and
# crun from Debian when missing, builds hutch and the base template,
# prepares the OCI bundle under /var/cache/hutch/bench, builds the harness
# (bench/envd: also the sandbox's init and envd, so envd as built from this
# checkout) and runs it with the arguments given, e.g. ./bench/envd.sh -n 500.
# As root. Not part of the test suite. See bench/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

need_root
install_peers runc crun
setup_hutch
build_harness envd
echo "==> OCI bundle in $CACHE"
write_bundle "$CACHE/bundle-idle" "$CACHE/bundle/rootfs" '"/bin/sleep", "infinity"'
exec "$CACHE/envd" -dir "$CACHE" "$@"
