#!/bin/sh
# Runs Hutch's whole test suite, as root on a real kernel: set-up (idempotent),
# static checks, unit tests of every package and the end-to-end tests in
# test/, which drive the real binary.
set -eu
cd "$(dirname "$0")/.."
./scripts/setup.sh

GO=$(command -v go || echo /usr/local/go/bin/go)
export CGO_ENABLED=0

echo "==> gofmt, go vet"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed on: $unformatted" >&2
	exit 1
fi
"$GO" vet ./...

echo "==> generated code is up to date"
"$GO" generate ./api ./internal/runtime/native
if ! git diff --quiet -- api internal/runtime/native; then
	git diff --stat -- api internal/runtime/native >&2
	echo "generated code is stale: run go generate ./api ./internal/runtime/native and commit" >&2
	exit 1
fi

echo "==> the web console's built files are up to date"
# internal/console/dist is committed (go build needs no Node.js); it must
# be what scripts/console.sh builds from web/console, byte for byte.
./scripts/console.sh
if [ -n "$(git status --porcelain -- internal/console/dist web/console/src/gen)" ]; then
	git status --short -- internal/console/dist web/console/src/gen >&2
	echo "the console's built files are stale: run ./scripts/console.sh and commit" >&2
	exit 1
fi

echo "==> go test"
# One package at a time: the sandbox-heavy suites share two cores. The
# cluster suite has a stage of its own, below.
"$GO" test -count=1 -p 1 -timeout 15m $("$GO" list ./... | grep -v '/test/cluster$')

echo "==> fuzzing: every fuzz target for 2 s (a smoke run; ./scripts/fuzz.sh 5m is the long one, docs/security.md)"
./scripts/fuzz.sh 2s

echo "==> the gvisor runtime: part of the end-to-end suites again, on hutch serve --runtime gvisor"
# What envd serves (commands, terminals, files, watches, ports), the edge,
# disk limits, what a sandbox can reach of envd and the host, the
# lifecycle, and a restart of the server: docs/runtime.md says why these.
# (go test ./... ran gvisor's conformance suite, its escape attempts, the
# JS SDK's files on gvisor and checkpoints through the SDK already.)
HUTCH_RUNTIME=gvisor "$GO" test -count=1 -p 1 -timeout 15m \
	-run 'TestCommands|TestPty|TestFiles|TestLifecycle|TestPorts|TestKeepBranchComeBack|TestWatch|TestDiskLimits|TestNoHostPathsInside|TestEnvdOutOfReachInside|TestEdgeOutsider' ./test/sdk
HUTCH_RUNTIME=gvisor "$GO" test -count=1 -p 1 -timeout 15m -run 'TestRestartKeepsSandboxes|TestKilledMidCreateLeavesNothing' ./test/e2bjs
# The code interpreter's guards that depend on the runtime (gVisor lists no
# IPv6 socket: the edge's owner check on port 49999; a context's directory).
HUTCH_RUNTIME=gvisor "$GO" test -count=1 -p 1 -timeout 10m -run 'TestRunCode$/(state_across_calls|a_directory_others|another_uid)' ./test/sdk

echo "==> cluster mode: test/cluster (three nodes in network namespaces, on embedded and external etcd)"
# Its own stage, bounded on its own: each test starts a cluster of three
# nodes and the E2B JS suite runs once more through one of them.
if [ -x /usr/bin/etcd ]; then
	"$GO" test -count=1 -p 1 -timeout 25m ./test/cluster
else
	echo "SKIPPED test/cluster: Debian's etcd-server is not installed (/usr/bin/etcd, the external etcd of these tests); ./scripts/setup.sh installs it"
fi
