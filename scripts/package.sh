#!/bin/sh
# Builds the hutch .deb into dist/ (or $DIST): static hutch and
# hutch-sandbox (CGO_ENABLED=0), the systemd unit, /etc/default/hutch as a
# conffile, and SHA256SUMS beside it. nfpm's deb packager (pinned in
# packaging/mkdeb/go.mod, from the Go module proxy) makes the package;
# nothing else is needed beyond Go and git.
#   VERSION=1.2.3 ./scripts/package.sh    # a release; else from git
# See docs/operate.md for installing it.
set -eu
cd "$(dirname "$0")/.."

GO=$(command -v go || echo /usr/local/go/bin/go)
DIST=${DIST:-dist}
build=$DIST/build
mkdir -p "$build"

# The version: $VERSION, else the nearest v* tag, else 0.0.0~git, which
# sorts before any release: 0.0.0~gitYYYYMMDD.SHORT (+dirty with changes).
commit=$(git rev-parse HEAD)
commit_epoch=$(git log -1 --format=%ct HEAD)
dirty=""
git diff --quiet HEAD -- 2>/dev/null || dirty="+dirty"
if [ -z "${VERSION:-}" ]; then
	if tag=$(git describe --tags --match 'v[0-9]*' --exact-match 2>/dev/null); then
		VERSION=${tag#v}$dirty
	else
		VERSION=0.0.0~git$(date -u -d "@$commit_epoch" +%Y%m%d).$(git rev-parse --short=12 HEAD)$dirty
	fi
fi
# The build date is the commit's (or SOURCE_DATE_EPOCH's): the same source
# builds the same bytes, so templates that embed hutch (mcp-gateway) are
# not rebuilt for a rebuilt package of the same source.
epoch=${SOURCE_DATE_EPOCH:-$commit_epoch}
build_date=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

# Both binaries carry the same build stamp, as scripts/setup.sh's do: hutch
# uses hutch-sandbox only when it comes from the same build
# (native.FindSandboxBinary).
stamp=hutch_build_$(find cmd internal api go.mod go.sum -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-24)
pkg=github.com/hutch-sandbox/hutch/internal/version
# -buildvcs=auto: Go records the commit itself where it can (GOFLAGS may
# say -buildvcs=false); -X commit is for where it cannot (a git worktree).
ldflags="-s -w -X $pkg.version=$VERSION -X $pkg.buildDate=$build_date -X $pkg.commit=$commit"
echo "==> building hutch $VERSION ($commit, $build_date)"
for bin in hutch hutch-sandbox; do
	CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=auto -tags "$stamp" -ldflags "$ldflags" -o "$build/$bin" "./cmd/$bin"
done

echo "==> packaging with nfpm"
"$GO" build -C packaging/mkdeb -o "$(realpath "$build")/mkdeb" .
DEB_ARCH=$("$GO" env GOARCH)
deb=hutch_${VERSION}_$DEB_ARCH.deb
rm -f "$DIST"/hutch_*.deb
DEB_VERSION=$VERSION DEB_ARCH=$DEB_ARCH DIST_BUILD=$build SOURCE_DATE_EPOCH=$epoch \
	"$build/mkdeb" packaging/nfpm.yaml "$DIST/$deb"

(cd "$DIST" && sha256sum hutch_*.deb >SHA256SUMS)
echo "==> $DIST/$deb"
cat "$DIST/SHA256SUMS"
