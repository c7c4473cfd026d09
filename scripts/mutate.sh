#!/usr/bin/env bash
# Mutation score of the core packages (docs/history/mutation.md), at the lowest CPU priority.
# Usage: scripts/mutate.sh [PKG...]   (SAMPLE=n SEED=s PARALLEL=p in the environment)
set -euo pipefail
GO=${GO:-go}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(registry outbox/postgres breaker admission breaker/sharedstate outbox)
# outbox/postgres's own tests run outbox/storetest against the machine's PostgreSQL
# (DATABASE_URL; they skip without a server unless CI=true).
bin=$(mktemp -d)/mutate
trap 'rm -rf "$(dirname "$bin")"' EXIT
$GO build -o "$bin" ./internal/tools/mutate
for p in "${pkgs[@]}"; do
	flags=(-sample "${SAMPLE:-0}" -seed "${SEED:-1}" -parallel "${PARALLEL:-2}")
	nice -n 19 "$bin" "${flags[@]}" "./$p"
done
