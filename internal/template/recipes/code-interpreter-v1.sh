#!/bin/sh
# Recipe of Hutch's "code-interpreter-v1" template, the default template of
# E2B's code-interpreter SDKs: the base template plus Jupyter kernels and
# the code interpreter's server (RECIPE_FILES: server.py, its IPython
# extension, its start script and the pinned Python requirements), which
# the template's start command runs on port 49999. Run by
# `hutch template build code-interpreter-v1` with ROOTFS (an overlay on
# base), CACHE and RECIPE_FILES set; its text, its files and base's build
# are hashed, so a change to any of them makes the next build rebuild.
#
# In /opt/hutch/code-interpreter:
#   venv/      Python 3.11 (base's) with requirements.txt, exactly: ipykernel,
#              jupyter_client, numpy, pandas, matplotlib, pillow, E2B's
#              e2b-charts, bash_kernel, aiohttp (the server) and their
#              dependencies; the kernel specs python3, deno and bash
#   server.py, start
# and Deno (npm @deno/linux-x64-glibc, pinned) as /usr/local/bin/deno, whose
# Jupyter kernel runs JavaScript and TypeScript.
set -eu
step() { printf '==> %s\n' "$*"; }

DENO_VERSION=2.9.6
case $(uname -m) in
x86_64) deno_package=@deno/linux-x64-glibc ;;
aarch64) deno_package=@deno/linux-arm64-glibc ;;
*) echo "code-interpreter-v1: no Deno build for $(uname -m)" >&2; exit 1 ;;
esac
D=/opt/hutch/code-interpreter

for f in server.py supervise.py start requirements.txt hutch_code_interpreter.py; do
	if ! [ -f "$RECIPE_FILES/$f" ]; then
		echo "code-interpreter-v1: $f missing from RECIPE_FILES=$RECIPE_FILES" >&2
		exit 1
	fi
done
install -d -o root -g root -m 0755 "$ROOTFS$D"
install -o root -g root -m 0644 "$RECIPE_FILES/server.py" "$RECIPE_FILES/supervise.py" "$RECIPE_FILES/requirements.txt" "$ROOTFS$D/"
install -o root -g root -m 0755 "$RECIPE_FILES/start" "$ROOTFS$D/start"

# pip and npm run inside the root, in a private mount namespace, with their
# caches bind-mounted from $CACHE; HTTPS is checked against the host's CA
# bundle (a TLS-inspecting proxy the host trusts works), which is not left
# in the template.
step "installing the Python kernel, its data stack and the server (pip, pinned)"
mkdir -p "$CACHE/pip" "$CACHE/npm" "$ROOTFS/root/.cache/pip" "$ROOTFS/root/.npm"
rm -f "$ROOTFS/etc/resolv.conf"
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf" 2>/dev/null || true
hostca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
cafile=
if [ -f "$hostca" ]; then
	cp "$hostca" "$ROOTFS/tmp/.build-ca.crt"
	cafile=/tmp/.build-ca.crt
fi
D=$D cafile=$cafile deno="$deno_package@$DENO_VERSION" RECIPE_FILES=$RECIPE_FILES \
	unshare --mount --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  mount --bind "$CACHE/pip" "$ROOTFS/root/.cache/pip"
  mount --bind "$CACHE/npm" "$ROOTFS/root/.npm"
  in_root() {
    chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LC_ALL=C.UTF-8 PIP_CERT="$cafile" NPM_CONFIG_CAFILE="$cafile" \
      PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 \
      ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} \
      ${NPM_CONFIG_REGISTRY:+NPM_CONFIG_REGISTRY=$NPM_CONFIG_REGISTRY} \
      ${https_proxy:+https_proxy=$https_proxy} ${HTTPS_PROXY:+HTTPS_PROXY=$HTTPS_PROXY} \
      ${http_proxy:+http_proxy=$http_proxy} ${HTTP_PROXY:+HTTP_PROXY=$HTTP_PROXY} \
      ${no_proxy:+no_proxy=$no_proxy} ${NO_PROXY:+NO_PROXY=$NO_PROXY} \
      "$@"
  }
  in_root python3 -m venv "$D/venv"
  # Exactly the pinned set: --no-deps, then pip check fails on anything
  # requirements.txt left out.
  in_root "$D/venv/bin/pip" install --quiet --no-deps -r "$D/requirements.txt"
  in_root "$D/venv/bin/pip" check
  site=$(in_root "$D/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()[\"purelib\"])")
  install -m 0644 "$RECIPE_FILES/hutch_code_interpreter.py" "$ROOTFS$site/hutch_code_interpreter.py"
  in_root "$D/venv/bin/python" -m bash_kernel.install --sys-prefix >/dev/null
  echo "==> installing Deno ($deno, npm) for JavaScript and TypeScript"
  in_root npm install --global --ignore-scripts --no-fund --no-audit --no-update-notifier --loglevel=error "$deno"
  ln -sf "../lib/node_modules/${deno%@*}/deno" "$ROOTFS/usr/local/bin/deno"
  in_root deno --version | head -n 1
'
rm -rf "$ROOTFS/tmp/.build-ca.crt" "$ROOTFS/root/.npm/_logs" "$ROOTFS/root/.cache/pip"
rmdir "$ROOTFS/root/.cache" 2>/dev/null || true

