#!/bin/sh
# Recipe of Hutch's "base" template: a Debian bookworm root like E2B's base
# image. Run by `hutch template build base` with ROOTFS, MIRROR and
# CACHE set; its text is hashed, so editing it makes the next build rebuild.
set -eu
step() { printf '==> %s\n' "$*"; }

step "debootstrap bookworm (minbase) from $MIRROR"
mkdir -p "$CACHE/debootstrap"
debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap" bookworm "$ROOTFS" "$MIRROR"

# Everything below runs in a private mount namespace so that an interrupted
# build leaves no mounts behind on the host.
step "installing packages inside the root"
mkdir -p "$CACHE/apt-archives/partial"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
unshare --mount --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  mount --bind "$CACHE/apt-archives" "$ROOTFS/var/cache/apt/archives"
  chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    DEBIAN_FRONTEND=noninteractive LC_ALL=C sh -eu -c "
      apt-get update -q
      apt-get install -y -q --no-install-recommends \
        bash coreutils procps ca-certificates curl git sudo python3 iproute2 \
        iputils-ping less python-is-python3 python3-pip python3-venv
      apt-get install -y -q --no-install-recommends nodejs npm
      useradd --create-home --uid 1000 --shell /bin/bash user
      echo \"user ALL=(ALL:ALL) NOPASSWD: ALL\" > /etc/sudoers.d/user
      chmod 0440 /etc/sudoers.d/user
      rm -rf /var/lib/apt/lists/*
    "
'
# Sandboxes drop CAP_NET_RAW, and the kernel refuses to execute a file
# whose capabilities ask for one the bounding set lacks (EPERM, even for
# root). ping needs none: it uses ICMP datagram sockets, which every
# sandbox's net.ipv4.ping_group_range opens to all its users.
chroot "$ROOTFS" python3 -c 'import os; os.removexattr("/usr/bin/ping", "security.capability")'
# E2B's base image is python:3.11, where `python` and `pip` are the names
# (python-is-python3 and python3-pip give them here) and pip installs
# packages: Debian marks its Python as managed by apt (PEP 668), which
# makes every `pip install` fail with externally-managed-environment. In a
# sandbox nothing else manages it, so the marker goes.
rm -f "$ROOTFS"/usr/lib/python3*/EXTERNALLY-MANAGED
# Debian's ~/.bash_logout runs clear_console, which fails without a
# console; commands run as bash -l -c (E2B's way) then exit 1 instead of
# their own status under `set -e`. Sandboxes have no console to clear.
for f in "$ROOTFS/etc/skel/.bash_logout" "$ROOTFS/home/user/.bash_logout"; do
  rm -f "$f"
  printf '%s\n' '# ~/.bash_logout: run when a login shell exits; it must not change the exit status.' ':' > "$f"
done
chown 1000:1000 "$ROOTFS/home/user/.bash_logout"
# Every command the SDKs run is a login bash (bash -l -c CMD), and Debian's
# /etc/profile forks id(1) to learn the uid: ~1 ms of each command's start.
# bash knows it already ($EUID); other shells still ask id.
sed -i 's/"$(id -u)"/"${EUID:-$(id -u)}"/' "$ROOTFS/etc/profile"
grep -q 'EUID:-' "$ROOTFS/etc/profile"

# supergateway and the MCP reference servers, pinned, installed so that
# `npx -y supergateway` (mcp-use's SandboxConnector runs exactly that) and
# `npx -y @modelcontextprotocol/server-...` work with no network. Their own
# dependencies are resolved by npm at build time within the ranges the
# packages declare. The servers are the ones the mcp-gateway template
# installs, at the same versions, globally.
#
# supergateway 4 wants node >= 20; 3.4.3 is the newest that runs on
# bookworm's node 18. It connects one MCP SDK Server to every SSE client
# in turn, which @modelcontextprotocol/sdk 1.26 and later refuse ("Already
# connected to a transport"): the process dies on the second GET /sse,
# and mcp-use's readiness probe is the first. So it lives in a project of
# its own, /usr/local/lib/supergateway, whose package.json holds the SDK at
# 1.25.3 (npm's overrides work in a project, not in a global install), with
# its bin linked into /usr/local/bin, where npx finds it by name.
SUPERGATEWAY=3.4.3
SUPERGATEWAY_SDK=1.25.3
NPM_PACKAGES="@modelcontextprotocol/server-filesystem@2026.8.31 \
@modelcontextprotocol/server-memory@2026.8.31 \
@modelcontextprotocol/server-everything@2026.8.31 \
@modelcontextprotocol/server-sequential-thinking@2026.8.31"

# npm runs inside the root, in a private mount namespace, with its cache
# bind-mounted from $CACHE/npm. HTTPS is checked against the host's CA
# bundle, so a build works behind whatever TLS proxy the host trusts; the
# bundle is not left in the template.
#
# npx finds a global package by its name only when a bin of that name
# exists (supergateway); for any other name (@modelcontextprotocol/
# server-memory, bin mcp-server-memory) it asks the registry for the
# package's manifest first, always revalidating, and without a network
# that takes npm's retries (over 25 s) and then fails. So each user's npm
# cache (root, user) gets the packages' manifests, and /etc/npmrc says
# prefer-offline: a cached manifest is used as it is, and npx then runs the
# global bin. Packages not in the cache are fetched as usual.
step "installing supergateway and the MCP reference servers with npm"
mkdir -p "$CACHE/npm" "$ROOTFS/root/.npm"
hostca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
cafile=
if [ -f "$hostca" ]; then
	cp "$hostca" "$ROOTFS/tmp/.build-ca.crt"
	cafile=/tmp/.build-ca.crt
