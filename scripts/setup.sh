#!/bin/sh
# Sets up Hutch on a Debian 12 machine, as root: the Debian packages it
# needs, the hutch binary (/usr/local/bin/hutch) and the templates base,
# mcp-gateway and code-interpreter-v1.
# Safe to re-run: every step is skipped when already done.
set -eu
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "setup: run as root (sandboxes need namespaces, cgroups and mounts)" >&2
	exit 1
fi

# Debian packages: debootstrap builds templates; busybox-static is the
# shell of the small images the tests import; libnss-myhostname resolves
# names under .localhost to this host (hutch serve --domain on a laptop:
# docs/tls.md); python3-venv makes the Python SDK tests' virtualenvs;
# etcd-server is the external etcd of the cluster tests (test/cluster),
# which start it themselves in network namespaces; chromium and firefox-esr
# are the browsers the web console's tests drive (test/console: neither
# playwright-core nor puppeteer-core downloads a browser of its own here);
# the rest are usually there.
pkgs="debootstrap busybox-static ca-certificates util-linux mount e2fsprogs curl python3 python3-venv libnss-myhostname etcd-server chromium firefox-esr"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "==> installing Debian packages:$missing"
	apt-get update -q
	# No package's own service may start on install (etcd-server's would
	# take the machine's ports 2379 and 2380): a policy-rc.d that denies
	# every start, for this install only, unless the machine has one.
	policy=""
	if ! [ -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		policy=/usr/sbin/policy-rc.d
		trap 'rm -f /usr/sbin/policy-rc.d' EXIT
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
	if [ -n "$policy" ]; then
		rm -f "$policy"
		trap - EXIT
	fi
fi
# Nor at boot: etcd-server's package enables its service (systemd and
# SysV); update-rc.d disables both.
if ls /etc/rc[2345].d/S*etcd >/dev/null 2>&1 || [ -n "$(find /etc/systemd/system -name 'etcd*.service' 2>/dev/null)" ]; then
	echo "==> disabling etcd-server's own service (the cluster tests start etcd themselves)"
	update-rc.d etcd disable
fi

# Go: the machine's toolchain; a Go >= 1.21 fetches the exact version go.mod
# asks for from the module proxy by itself.
GO=$(command -v go || true)
[ -n "$GO" ] || GO=/usr/local/go/bin/go
if ! [ -x "$GO" ]; then
	echo "setup: Go is not installed; install Go 1.21 or newer (e.g. into /usr/local/go)" >&2
	exit 1
fi

echo "==> building hutch and hutch-sandbox"
# hutch-sandbox is what runs inside sandboxes (their init and envd); hutch
# uses it when it sits beside hutch and was built from the same source.
# Both carry the same build stamp, a hash of the source they are built
# from: the same source builds the same binaries (so templates that embed
# hutch are not rebuilt for nothing), and a hutch-sandbox of other source
# is never paired with this hutch.
# (A build tag, because Go records -tags in a binary's build information.)
stamp=hutch_build_$(find cmd internal api go.mod go.sum -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-24)
CGO_ENABLED=0 "$GO" build -trimpath -tags "$stamp" -o /usr/local/bin/hutch.new ./cmd/hutch
CGO_ENABLED=0 "$GO" build -trimpath -tags "$stamp" -o /usr/local/bin/hutch-sandbox.new ./cmd/hutch-sandbox
mv /usr/local/bin/hutch-sandbox.new /usr/local/bin/hutch-sandbox
mv /usr/local/bin/hutch.new /usr/local/bin/hutch

# gVisor's runsc, for the gvisor runtime tier (docs/runtime.md): pinned,
# built once from the Go module proxy (Debian's bookworm-backports runsc,
# 20240729, cannot network inside a network namespace on newer kernels:
# gVisor issue 10704), kept in the cache beside the templates' packages.
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
RUNSC_DIR=/var/cache/hutch/runsc/$RUNSC_VERSION
if ! [ -x "$RUNSC_DIR/runsc" ]; then
	echo "==> building gVisor's runsc $RUNSC_VERSION (once: about two minutes)"
	rm -rf "$RUNSC_DIR.new"
	GOBIN="$RUNSC_DIR.new" CGO_ENABLED=0 "$GO" install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
	rm -rf "$RUNSC_DIR"
	mv "$RUNSC_DIR.new" "$RUNSC_DIR"
fi
mkdir -p /usr/local/lib/hutch
install -m 0755 "$RUNSC_DIR/runsc" /usr/local/lib/hutch/runsc.new
mv /usr/local/lib/hutch/runsc.new /usr/local/lib/hutch/runsc

echo "==> building the base template (cached: quick when the recipe is unchanged)"
/usr/local/bin/hutch template build base

# mcp-gateway carries the binary that builds it, so it must be built by the
# one just installed; rebuilt only when that binary, base or its recipe changed.
echo "==> building the mcp-gateway template (cached: quick when up to date)"
/usr/local/bin/hutch template build mcp-gateway

# code-interpreter-v1, the default template of E2B's code-interpreter SDKs:
# base plus Jupyter kernels (Python with its data stack, Deno for
# JavaScript and TypeScript, bash) and the server on port 49999 that runs
# them (docs/code-interpreter.md); pip and npm downloads cached in
# /var/cache/hutch.
echo "==> building the code-interpreter-v1 template (cached: quick when up to date)"
/usr/local/bin/hutch template build code-interpreter-v1
