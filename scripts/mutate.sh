#!/usr/bin/env bash
# Mutation score of the core packages (docs/mutation.md), at the lowest CPU priority.
# Usage: scripts/mutate.sh [PKG...]   (SAMPLE=n SEED=s PARALLEL=p in the environment)
set -euo pipefail
GO=${GO:-go}
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(registry outbox/postgres breaker breaker/sharedstate outbox)
# PostgreSQL store's rules are proven in integration/outbox (against the machine's
# PostgreSQL, DATABASE_URL); the hour-long outage scenario is left out for time.
pg_run='^(Test(PostgresStoreConformance|DeadRows|Retention|Backlog|MemoryStoreMatchesPostgres|PlansDoNotDependOnStatistics|PoisonRowEndsAlone|Concurrent|KeyOrderThroughAnOutage|HeaderKeys|WithoutNotify|TwoServices|OnCall|Enqueue|CircuitOpenHolds|BrokerUnreachable|Deferral|AttemptsExhaustion|UnknownStatus|InvalidDestination|MigrateTwice|RunStopLeaves|HoldWithout|FailureWithErrorText|DeleteSettled|RelaysShareTheRows|UnusableDestination|ProcessorWakesOnCommit|ListenerConnectors|TwoDispatchers|NewTableName|TheZeroTableName|StatementsAreWritten|DeadFilterWithEmptyIDs|RequeueBeyondOneBatch|StoreCallsAreBoundedByTheTimeout|Listener(OptionBounds|Reconnect|Without|Connectors|Check)|StoreOnANamedTable|RowWithForeignHeaders|BacklogByDestinationOnPostgres)|Example)'
bin=$(mktemp -d)/mutate
trap 'rm -rf "$(dirname "$bin")"' EXIT
$GO build -o "$bin" ./internal/tools/mutate
for p in "${pkgs[@]}"; do
	flags=(-sample "${SAMPLE:-0}" -seed "${SEED:-1}" -parallel "${PARALLEL:-2}")
	case $p in
	outbox/postgres) nice -n 19 "$bin" "${flags[@]}" -run "$pg_run" ./outbox/postgres ./outbox/postgres ./integration/outbox ;;
	*) nice -n 19 "$bin" "${flags[@]}" "./$p" ;;
	esac
done
