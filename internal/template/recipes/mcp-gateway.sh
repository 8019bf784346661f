#!/bin/sh
# Recipe of Hutch's "mcp-gateway" template: the base template (which has
# the MCP reference servers, npm, pinned, installed globally so they run
# offline), plus the Claude Code CLI (`claude`, as E2B's sandboxes have it, for the MCP
# quick start's `claude mcp add`) and the hutch binary as
# /usr/local/bin/mcp-gateway, which E2B's JS SDK starts for
# Sandbox.create({ mcp }). Run by `hutch template build mcp-gateway` with
# ROOTFS (an overlay on base), CACHE and HUTCH_BINARY (a copy
# of the hutch binary) set. Its text is hashed together with base's build and
# the binary's SHA-256, so a change to any of them makes the next build rebuild.
set -eu
step() { printf '==> %s\n' "$*"; }

# Claude Code, exactly this version: the newest whose package declares
# support for the template's Node.js 18 (Debian's nodejs); from 2.1.198 on
# it asks for Node 22. Since 2.1.113 the package is a stub whose postinstall
# (install.cjs, run with Node) hard-links the native binary of an optional
# dependency, @anthropic-ai/claude-code-<platform>, over bin/claude.exe; the
# binary itself needs no Node. Debian's npm 9 ignores the optional
# dependencies' libc field and, installing globally, --omit=optional: it
# adds the musl build too, as large (240 MB). So the glibc package of this
# machine is installed by name, and the wrapper's own node_modules (nothing
# but those optional builds: it has no dependencies) removed.
CLAUDE_CODE_VERSION=2.1.197
case $(uname -m) in
x86_64) claude_platform=linux-x64 ;;
aarch64) claude_platform=linux-arm64 ;;
*) echo "mcp-gateway: no Claude Code build for $(uname -m)" >&2; exit 1 ;;
esac
CLAUDE_PACKAGES="@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION \
@anthropic-ai/claude-code-$claude_platform@$CLAUDE_CODE_VERSION"

# ROOTFS is an overlay on the base template: what this recipe changes
# becomes mcp-gateway's own layer, stacked on base's (shared, not copied).
if ! [ -f "$HUTCH_BINARY" ]; then
	echo "mcp-gateway: no hutch binary at HUTCH_BINARY=$HUTCH_BINARY" >&2
	exit 1
fi

step "installing the hutch binary as /usr/local/bin/mcp-gateway"
install -o root -g root -m 0755 "$HUTCH_BINARY" "$ROOTFS/usr/local/bin/mcp-gateway"
install -d -o root -g root -m 0755 "$ROOTFS/etc/mcp-gateway"

# npm runs inside the root, in a private mount namespace (no mounts outlive
# an interrupted build), with its cache bind-mounted from $CACHE/npm. HTTPS
# is checked against the host's CA bundle, so a build works behind whatever
# TLS proxy the host trusts; the bundle is not left in the template.
# (base's /root/.npm, the seeded cache npx reads offline, is only hidden
# by the bind mount while npm runs, and kept.)
step "installing Claude Code with npm"
mkdir -p "$CACHE/npm"
mkdir -p "$ROOTFS/root/.npm"
rm -f "$ROOTFS/etc/resolv.conf"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
hostca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
cafile=
if [ -f "$hostca" ]; then
	cp "$hostca" "$ROOTFS/tmp/.build-ca.crt"
	cafile=/tmp/.build-ca.crt
fi
CLAUDE_PACKAGES=$CLAUDE_PACKAGES cafile=$cafile unshare --mount --propagation private sh -eu -c '
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
      npm install --global --ignore-scripts --no-fund --no-audit --no-update-notifier \
        --loglevel=error "$@"
  }
  npm $CLAUDE_PACKAGES
  rm -rf "$ROOTFS/usr/local/lib/node_modules/@anthropic-ai/claude-code/node_modules"
  # Its own postinstall, the only one run: place the native binary.
  chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
    sh -c "cd /usr/local/lib/node_modules/@anthropic-ai/claude-code && node install.cjs"
'
rm -rf "$ROOTFS/tmp/.build-ca.crt" "$ROOTFS/root/.npm/_logs"

# Each server (base's) must start in the finished root without a network: answer an
# MCP initialize over stdio with a JSON-RPC result.
step "checking that the servers start offline"
unshare --mount --net --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  init="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"hutch-template-build\",\"version\":\"1\"}}}"
  for server in "mcp-server-filesystem /tmp" "mcp-server-memory" "mcp-server-everything stdio" "mcp-server-sequential-thinking"; do
    out=$(echo "$init" | chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root \
      timeout 20 $server 2>/dev/null | head -n 1) || true
    case "$out" in
    *\"result\":*\"protocolVersion\"*) printf "    %s: ok\n" "$server" ;;
    *) echo "mcp-gateway: $server did not answer initialize (got: $out)" >&2; exit 1 ;;
    esac
  done
  chroot "$ROOTFS" /usr/local/bin/mcp-gateway --help >/dev/null
  echo "    mcp-gateway: runs"
'

# Claude Code must run offline as the sandbox's user, and `claude mcp add`
# (what E2B's MCP quick start runs in the sandbox) must write its
# configuration: in a home of its own under /tmp, removed afterwards so that
# the template carries no configuration of the check.
step "checking that claude runs offline as the sandbox's user"
user_ids=$(awk -F: '$1 == "user" { print $3 ":" $4 }' "$ROOTFS/etc/passwd")
if [ -z "$user_ids" ]; then
	echo "mcp-gateway: the base template has no user account" >&2
	exit 1
fi
check_home=/tmp/.claude-check
rm -rf "$ROOTFS$check_home"
install -d -o "${user_ids%:*}" -g "${user_ids#*:}" -m 0700 "$ROOTFS$check_home"
user_ids=$user_ids check_home=$check_home CLAUDE_CODE_VERSION=$CLAUDE_CODE_VERSION \
	unshare --mount --net --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  claude() {
    chroot --userspec="$user_ids" "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
      HOME="$check_home" TMPDIR="$check_home" LANG=C.UTF-8 \
      sh -c "cd \"\$HOME\" && exec timeout 60 claude \"\$@\"" claude "$@"
  }
  version=$(claude --version)
  case "$version" in
  "$CLAUDE_CODE_VERSION "*) printf "    claude --version: %s\n" "$version" ;;
  *) echo "mcp-gateway: claude --version printed \"$version\", want $CLAUDE_CODE_VERSION" >&2; exit 1 ;;
  esac
  claude mcp add --transport http x http://127.0.0.1:1/mcp --header "Authorization: Bearer t" >/dev/null
  if ! grep -q "http://127.0.0.1:1/mcp" "$ROOTFS$check_home/.claude.json"; then
    echo "mcp-gateway: claude mcp add wrote no server to ~/.claude.json" >&2
    exit 1
  fi
  echo "    claude mcp add: ok"
'
rm -rf "$ROOTFS$check_home"
# The sandbox runtime writes this per sandbox, as in base.
rm -f "$ROOTFS/etc/resolv.conf"
: > "$ROOTFS/etc/resolv.conf"
step "done"
