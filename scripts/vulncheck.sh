#!/usr/bin/env bash
# govulncheck without a network: the vulnerability database comes from the
# golang.org/x/vulndb module (through the Go module proxy, like every dependency),
# indexed by internal/tools/vulndb into a file database. Fails when our code calls a
# vulnerable module; reports (but does not fail on) the Go toolchain's own findings.
# With no database to be had it skips with one line.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
VULNDB_VERSION=${VULNDB_VERSION:-v0.0.0-20261105234957-e22db6528018}
GOVULNCHECK_VERSION=${GOVULNCHECK_VERSION:-v1.9.0}
modules=(. "$@")

src=$($GO mod download -json "golang.org/x/vulndb@$VULNDB_VERSION" 2>/dev/null | sed -n 's/^\s*"Dir": "\(.*\)",*$/\1/p' || true)
if [ -z "$src" ] || [ ! -d "$src/data/osv" ]; then
  echo "vulncheck: skipped, golang.org/x/vulndb@$VULNDB_VERSION cannot be downloaded here"
  exit 0
fi
db="${XDG_CACHE_HOME:-$HOME/.cache}/brokerguard/vulndb-$VULNDB_VERSION"
if [ ! -f "$db/index/modules.json" ]; then
  rm -rf "$db.tmp"
  $GO run ./internal/tools/vulndb index "$src/data/osv" "$db.tmp"
  mv "$db.tmp" "$db"
fi
bin=$($GO env GOPATH)/bin/govulncheck
if ! "$bin" -version 2>/dev/null | grep -q "$GOVULNCHECK_VERSION"; then
  $GO install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION"
fi
status=0
for m in "${modules[@]}"; do
  echo "vulncheck: $m"
  (cd "$m" && "$bin" -db "file://$db" -format json ./...) | $GO run ./internal/tools/vulndb report || status=1
done
exit $status
