#!/bin/sh
# Hutch's networking benchmark: the cost of giving a sandbox its network
# (network.Manager Attach and Detach) beside creating the sandbox without
# one, and TCP throughput and latency through Hutch's NAT and its egress
# proxy next to a direct veth pair. Builds the harness (bench/network) and
# runs it with the arguments given, e.g. ./bench/network.sh -n 500.
# Everything happens in network namespaces the harness makes: the
# machine's own links, firewall and addresses are not touched. The native
# runtime rows run when the base template is installed (scripts/setup.sh
# builds it; this script does not). As root. Not part of the test suite.
# See bench/network/README.md.
set -eu
cd "$(dirname "$0")/.."
. ./bench/lib.sh

need_root
build_harness network
exec "$CACHE/network" -dir "$CACHE" "$@"