# The venv is user's, as a notebook's environment is its user's: `%pip
# install` in a cell adds to it (in that sandbox's own layer).
chown -R "$(awk -F: '$1 == "user" { print $3 ":" $4 }' "$ROOTFS/etc/passwd")" "$ROOTFS$D/venv"

step "writing the kernel specs"
kernels=$ROOTFS$D/venv/share/jupyter/kernels
install -d "$kernels/python3" "$kernels/deno"
# Every kernel dies with the server (setpriv --pdeathsig: a server killed
# leaves none running); Python's -P keeps the directory it starts in off
# sys.path. The extension adds E2B's result formats (dataframes, charts);
# figures are results through matplotlib's inline backend; history stays
# in memory.
cat >"$kernels/python3/kernel.json" <<EOF
{
  "argv": ["setpriv", "--pdeathsig", "KILL", "$D/venv/bin/python", "-P", "-m", "ipykernel_launcher", "-f", "{connection_file}",
           "--IPKernelApp.extensions=hutch_code_interpreter", "--HistoryManager.hist_file=:memory:"],
  "env": {"MPLBACKEND": "module://matplotlib_inline.backend_inline"},
  "display_name": "Python 3",
  "language": "python"
}
EOF
cat >"$kernels/deno/kernel.json" <<EOF
{
  "argv": ["setpriv", "--pdeathsig", "KILL", "/usr/local/bin/deno", "jupyter", "--kernel", "--conn", "{connection_file}"],
  "env": {"NO_COLOR": "1"},
  "display_name": "Deno",
  "language": "typescript"
}
EOF
rm -rf "$kernels/python3/logo-"* 2>/dev/null || true
cat >"$kernels/bash/kernel.json" <<EOF
{
  "argv": ["setpriv", "--pdeathsig", "KILL", "$D/venv/bin/python", "-P", "-m", "bash_kernel", "-f", "{connection_file}"],
  "codemirror_mode": "shell",
  "env": {"PS1": "\$"},
  "display_name": "Bash",
  "language": "bash"
}
EOF

# matplotlib builds its font cache on first import (seconds): build it now,
# as the sandbox's user, into its home.
step "building matplotlib's font cache for user"
user_ids=$(awk -F: '$1 == "user" { print $3 ":" $4 }' "$ROOTFS/etc/passwd")
if [ -z "$user_ids" ]; then
	echo "code-interpreter-v1: the base template has no user account" >&2
	exit 1
fi
D=$D user_ids=$user_ids unshare --mount --net --propagation private sh -eu -c '
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  chroot --userspec="$user_ids" "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/home/user LANG=C.UTF-8 "$D/venv/bin/python" -c "import matplotlib.pyplot, pandas"
'

# The server must run offline as the sandbox's user and answer each
# language: started in network and pid namespaces of its own (whatever it
# leaves running dies with them), asked over loopback.
step "checking the server and its kernels offline, as user"
D=$D user_ids=$user_ids unshare --mount --net --pid --fork --propagation private sh -eu -c '
  ip link set lo up
  mount -t proc proc "$ROOTFS/proc"
  mount --rbind /dev "$ROOTFS/dev"
  mount -t tmpfs tmpfs "$ROOTFS/tmp"
  # envd stands in: the server asks it (GET /auth) whether a request may
  # run code; this sandbox has no access token, so envd would say 204.
  python3 -c "
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer((\"127.0.0.1\", 49983), H).serve_forever()
" &
  chroot --userspec="$user_ids" "$ROOTFS" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/home/user LANG=C.UTF-8 "$D/start" >"$ROOTFS/tmp/server.log" 2>&1 &
  server=$!
  ok=
  for i in $(seq 1 600); do
    if curl -sf http://127.0.0.1:49999/health >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.1
  done
  if [ -z "$ok" ]; then
    echo "code-interpreter-v1: the server did not become ready:" >&2
    cat "$ROOTFS/tmp/server.log" >&2
    exit 1
  fi
  run() {
    curl -sS --max-time 120 -H "Content-Type: application/json" -d "$2" http://127.0.0.1:49999/execute >"$ROOTFS/tmp/out"
    if ! grep -q "$3" "$ROOTFS/tmp/out"; then
      echo "code-interpreter-v1: $1 did not print $3:" >&2
      cat "$ROOTFS/tmp/out" "$ROOTFS/tmp/server.log" >&2
      exit 1
    fi
    echo "    $1: ok"
  }
  run python "{\"code\": \"import numpy, pandas, PIL, matplotlib.pyplot as plt\\nplt.plot([1, 2]); plt.show()\\n6 * 7\"}" "\"png\""
  run python "{\"code\": \"6 * 7\"}" "\"text\": \"42\""
  run javascript "{\"language\": \"javascript\", \"code\": \"const a = 6; a * 7\"}" "\"text\": \"42\""
  run typescript "{\"language\": \"typescript\", \"code\": \"const b: number = 6; b * 7\"}" "\"text\": \"42\""
  run bash "{\"language\": \"bash\", \"code\": \"echo \$((6 * 7))\"}" "42"
  kill $server
  wait $server || true
'
# The sandbox runtime writes this per sandbox, as in base.
rm -f "$ROOTFS/etc/resolv.conf"
: >"$ROOTFS/etc/resolv.conf"
step "done"
