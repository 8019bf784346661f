#!/bin/sh
# Runs every fuzz target of the module (`go test -fuzz`), one after the
# other, DURATION each: ./scripts/fuzz.sh 2s is the smoke run the test
# suite makes (scripts/test.sh); ./scripts/fuzz.sh 5m is a long run, whose
# figures docs/security.md keeps. A target that fails stops the run; the
# input that failed is in the package's testdata/fuzz/<target>/, where
# `go test` runs it from then on (commit it with the fix).
#
# Usage: ./scripts/fuzz.sh [DURATION] [PATTERN]   (PATTERN: a grep -E on
# "package target", to run some targets only)
# FUZZ_PARALLEL (default 2) is how many fuzzing workers each target runs:
# FUZZ_PARALLEL=1 for a long run that keeps to one core beside other work.
# FUZZ_MINIMIZE (default 10s) bounds the minimizing of each new input
# (go test's -fuzzminimizetime): the targets with a real server behind
# them (FuzzPlatformRPC, FuzzPlatformStdio) find "new" coverage in the
# server's own goroutines all the time and spend their run minimizing it
# unless it is 1x.
set -eu
cd "$(dirname "$0")/.."
GO=$(command -v go || echo /usr/local/go/bin/go)
export CGO_ENABLED=0
time=${1:-10s}
only=${2:-.}
parallel=${FUZZ_PARALLEL:-2}
minimize=${FUZZ_MINIMIZE:-10s}

targets=$(
	for dir in $(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u); do
		for name in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort -u); do
			echo "./$dir $name"
		done
	done | grep -E "$only"
)
n=0
start=$(date +%s)
echo "$targets" | while read -r pkg name; do
	[ -n "$pkg" ] || continue
	echo "==> $pkg $name ($time)"
	# Minimizing what a target found is bounded too: on a slow target
	# (the redaction's regular expressions on large inputs) the default
	# minute passes with no execution counted.
	out=$("$GO" test -run '^$' -fuzz "^$name\$" -fuzztime "$time" -fuzzminimizetime "$minimize" -parallel "$parallel" "$pkg" 2>&1) || {
		if ! echo "$out" | grep -q 'Failing input written' && echo "$out" | grep -q 'context deadline exceeded'; then
			# Go's fuzzer reports its own deadline, reached while it
			# minimized a new input, as a failure, with no failing
			# input: not a finding.
			echo "$out" | grep -E '^fuzz: elapsed' | tail -1
			echo "    (the run's deadline came while the fuzzer minimized an input: no failing input)"
			continue
		fi
		echo "$out" | tail -40
		echo "FAIL: $pkg $name (the failing input is under $pkg/testdata/fuzz/$name)" >&2
		exit 1
	}
	echo "$out" | grep -E '^fuzz: elapsed' | tail -1
done
echo "==> fuzzed $(echo "$targets" | grep -c .) targets in $(( $(date +%s) - start )) s"
