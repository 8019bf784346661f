# Shared steps of the benchmark scripts (bench/run.sh, bench/envd.sh);
# sourced, not run. Every step is cached: quick the second time.

CACHE=/var/cache/hutch/bench
# Host uid/gid that the OCI containers' root maps to (65536 ids from here):
# the /etc/subuid convention, far below Hutch's own range (2^20 and up).
OCI_HOST_ID=100000
GO=$(command -v go || echo /usr/local/go/bin/go)

need_root() {
	if [ "$(id -u)" != 0 ]; then
		echo "bench: run as root (sandboxes and containers need namespaces and cgroups)" >&2
		exit 1
	fi
}

# install_peers PKG...: the peers, from Debian's packages, when missing.
install_peers() {
	missing=""
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
	done
	if [ -n "$missing" ]; then
		echo "==> installing the peers:$missing"
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $missing
	fi
}

# setup_hutch: hutch and the base template (scripts/setup.sh), and which
# Hutch is measured, for the results' header.
setup_hutch() {
	./scripts/setup.sh
	HUTCH_BENCH_REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "$(git status --porcelain -- cmd internal api go.mod go.sum 2>/dev/null)" ]; then
		HUTCH_BENCH_REV="$HUTCH_BENCH_REV + uncommitted changes"
	fi
	export HUTCH_BENCH_REV
}

# build_harness NAME: bench/NAME, built outside the repository into $CACHE.
build_harness() {
	mkdir -p "$CACHE"
	echo "==> building the harness bench/$1"
	CGO_ENABLED=0 "$GO" build -trimpath -o "$CACHE/$1.new" "./bench/$1"
	mv "$CACHE/$1.new" "$CACHE/$1"
}

# write_bundle DIR ROOTFS ARGS: an OCI bundle from bench/oci/config.json.in;
# ARGS is the process's argv as JSON strings ("/bin/true"). Its rootfs
# directory stays empty on the host: the harness mounts the template there,
# read-only and idmapped, in a mount namespace of its own.
write_bundle() {
	mkdir -p "$1" "$CACHE/bundle/rootfs"
	sed -e "s|@ROOTFS@|$2|" -e "s|@ARGS@|$3|" -e "s|@HOSTID@|$OCI_HOST_ID|g" \
		bench/oci/config.json.in >"$1/config.json"
}

# remove_sandboxes DATA: sandboxes outlive a server by design; remove those
# of a data directory (a killed earlier run's, or this run's), 100 per
# hutch rm.
remove_sandboxes() {
	ids=$(HUTCH_DATA_DIR=$1 "$HUTCH" ps -q 2>/dev/null || true)
	if [ -n "$ids" ]; then
		echo "==> removing $(echo "$ids" | wc -l) sandboxes left in $1"
		echo "$ids" | HUTCH_DATA_DIR=$1 xargs -n 100 "$HUTCH" rm >/dev/null
	fi
}

