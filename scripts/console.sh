#!/bin/sh
# Builds the web console (web/console) into internal/console/dist, which is
# committed: `go build` then needs no Node.js. scripts/test.sh runs this and
# fails when the result differs from what is committed.
#   1. npm ci: the exact packages of web/console/package-lock.json, from
#      npm's cache under /var/cache/hutch/npm when it has them;
#   2. the TypeScript of envd's Connect services, from api/'s .proto files
#      (protoc-gen-es through the buf the Go module pins);
#   3. tsc checks the types (esbuild only strips them);
#   4. esbuild: one minified script and one style sheet, no source maps,
#      nothing that varies from run to run.
set -eu
cd "$(dirname "$0")/.."
GO=$(command -v go || echo /usr/local/go/bin/go)
export npm_config_cache="${npm_config_cache:-/var/cache/hutch/npm}"

cd web/console
npm ci --no-audit --no-fund --loglevel=error
rm -rf src/gen
"$GO" tool buf generate ../../api --template buf.gen.yaml
# Types are checked here, not by esbuild (which only strips them).
./node_modules/.bin/tsc -p .

out=../../internal/console/dist
rm -rf "$out"
mkdir -p "$out/assets"
cp index.html "$out/index.html"
./node_modules/.bin/esbuild src/main.ts \
	--bundle --minify --format=esm --target=es2022,chrome120,firefox120 \
	--legal-comments=eof --charset=utf8 --log-level=warning \
	--entry-names=app --outdir="$out/assets"
echo "console: built $(cd "$out" && find . -type f | LC_ALL=C sort | tr '\n' ' ')"
