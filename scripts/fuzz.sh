#!/usr/bin/env bash
# Runs every fuzz target of the root module and the nested modules for FUZZTIME each
# (default 30s). The targets are found by `go test -list`, not listed by hand, so a
# new one is never left out. Stops at the first target that fails.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
modules=(. bench admin/browsertest kgoguard saramaguard watermillguard)
total=0
for m in "${modules[@]}"; do
	[ -f "$m/go.mod" ] || continue
	# Packages with a fuzz target in their tests, then the targets of each.
	pkgs=$(cd "$m" && { grep -rl --include='*_test.go' '^func Fuzz' . || true; } | xargs -r -n1 dirname | sort -u)
	for p in $pkgs; do
		for target in $(cd "$m" && $GO test -list '^Fuzz' "$p" | grep '^Fuzz' || true); do
			echo "fuzz: $target in $p (module $m) for $FUZZTIME"
			(cd "$m" && $GO test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$p")
			total=$((total + 1))
		done
	done
done
echo "fuzz: $total targets, each for $FUZZTIME, no failure"