# serve_cleanup DATA: removes DATA's sandboxes now and arranges that on
# exit (or INT, TERM) the server start_serve started stops and they are
# removed again.
serve_cleanup() {
	cleanup_data=$1
	remove_sandboxes "$cleanup_data"
	serve_pid=""
	trap 'stop_serve; remove_sandboxes "$cleanup_data"' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# fresh_data DIR...: each DIR made empty (0711), a killed earlier run's
# sandboxes in it removed first.
fresh_data() {
	for d in "$@"; do
		if [ -d "$d" ]; then
			remove_sandboxes "$d"
			rm -rf --one-file-system "$d" "$d.log"
		fi
		mkdir -p "$d"
		chmod 0711 "$d"
	done
}

# servers_cleanup DIR...: on exit (or INT, TERM) every server whose pid is
# in $pids stops and the sandboxes left in each DIR are removed.
servers_cleanup() {
	cleanup_dirs="$*"
	pids=""
	trap 'stop_servers' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# stop_servers: what servers_cleanup arranged, now.
stop_servers() {
	for pid in $pids; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in $pids; do
		wait "$pid" 2>/dev/null || true
	done
	pids=""
	for d in $cleanup_dirs; do
		remove_sandboxes "$d"
	done
}

# stop_serve: stops the server start_serve started, if it runs.
stop_serve() {
	if [ -n "$serve_pid" ]; then
		kill -TERM "$serve_pid" 2>/dev/null || true
		wait "$serve_pid" 2>/dev/null || true
		serve_pid=""
	fi
}

# health ADDR: whether the hutch serve at ADDR answers GET /health.
health() {
	if command -v curl >/dev/null; then
		curl -fsS -o /dev/null "http://$1/health" 2>/dev/null
	else
		wget -q -O /dev/null "http://$1/health" 2>/dev/null
	fi
}

# start_serve DATA [FLAGS...]: starts `hutch serve` ($HUTCH) on a free
# loopback port with data directory DATA (log DATA.log) and the key in
# E2B_API_KEY, waits until it answers, and sets addr (host:port) and
# serve_pid; exits the script with the log when it does not come up.
start_serve() {
	data=$1
	shift
	echo "==> starting hutch serve${*:+ $*} (data $data, log $data.log)"
	HUTCH_DATA_DIR=$data HUTCH_API_KEY=$E2B_API_KEY \
		"$HUTCH" serve --listen 127.0.0.1:0 "$@" >"$data.log" 2>&1 &
	serve_pid=$!
	addr=""
	tries=0
	while [ -z "$addr" ] || ! health "$addr"; do
		if ! kill -0 "$serve_pid" 2>/dev/null; then
			echo "bench: hutch serve exited:" >&2
			cat "$data.log" >&2
			exit 1
		fi
		tries=$((tries + 1))
		if [ "$tries" -gt 300 ]; then
			echo "bench: hutch serve did not answer GET /health within 30 s:" >&2
			cat "$data.log" >&2
			exit 1
		fi
		sleep 0.1
		[ -n "$addr" ] || addr=$(sed -n 's/.*msg=serving addr=\([0-9.:]*\).*/\1/p' "$data.log" | head -n 1)
	done
}

# hutch_binaries DIR: sets HUTCH to a hutch of this checkout, with its
# hutch-sandbox beside it, both stamped with the hash of their source as
# scripts/setup.sh stamps them: /usr/local/bin/hutch when its stamp is this
# checkout's, else both built into DIR (kept there: built again only when
# the source changed). Unlike setup_hutch, /usr/local/bin and the
# templates are left as they are. Sets HUTCH_BENCH_REV as setup_hutch does.
hutch_binaries() {
	stamp=hutch_build_$(find cmd internal api go.mod go.sum -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-24)
	stamped() {
		[ -x "$1" ] && "$GO" version -m "$1" 2>/dev/null | grep -q -- "-tags=$stamp\$"
	}
	if stamped /usr/local/bin/hutch && stamped /usr/local/bin/hutch-sandbox; then
		HUTCH=/usr/local/bin/hutch
		echo "==> /usr/local/bin/hutch is this checkout's ($stamp)"
	else
		HUTCH=$1/hutch
		if ! stamped "$1/hutch" || ! stamped "$1/hutch-sandbox"; then
			echo "==> building hutch and hutch-sandbox ($stamp) into $1"
			mkdir -p "$1"
			CGO_ENABLED=0 "$GO" build -trimpath -tags "$stamp" -o "$1/hutch.new" ./cmd/hutch
			CGO_ENABLED=0 "$GO" build -trimpath -tags "$stamp" -o "$1/hutch-sandbox.new" ./cmd/hutch-sandbox
			mv "$1/hutch-sandbox.new" "$1/hutch-sandbox"
			mv "$1/hutch.new" "$1/hutch"
		fi
	fi
	HUTCH_BENCH_REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [ -n "$(git status --porcelain -- cmd internal api go.mod go.sum 2>/dev/null)" ]; then
		HUTCH_BENCH_REV="$HUTCH_BENCH_REV + uncommitted changes"
	fi
	export HUTCH HUTCH_BENCH_REV
}

# in_own_netns VAR SCRIPT ARGS...: re-executes SCRIPT (with sh) with ARGS
# in a network namespace of its own (unshare --net), VAR=1 in its
# environment telling it so (export what else it needs first). Does not
# return.
in_own_netns() {
	netns_var=$1
	netns_script=$2
	shift 2
	echo "==> continuing in a network namespace of its own (unshare --net)"
	export "$netns_var=1"
	exec unshare --net -- sh "$netns_script" "$@"
}

# own_netns_ready VAR SCRIPT: in the SCRIPT in_own_netns re-executed
# (VAR set): refuses to go on in PID 1's network namespace (VAR set by
# hand), then brings loopback up.
own_netns_ready() {
	if [ "$(readlink /proc/self/ns/net)" = "$(readlink /proc/1/ns/net)" ]; then
		echo "bench: $1 is set but this is PID 1's network namespace; run $2 without it" >&2
		exit 1
	fi
	ip link set lo up
}

# venv_path REQUIREMENTS: sets VENV_DIR to where python_venv keeps the
# venv of REQUIREMENTS, and VENV_BASE to the python3 it is made with:
# /var/cache/hutch/venv/<the first 16 hex digits of the sha256 of the base
# python's path, its sys.version and the file>, exactly as
# test/internal/hutchtest.PythonVenv keys it (its TestBenchVenvPath checks
# that the two agree), so the tests' venvs and the benches' are the same.
venv_path() {
	VENV_BASE=/usr/bin/python3
	[ -x "$VENV_BASE" ] || VENV_BASE=$(command -v python3) || {
		echo "bench: python3 is required (run ./scripts/setup.sh)" >&2
		exit 1
	}
	venv_version=$("$VENV_BASE" -c 'import sys, venv; print(sys.version)') || {
		echo "bench: $VENV_BASE has no venv module (run ./scripts/setup.sh)" >&2
		exit 1
	}
	VENV_DIR=/var/cache/hutch/venv/$({ printf '%s\n%s\n' "$VENV_BASE" "$venv_version"; cat "$1"; } | sha256sum | cut -c1-16)
}

# python_venv REQUIREMENTS: sets PYTHON to the python of a virtual
# environment holding exactly the packages of REQUIREMENTS (every one
# pinned name==version), made the first time as
# test/internal/hutchtest.PythonVenv makes it: in a directory beside
# VENV_DIR (venv_path), under the same lock, `python3 -m venv`, `pip
# install --no-deps -r`, `pip check`, then renamed into place.
python_venv() {
	if grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$1" | grep -v -q -E '^[A-Za-z0-9._-]+==[^<>=!~*,; ]+$'; then
		echo "bench: $1: every requirement must be pinned (name==version)" >&2
		exit 1
	fi
	venv_path "$1"
	PYTHON=$VENV_DIR/bin/python
	[ -x "$PYTHON" ] && return 0
	venv_cache=$(dirname "$VENV_DIR")
	mkdir -p "$venv_cache"
	echo "==> making the venv for $1 in $VENV_DIR"
	(
		flock 9
		[ -x "$PYTHON" ] && exit 0
		tmp=$(mktemp -d "$venv_cache/.build-XXXXXX")
		trap 'rm -rf "$tmp"' EXIT
		"$VENV_BASE" -m venv "$tmp/venv"
		pip="$tmp/venv/bin/python -m pip --disable-pip-version-check --no-input"
		# PIP_* from the environment must not change what gets installed.
		for v in $(env | sed -n 's/^\(PIP_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
		PIP_CONFIG_FILE=/dev/null $pip install --no-deps --cache-dir "$venv_cache/../pip" -r "$1"
		PIP_CONFIG_FILE=/dev/null $pip check
		mv "$tmp/venv" "$VENV_DIR"
	) 9>"$venv_cache/.lock"
}