fi
install -d -o root -g root -m 0755 "$ROOTFS/usr/local/lib/supergateway"
printf '%s\n' '{' \
	'  "description": "supergateway for npx -y supergateway (Hutch base template)",' \
	'  "private": true,' \
	"  \"dependencies\": { \"supergateway\": \"$SUPERGATEWAY\" }," \
	"  \"overrides\": { \"@modelcontextprotocol/sdk\": \"$SUPERGATEWAY_SDK\" }" \
	'}' > "$ROOTFS/usr/local/lib/supergateway/package.json"
NPM_PACKAGES=$NPM_PACKAGES cafile=$cafile unshare --mount --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  mount --bind "$CACHE/npm" "$ROOTFS/root/.npm"
  npm() {
    chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LC_ALL=C NPM_CONFIG_CAFILE="$cafile" \
      ${NPM_CONFIG_REGISTRY:+NPM_CONFIG_REGISTRY=$NPM_CONFIG_REGISTRY} \
      ${https_proxy:+https_proxy=$https_proxy} ${HTTPS_PROXY:+HTTPS_PROXY=$HTTPS_PROXY} \
      ${http_proxy:+http_proxy=$http_proxy} ${HTTP_PROXY:+HTTP_PROXY=$HTTP_PROXY} \
      ${no_proxy:+no_proxy=$no_proxy} ${NO_PROXY:+NO_PROXY=$NO_PROXY} \
      npm --no-fund --no-audit --no-update-notifier --loglevel=error "$@"
  }
  npm install --global --ignore-scripts $NPM_PACKAGES
  npm install --prefix /usr/local/lib/supergateway --omit=dev --ignore-scripts
  npm cache add --cache=/tmp/.npm-seed $NPM_PACKAGES
'
rm -rf "$ROOTFS/tmp/.build-ca.crt" "$ROOTFS/root/.npm"
ln -sf ../lib/supergateway/node_modules/supergateway/dist/index.js "$ROOTFS/usr/local/bin/supergateway"
rm -rf "$ROOTFS/tmp/.npm-seed/_logs"
cp -a "$ROOTFS/tmp/.npm-seed" "$ROOTFS/home/user/.npm"
chown -R 1000:1000 "$ROOTFS/home/user/.npm"
mv "$ROOTFS/tmp/.npm-seed" "$ROOTFS/root/.npm"
printf '%s\n' '# Hutch base template: cached manifests are used without asking the' \
	'# registry, so npx runs the preinstalled MCP packages with no network.' \
	'prefer-offline=true' 'update-notifier=false' > "$ROOTFS/etc/npmrc"

# What mcp-use runs must start in the finished root without a network, as
# the sandbox user: supergateway, and each server through npx by package
# name answering an MCP initialize over stdio with a JSON-RPC result.
# Its own pid namespace: whatever the check started ends with it.
step "checking that npx runs them offline"
unshare --mount --net --pid --fork --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  asuser() {
    chroot --userspec=1000:1000 "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
      HOME=/home/user LC_ALL=C sh -c "cd /home/user && exec \"\$@\"" sh "$@"
  }
  asuser timeout 20 npx -y supergateway --help >/dev/null
  echo "    npx -y supergateway: runs"
  # Two SSE clients one after the other (a readiness probe, then the
  # real one) each get their endpoint event.
  ip link set lo up
  asuser timeout 60 npx -y supergateway --port 3000 --stdio mcp-server-memory >/dev/null 2>&1 &
  for i in $(seq 100); do
    curl -s -o /dev/null http://127.0.0.1:3000/ && break
    sleep 0.1
  done
  for i in 1 2; do
    case "$(curl -sN -m 2 http://127.0.0.1:3000/sse || true)" in
    *"event: endpoint"*) ;;
    *) echo "base: supergateway did not answer SSE client $i" >&2; exit 1 ;;
    esac
  done
  echo "    supergateway: serves one SSE client after another"
  init="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"hutch-template-build\",\"version\":\"1\"}}}"
  for server in "server-filesystem /tmp" "server-memory" "server-everything stdio" "server-sequential-thinking"; do
    out=$(echo "$init" | asuser timeout 20 npx -y @modelcontextprotocol/$server 2>/dev/null | head -n 1) || true
    case "$out" in
    *\"result\":*\"protocolVersion\"*) printf "    npx -y @modelcontextprotocol/%s: ok\n" "$server" ;;
    *) echo "base: npx -y @modelcontextprotocol/$server did not answer initialize (got: $out)" >&2; exit 1 ;;
    esac
  done
'
rm -rf "$ROOTFS/home/user/.npm/_logs" "$ROOTFS/root/.npm/_logs"

# The sandbox runtime writes these per sandbox.
: > "$ROOTFS/etc/resolv.conf"
: > "$ROOTFS/etc/hostname"
step "done"
